"""The pytest plugin (pyproject.toml's pytest11 entry point): the `xl_diff` fixture.

pytest loads every installed plugin before it runs any test, in any project, so this
module imports nothing but pytest: xlgen itself (numpy, the compiler) is imported when a
test asks for the fixture. A broken or partial install then fails only the tests that use
xlgen, never every pytest run in the environment.
"""

import pytest


@pytest.fixture
def xl_diff():
    """`xl_diff(source, workload=None, **options)`: xlgen.testing.assert_backends_agree as a fixture."""
    from .testing import assert_backends_agree

    return assert_backends_agree
