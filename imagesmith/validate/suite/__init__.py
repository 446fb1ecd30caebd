"""The validation suite: pytest-testinfra checks run by ``imagesmith validate`` and ``imagesmith-validate``.

Files run in name order; each check records figures for the report through the ``check`` fixture and fails
with
what is wrong and what to do (``imagesmith.validate.context.fail``).
"""
