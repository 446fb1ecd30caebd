"""Standalone probe scripts, copied to the target and run with its Python (they import torch, never
imagesmith).

Each prints one line ``IMAGESMITH_PROBE <json>`` with its findings; errors are reported inside that JSON so
the
check can say what went wrong instead of showing a traceback.
"""
