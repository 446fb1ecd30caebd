"""GPU-host acceptance suite: pytest-testinfra checks (``suite/``), parsers, criteria and the evidence bundle.

Entry points: ``imagesmith validate TARGET`` and the baked-in ``imagesmith-validate`` console script.
"""
