from imagesmith.entry import run

run()
