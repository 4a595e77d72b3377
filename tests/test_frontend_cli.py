"""The command line of the front end: --version, --help, `check` and `fmt` exit codes and output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen import __version__
from xlgen.cli import main

REPO = Path(__file__).resolve().parent.parent
COUNTER = REPO / "tests" / "programs" / "counter.xl"

UNFORMATTED = """\
pipeline   p
# the request
request { count : i32   # how many
}
stage tick when count<3 { count+=1 }
done when count>=3
"""
FORMATTED = """\
pipeline p

# the request
request {
    count: i32  # how many
}

stage tick when count < 3 {
    count += 1
}

done when count >= 3
"""


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert __version__ in result.output


def test_python_dash_m():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "xlgen", "--version"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and __version__ in proc.stdout


@pytest.mark.parametrize("command", [None, *sorted(main.commands)])
def test_help_shows_examples(command):
    args = ["--help"] if command is None else [command, "--help"]
    result = invoke(*args)
    assert result.exit_code == 0
    assert "Examples:" in result.output
    assert "xlgen " + (command or "") in result.output.split("Examples:")[1]


def test_short_help_flag():
    assert invoke("-h").exit_code == 0


def test_no_command_shows_usage():
    result = invoke()
    assert result.exit_code in (0, 2) and "Usage" in result.output


# ---- check ---------------------------------------------------------------------------------

def test_check_ok():
    result = invoke("check", COUNTER)
    assert result.exit_code == 0
    assert "ok (pipeline counter" in result.stdout
    assert result.stderr == ""


def test_every_file_of_the_bundled_pipeline_checks_on_its_own():
    """Each file in stages/ must import what it uses (not lean on xl_spec.xl's import order)."""
    stages = sorted((Path(__file__).resolve().parent.parent / "stages").glob("*.xl"))
    result = invoke("check", "--werror", *stages)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count(": ok (library:") == len(stages) - 2
    assert "ok (pipeline xl_spec" in result.stdout
    assert "ok (pipeline byte_spec" in result.stdout


def test_a_library_checks_but_does_not_build(tmp_path):
    (tmp_path / "lib.xl").write_text("const K: i32 = 3\nrequest { n: i32 }\nfn twice(x: i32) -> i32 {\n    return x * 2\n}\n")
    checked = invoke("check", "--werror", tmp_path / "lib.xl")
    assert checked.exit_code == 0 and "ok (library: 0 stages, 1 request fields)" in checked.stdout
    (tmp_path / "bad.xl").write_text("request { n: i32 }\nstage s {\n    n = nope\n}\n")
    bad = invoke("check", tmp_path / "bad.xl")
    assert bad.exit_code == 1 and "unknown name 'nope'" in bad.stderr  # a library is still type-checked
    built = invoke("build", tmp_path / "lib.xl", "-o", tmp_path / "out")
    assert built.exit_code == 1
    assert "this file is a library other files import" in built.stderr
    assert not (tmp_path / "out").exists()


def test_check_quiet():
    result = invoke("check", "-q", COUNTER)
    assert result.exit_code == 0 and result.stdout == ""


def test_check_warnings_and_werror(tmp_path):
    path = tmp_path / "w.xl"
    path.write_text("pipeline p\nrequest { count: i32 }\nstage s {\n    let unused = 1\n    count += 1\n}\n"
                    "done when count > 2\n")
    plain = invoke("check", path)
    assert plain.exit_code == 0 and "warning: unused variable 'unused'" in plain.stderr
    strict = invoke("check", "--werror", path)
    assert strict.exit_code == 1


def test_check_several_files_reports_each(tmp_path):
    bad = tmp_path / "bad.xl"
    bad.write_text("pipeline p\nconst A: i32 = 1.5\n")
    result = invoke("check", bad, COUNTER)
    assert result.exit_code == 1
    assert "bad.xl:2:16: error:" in result.stderr
    assert "ok (pipeline counter" in result.stdout


def test_check_needs_a_file():
    result = invoke("check")
    assert result.exit_code == 2 and "Missing argument" in result.output


def test_check_missing_file():
    """A source that is not there is a usage error (2), not a compile error (1)."""
    result = invoke("check", "definitely/not/here.xl")
    assert result.exit_code == 2
    assert "no such file: 'definitely/not/here.xl'" in result.output


@pytest.mark.parametrize("command", [["check"], ["build", "-o", "out"], ["graph"], ["sim"], ["diff"], ["run"],
                                     ["bench"], ["fmt"], ["fmt", "--check"]])
def test_a_missing_source_is_a_usage_error_for_every_command(command, tmp_path):
    result = invoke(*command[:1], tmp_path / "nope.xl", *command[1:])
    assert result.exit_code == 2, result.output
    assert "no such file" in result.output and "Traceback" not in result.output
    if command[0] != "fmt":  # the commands that read a pipeline say which bundled ones a name can give
        assert "bundled pipelines, by name: byte_spec, xl_spec" in result.output


def test_a_bundled_pipeline_by_name(tmp_path, monkeypatch):
    """`xl_spec` (or `xl_spec.xl`) names the bundled pipeline where no such file is, wherever xlgen is installed."""
    monkeypatch.chdir(tmp_path)
    for name in ("xl_spec", "xl_spec.xl"):
        result = invoke("check", name)
        assert result.exit_code == 0, result.output
        assert "stages/xl_spec.xl: ok (pipeline xl_spec" in result.stdout
    (tmp_path / "xl_spec.xl").write_text("pipeline mine\nrequest {\n    n: i32\n}\ndone when n >= 0\n")
    result = invoke("check", "xl_spec.xl")  # a file of that name here comes first
    assert result.exit_code == 0 and "ok (pipeline mine" in result.stdout
    result = invoke("fmt", "--check", "byte_spec")  # fmt rewrites files: it never takes a bundled one by name
    assert result.exit_code == 2 and "no such file" in result.output


# ---- fmt -----------------------------------------------------------------------------------

def test_fmt_check_exit_codes(tmp_path):
    good, bad = tmp_path / "good.xl", tmp_path / "bad.xl"
    good.write_text(FORMATTED)
    bad.write_text(UNFORMATTED)
    assert invoke("fmt", "--check", good).exit_code == 0
    result = invoke("fmt", "--check", good, bad)
    assert result.exit_code == 1
    assert f"would reformat {bad}" in result.stderr
    assert str(good) not in result.stderr
    assert bad.read_text() == UNFORMATTED  # --check never writes


def test_fmt_check_prints_the_diff(tmp_path):
    """`fmt --check` shows what it would change: a unified diff on stdout that turns the file into the
    formatted text, and nothing for a file that is already formatted."""
    import shutil

    good, bad = tmp_path / "good.xl", tmp_path / "bad.xl"
    good.write_text(FORMATTED)
    bad.write_text(UNFORMATTED)
    result = invoke("fmt", "--check", good, bad)
    assert result.exit_code == 1
    diff = result.stdout
    assert diff.startswith(f"--- {bad} (as it is)\n+++ {bad} (formatted)\n@@ ")
    assert str(good) not in diff
    patch = tmp_path / "p.diff"
    patch.write_text(diff)
    if shutil.which("patch"):
        subprocess.run(["patch", "-s", str(bad), str(patch)], check=True)
        assert bad.read_text() == FORMATTED
    assert invoke("fmt", "--check", good).stdout == ""


def test_fmt_rewrites_in_place_keeping_comments(tmp_path):
    path = tmp_path / "p.xl"
    path.write_text(UNFORMATTED)
    result = invoke("fmt", path)
    assert result.exit_code == 0
    assert f"formatted {path}" in result.stdout
    assert path.read_text() == FORMATTED
    again = invoke("fmt", path)
    assert again.exit_code == 0 and again.stdout == ""  # nothing left to change
    assert invoke("fmt", "--check", path).exit_code == 0


def test_fmt_stdout(tmp_path):
    path = tmp_path / "p.xl"
    path.write_text(UNFORMATTED)
    result = invoke("fmt", "--stdout", path)
    assert result.exit_code == 0
    assert result.stdout == FORMATTED
    assert path.read_text() == UNFORMATTED


def test_fmt_syntax_error(tmp_path):
    path = tmp_path / "p.xl"
    path.write_text("pipeline p\nstage s {\n    a = 1;\n}\n")
    result = invoke("fmt", path)
    assert result.exit_code == 1
    assert "p.xl:3:10: error: unexpected ';' (statements need no ';')" in result.stderr
    assert path.read_text() == "pipeline p\nstage s {\n    a = 1;\n}\n"


@pytest.mark.parametrize("kind", ["missing", "directory", "not utf-8"])
def test_fmt_unreadable(tmp_path, kind):
    path = tmp_path / "p.xl"
    if kind == "directory":
        path.mkdir()
    elif kind == "not utf-8":
        path.write_bytes(b"pipeline p\n# \xff\n")
    result = invoke("fmt", "--check", path)
    if kind == "not utf-8":  # it opens: its content is wrong (a compile error)
        assert result.exit_code == 1
        assert " error: " in result.stderr and "internal compiler error" not in result.stderr
    else:  # it does not open as a file: a usage error
        assert result.exit_code == 2
        assert "Error: Invalid value for 'FILES...'" in result.stderr and "internal compiler error" not in result.stderr


def test_fmt_check_on_the_repository_sources():
    """tests/programs and stages/ are kept canonically formatted."""
    files = sorted((REPO / "tests" / "programs").rglob("*.xl")) + sorted((REPO / "stages").glob("*.xl"))
    result = invoke("fmt", "--check", *files)
    assert result.exit_code == 0, result.stderr
