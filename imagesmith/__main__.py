from imagesmith.cli import run

run()
