"""Package discovery for setuptools (everything else is in pyproject.toml).

Every package under xlgen/ is found, so a new subpackage cannot be left out of the
wheel (a hand list once missed xlgen.cli, xlgen.frontend.checker and
xlgen.tools.check.fuzzgen); the data folders (grammar/, templates/, stages/, workloads/,
models/) are added as the xlgen.data.* packages that pyproject.toml's
[tool.setuptools.package-dir] maps them to, read from there so the two cannot
disagree. `.ci/run` builds the wheel, installs it and runs it from elsewhere.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

_HERE = Path(__file__).resolve().parent
_CONFIG = tomllib.loads((_HERE / "pyproject.toml").read_text())["tool"]["setuptools"]
_DATA_PACKAGES = sorted(_CONFIG["package-dir"])  # xlgen.data.grammar -> grammar, ...

setup(packages=find_packages(where=str(_HERE), include=["xlgen", "xlgen.*"]) + _DATA_PACKAGES)
