"""What the wheel holds, checked without building one (.ci/wheel-test builds, installs and runs it):
every package is found, every data file the code reads is package data, the pytest plugin
imports nothing it could miss, and the compile cache is where the docs say."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())


def _setup_packages() -> list[str]:
    """The packages setup.py hands setuptools (run as setuptools would, with setup() captured)."""
    code = ("import sys, setuptools, runpy; found = {}\n"
            "setuptools.setup = lambda **kw: found.update(kw)\n"
            f"runpy.run_path({str(REPO / 'setup.py')!r}); print('\\n'.join(found['packages']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return out.stdout.split()


def test_every_python_package_is_in_the_wheel():
    packages = set(_setup_packages())
    on_disk = {".".join(d.relative_to(REPO).parts) for d in (REPO / "xlgen").rglob("*")
               if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py"))}
    assert on_disk - packages == set(), "packages setup.py does not find (an __init__.py missing?)"
    assert {"xlgen.cli", "xlgen.frontend.checker", "xlgen.tools.check.fuzzgen"} <= packages  # the ones a hand list missed
    for folder in CONFIG["tool"]["setuptools"]["package-dir"]:
        assert folder in packages


def test_every_directory_with_python_files_is_a_package():
    for d in (REPO / "xlgen").rglob("*"):
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")):
            assert (d / "__init__.py").is_file(), f"{d} has modules but no __init__.py"


def _shipped(package: str, relative: str) -> bool:
    patterns = CONFIG["tool"]["setuptools"]["package-data"].get(package, [])
    return relative.endswith(".py") or any(fnmatch.fnmatch(relative, p) for p in patterns)


# Files in the data folders that are deliberately not installed (docs/models.md: the training
# checkpoints and their records, the first draft among them; pair.safetensors holds both models).
NOT_SHIPPED = {"models/bytes_pair/draft.safetensors", "models/bytes_pair/target.safetensors",
               "models/bytes_pair/training.json", "models/bytes_pair/draft_v1.safetensors",
               "models/bytes_pair/distill.json", "models/bytes_pair/draft_agreement.json"}


def test_every_data_file_is_package_data():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = tracked.stdout.split()
    missing = []
    for package, folder in CONFIG["tool"]["setuptools"]["package-dir"].items():
        for name in files:
            if name.startswith(folder + "/") and name not in NOT_SHIPPED and "__pycache__" not in name:
                if not _shipped(package, name[len(folder) + 1:]):
                    missing.append(name)
    for name in files:  # the runtime's own files: the C++ runtime and the prelude
        if name.startswith("xlgen/") and not name.endswith(".py") and not _shipped(
                ".".join(Path(name).parent.parts), Path(name).name):
            missing.append(name)
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data]): {missing}"


def test_the_pytest_plugin_imports_only_pytest():
    """pytest loads it in every project of the environment: it must not import xlgen's modules
    (a broken install would stop every pytest run) nor numpy (every run would pay for it)."""
    entry = CONFIG["project"]["entry-points"]["pytest11"]["xlgen"]
    parents = tuple(entry.rsplit(".", k)[0] for k in range(1, entry.count(".")))  # docstrings only
    code = (f"import sys; import {entry}; "
            "bad = sorted(m for m in sys.modules if m == 'numpy' or (m.startswith('xlgen.') and m not in "
            f"({parents!r} + ({entry!r},)))); print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_fixture_still_works(xl_diff):
    xl_diff(REPO / "tests" / "programs" / "counter.xl", inputs=[{}, {}], max_active=2, backends=["cpu"])


def test_the_gpu_extras():
    extras = CONFIG["project"]["optional-dependencies"]
    assert extras["gpu-cuda12"] == ["cupy-cuda12x"] and extras["gpu-cuda13"] == ["cupy-cuda13x"]
    assert extras["gpu"] == extras["gpu-cuda12"]  # the alias the README documents


# ---- the compile cache ---------------------------------------------------------------------


def test_the_cache_location(monkeypatch, tmp_path):
    from xlgen.core.resources import cache_root

    assert cache_root({"XLGEN_CACHE": "/a", "XDG_CACHE_HOME": "/b"}) == Path("/a")
    assert cache_root({"XDG_CACHE_HOME": "/b"}) == Path("/b/xlgen")
    assert cache_root({"XDG_CACHE_HOME": "relative"}) == Path.home() / ".cache" / "xlgen"  # the XDG rule
    assert cache_root({}) == Path.home() / ".cache" / "xlgen"


def test_generated_code_goes_to_xdg_cache_home(monkeypatch, tmp_path):
    from xlgen.build import load

    monkeypatch.delenv("XLGEN_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    compiled = load(REPO / "tests" / "programs" / "counter.xl")
    assert compiled.dir.parent == tmp_path / "xlgen"
    assert (compiled.dir / "counter_sim.py").is_file()
