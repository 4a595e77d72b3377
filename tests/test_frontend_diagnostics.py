"""Golden diagnostics: every malformed program in tests/diagnostics and what `xlgen check` says about it.

Cases:
- `tests/diagnostics/NAME.xl`: checked as `xlgen check NAME.xl`;
- `tests/diagnostics/NAME/main.xl` (with the files it imports): `xlgen check NAME/main.xl`;
- a few paths that are not readable .xl files (SPECIAL below).

Each is run with tests/diagnostics as the working directory, so paths in the
messages are relative. `NAME.expected` holds exactly what goes to stderr,
then a last line `exit code: N`. Run `pytest --update-golden` to rewrite the
expected files after an intended change to a message, and review the diff.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.cli import main

DIAG = Path(__file__).parent / "diagnostics"
SPECIAL = {
    "no_such_file": "no_such_file.xl",  # a path that does not exist
    "a_directory": "a_directory",  # a directory given as the main file
}


def _cases() -> dict[str, str]:
    cases = {p.stem: p.name for p in sorted(DIAG.glob("*.xl")) if p.is_file()}
    for d in sorted(DIAG.iterdir()):
        if d.is_dir() and (d / "main.xl").is_file():
            cases[d.name] = f"{d.name}/main.xl"
    cases.update(SPECIAL)
    return cases


CASES = _cases()


def run_check(target: str, monkeypatch) -> tuple[str, int]:
    monkeypatch.chdir(DIAG)
    result = CliRunner().invoke(main, ["check", target])
    return result.stderr, result.exit_code


def golden_text(stderr: str, code: int) -> str:
    return f"{stderr}exit code: {code}\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_diagnostics_golden(name, monkeypatch, update_golden):
    stderr, code = run_check(CASES[name], monkeypatch)
    assert "internal compiler error" not in stderr
    assert "Traceback" not in stderr
    expected_path = DIAG / f"{name}.expected"
    actual = golden_text(stderr, code)
    if update_golden:
        expected_path.write_text(actual)
        return
    assert expected_path.exists(), f"no golden file for {name}; run pytest --update-golden and review it"
    assert actual == expected_path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_diagnostics_exit_code(name, monkeypatch):
    """Errors exit 1; a case whose name starts with warn_ (or only warns) exits 0; a main file
    that does not open as a file (SPECIAL) is a usage error, exit 2."""
    stderr, code = run_check(CASES[name], monkeypatch)
    if name in SPECIAL:
        assert code == 2 and "Error: Invalid value for 'FILES...': " in stderr
        return
    errors = " error: " in stderr
    assert code == (1 if errors else 0)
    if name.startswith("warn_"):
        assert not errors and " warning: " in stderr
    else:
        assert errors or " warning: " in stderr


def test_every_golden_file_has_a_case():
    orphans = sorted(p.stem for p in DIAG.glob("*.expected") if p.stem not in CASES)
    assert not orphans, f"golden files without a case: {orphans}"


def test_enough_cases():
    assert len(CASES) >= 45


def test_diagnostics_point_into_the_source():
    """Every `file:line:col` in every golden file names a real line, and the caret sits within it."""
    for name in CASES:
        for line in (DIAG / f"{name}.expected").read_text().splitlines():
            m = re.match(r"(.+?):(\d+):(\d+): (error|warning): ", line)
            if not m:
                continue
            path, lineno, col = m.group(1), int(m.group(2)), int(m.group(3))
            source = (DIAG / path).read_bytes().decode("utf-8", errors="replace").split("\n")
            assert 1 <= lineno <= len(source), (name, line)
            assert 1 <= col <= len(source[lineno - 1]) + 1, (name, line)


def test_check_as_a_subprocess():
    """The real command line: stderr and exit code as a user sees them (no CliRunner)."""
    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "xlgen", "check", "syntax_stray_semicolon.xl"],
                          cwd=DIAG, capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert golden_text(proc.stderr, proc.returncode) == (DIAG / "syntax_stray_semicolon.expected").read_text()
