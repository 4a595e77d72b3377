"""Shared pytest setup.

`pytest --update-golden` rewrites golden files (tests/diagnostics/*.expected)
from the current output instead of comparing against them. Review the diff
before committing it.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output instead of comparing")


@pytest.fixture
def update_golden(request) -> bool:
    return request.config.getoption("--update-golden")
