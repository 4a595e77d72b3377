"""Checking that the backends agree: `diff` (two runs compared bit for bit, divergences
described), `testing` and `pytest_plugin` (diff-tests in a user's own test suite: public as
xlgen.testing and the `xl_diff` fixture), `fuzzgen` (random well-typed programs, the
differential fuzzer).

May import: the layers below xlgen.tools, xlgen.tools.progress and doctor, xlgen.tools.pipeline.
"""
