"""A hostile user's corpus: sources, imports, output paths, fmt, graph, build, resource limits.

Every case runs the real command line and asserts: the exit code, a diagnostic that
says what went wrong, no Python exception text (no traceback, no "internal compiler
error", no exception class name), and no file changed outside the command's output.
The cases are generated from the tables below (`pytest tests/test_hostile_inputs.py -q`
prints how many ran).
"""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.core import files
from xlgen.cli import main
from xlgen.core.files import MAX_SOURCE_BYTES

OK = """\
pipeline ok

request {
    n: i32
}

stage s when n < 3 {
    n += 1
}

done when n >= 3
"""
UNFORMATTED = OK.replace("n += 1", "n+=1").replace("request {", "request   {")

# What must never reach a user: Python's own words for a failure.
PYTHON_TEXT = re.compile(r"Traceback|internal compiler error|\b[A-Z]\w*(Error|Exception)\b|\[Errno|Warning:")


# ---- the harness ---------------------------------------------------------------------------


def snapshot(root: Path) -> dict:
    """Every entry under `root`: its kind and content (files), target (links) or mode."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                seen[p] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                seen[p] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                seen[p] = ("other", stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
    return seen


def run_cli(args: list[str], root: Path, code: int, says: str, may_change: tuple = ()):
    """Run `xlgen ARGS` in `root`; check the exit code, the message, no Python text, no stray changes."""
    before = snapshot(root)
    result = CliRunner().invoke(main, args, catch_exceptions=True)
    out = result.stderr + result.stdout
    assert result.exception is None or isinstance(result.exception, SystemExit), out
    assert result.exit_code == code, f"exit {result.exit_code}, expected {code}:\n{out}"
    assert says.lower() in out.lower(), f"expected {says!r} in:\n{out}"
    assert code not in (1, 2) or "error" in out.lower(), out  # a diagnostic, or click's usage error
    assert not PYTHON_TEXT.search(out), out
    after = snapshot(root)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    allowed = [root / m for m in may_change] + [root / "cache"]  # sim and diff cache generated code there
    stray = {p for p in changed if not any(p == a or a in p.parents for a in allowed)}
    assert not stray, f"changed outside the output: {sorted(map(str, stray))}"
    return out


@pytest.fixture
def root(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XLGEN_CACHE", str(tmp_path / "cache"))
    (work / "ok.xl").write_text(OK)
    (tmp_path / "victim.txt").write_text("the user's file\n")  # outside work/: links point here
    return tmp_path


# ---- hostile sources and imports ------------------------------------------------------------
# Each maker builds the hostile thing in `work` and returns the source path to give the command
# and the words the diagnostic must contain.


def _program(body: str, extra: str = "") -> str:
    return f"pipeline p\n{extra}\nrequest {{\n    n: i32\n    b: bool\n}}\n\nstage s {{\n{body}\n}}\n\ndone when n >= 0\n"


def _importing(w: Path, target: str) -> str:
    (w / "main.xl").write_text(f'pipeline p\nimport "{target}"\nrequest {{\n    n: i32\n}}\ndone when n >= 0\n')
    return "main.xl"


def _chain(w: Path, n: int, last: str) -> str:
    for i in range(n):
        nxt = f'import "m{i + 1}.xl"\n' if i < n - 1 else last
        (w / f"m{i}.xl").write_text(nxt + f"const C{i}: i32 = {i}\n")
    return _importing(w, "m0.xl")


def _calls(n: int) -> str:
    fns = "".join(f"fn g{i}(x: i32) -> i32 {{\n    return {f'g{i + 1}(x)' if i < n - 1 else 'x'} + 1\n}}\n"
                  for i in range(n))
    return _program("    n = g0(n)", fns)


SOURCES = {
    # name: (maker(work) -> (path, words), heavy: run through check and build only)
    "missing": (lambda w: ("nope.xl", "no such file"), False),
    "directory": (lambda w: (w.joinpath("d.xl").mkdir() or "d.xl", "is a directory"), False),
    "fifo": (lambda w: (os.mkfifo(w / "f.xl") or "f.xl", "not a regular file (a FIFO)"), False),
    "dev zero": (lambda w: ("/dev/zero", "not a regular file (a device)"), False),
    "dev null": (lambda w: ("/dev/null", "not a regular file (a device)"), False),
    "link loop": (lambda w: (os.symlink("loop.xl", w / "loop.xl") or "loop.xl", "symbolic link loop"), False),
    "dangling link": (lambda w: (os.symlink("gone.xl", w / "l.xl") or "l.xl", "no such file"), False),
    "parent is a file": (lambda w: ("ok.xl/x.xl", "not a directory"), False),
    "name too long": (lambda w: ("a" * 5000 + ".xl", "too long"), False),
    "over 1 MiB": (lambda w: (w.joinpath("big.xl").write_text(OK + "#" * MAX_SOURCE_BYTES) and "big.xl",
                              "larger than 1048576 bytes"), False),
    "not UTF-8": (lambda w: (w.joinpath("u.xl").write_bytes(b"pipeline p\n# \xff\xfe\n") and "u.xl",
                             "not valid UTF-8"), False),
    "NUL bytes": (lambda w: (w.joinpath("z.xl").write_bytes(b"pipeline p\n\0\0\0\n") and "z.xl",
                             "unexpected character"), False),
    "500k parentheses": (lambda w: (w.joinpath("p.xl").write_text(
        "pipeline p\nconst C: i32 = " + "(" * 500_000 + "1" + ")" * 500_000 + "\n") and "p.xl",
        "nesting too deep"), False),
    "a million parentheses": (lambda w: (w.joinpath("p.xl").write_text(
        "pipeline p\nconst C: i32 = " + "(" * 10 ** 6 + "1" + ")" * 10 ** 6 + "\n") and "p.xl",
        "larger than 1048576 bytes"), False),
    "400k minus signs": (lambda w: (w.joinpath("m.xl").write_text(
        "pipeline p\nconst C: i32 = " + "-" * 400_000 + "1\n") and "m.xl", "nesting too deep"), False),
    "50k conditionals": (lambda w: (w.joinpath("c.xl").write_text(
        "pipeline p\nconst C: i32 = " + "true ? 1 : " * 50_000 + "1\n") and "c.xl", "nesting too deep"), False),
    "3000 nested ifs": (lambda w: (w.joinpath("i.xl").write_text(
        _program("if true { " * 3000 + "n = 1" + " }" * 3000)) and "i.xl", "nesting too deep"), False),
    "3000 elifs": (lambda w: (w.joinpath("e.xl").write_text(_program(
        "    if n == 0 {\n        n = 1\n    }" + "".join(f" elif n == {i} {{\n        n = 1\n    }}"
                                                    for i in range(1, 3000)))) and "e.xl", "nesting too deep"), False),
    "21 nested loops": (lambda w: (w.joinpath("l.xl").write_text(_program(
        "".join(f"for i{k} in 0..1 {{ " for k in range(21)) + "n = 1" + " }" * 21)) and "l.xl",
        "loops nest too deep"), False),
    "3000 helper calls": (lambda w: (w.joinpath("h.xl").write_text(_calls(3000)) and "h.xl",
                                     "function calls nest too deep"), True),
    "import a FIFO": (lambda w: (os.mkfifo(w / "f.xl") or _importing(w, "f.xl"), "not a regular file"), False),
    "import /dev/zero": (lambda w: (_importing(w, "/dev/zero"), "not a regular file (a device)"), False),
    "import a directory": (lambda w: (w.joinpath("d").mkdir() or _importing(w, "d"), "is a directory"), False),
    "import the empty path": (lambda w: (_importing(w, ""), "is a directory"), False),
    "import a link loop": (lambda w: (os.symlink("loop.xl", w / "loop.xl") or _importing(w, "loop.xl"),
                                      "symbolic link loop"), False),
    "import a two-link loop": (lambda w: (os.symlink("b.xl", w / "a.xl") or os.symlink("a.xl", w / "b.xl")
                                          or _importing(w, "a.xl"), "symbolic link loop"), False),
    "import a NUL path": (lambda w: (_importing(w, "a\0b.xl"), "NUL character"), False),
    "import over 1 MiB": (lambda w: (w.joinpath("big.xl").write_text("#" * (MAX_SOURCE_BYTES + 1)) and
                                     _importing(w, "big.xl"), "larger than 1048576 bytes"), False),
    "import not UTF-8": (lambda w: (w.joinpath("u.xl").write_bytes(b"const A: i32 = 1 # \xc3\x28\n") and
                                    _importing(w, "u.xl"), "not valid UTF-8"), False),
    "import a missing absolute path": (lambda w: (_importing(w, "/nonexistent/dir/x.xl"), "no such file"), False),
    "import a pipeline": (lambda w: (_importing(w, "ok.xl"), "must not declare 'pipeline'"), False),
    "3000-file import chain ending in an error": (
        lambda w: (_chain(w, 3000, "const BAD: i32 = nowhere\n"), "unknown name"), True),
    "3000-file import cycle": (lambda w: (_chain(w, 3000, 'import "m0.xl"\n'), "import cycle"), True),
}

COMMANDS = {  # name: (arguments before the source, arguments after it)
    "check": (["check"], []),
    "fmt": (["fmt"], []),
    "fmt --check": (["fmt", "--check"], []),
    "fmt --stdout": (["fmt", "--stdout"], []),
    "build": (["build"], ["-o", "out"]),
    "graph": (["graph"], []),
    "sim": (["sim"], []),
    "diff": (["diff"], []),
}


def _source_cases():
    for source, (_, heavy) in SOURCES.items():
        for command in COMMANDS:
            if heavy and command not in ("check", "build"):
                continue
            if "import" in source and command.startswith("fmt"):  # fmt formats one file; it reads no imports
                continue
            yield pytest.param(source, command, id=f"{source}-{command}")


# A main source that does not open as a readable regular file is a usage error (exit 2, before
# anything runs); one that opens but does not compile (its content, its imports) is exit 1.
UNOPENABLE = {"missing", "directory", "fifo", "dev zero", "dev null", "link loop", "dangling link",
              "parent is a file", "name too long"}


@pytest.mark.parametrize("source, command", list(_source_cases()))
def test_hostile_source(root, source, command):
    maker, _ = SOURCES[source]
    path, says = maker(root / "work")
    before, after = COMMANDS[command]
    started = time.monotonic()
    run_cli(before + [path] + after, root, 2 if source in UNOPENABLE else 1, says)
    assert time.monotonic() - started < 10  # at once, not after minutes of work


def test_a_long_import_chain_is_fine(root):
    """3,000 files, each importing the next: followed without Python recursion."""
    work = root / "work"
    _chain(work, 3000, "")
    (work / "main.xl").write_text(OK.replace("pipeline ok\n", 'pipeline ok\nimport "m0.xl"\n'))
    out = run_cli(["check", "main.xl"], root, 0, "ok (pipeline ok")
    assert "error" not in out


def test_a_chain_of_one_hundred_calls_runs(root):
    """The call-chain limit is 100: a chain of 100 checks, builds and agrees across backends."""
    (root / "work" / "h.xl").write_text(_calls(100))
    run_cli(["diff", "h.xl", "--count", "2"], root, 0, "identical: sim == cpu")
    (root / "work" / "h.xl").write_text(_calls(101))
    run_cli(["check", "h.xl"], root, 1, "more than 100 functions")


def test_sixteen_nested_loops_run(root):
    """The loop limit is 16 (Python compiles at most 20 nested blocks): 16 run in every backend."""
    (root / "work" / "l.xl").write_text(_program(
        "".join(f"for i{k} in 0..1 {{ " for k in range(16)) + "n = 1" + " }" * 16))
    run_cli(["diff", "l.xl", "--count", "2"], root, 0, "identical: sim == cpu")


def test_a_file_name_that_is_not_utf8(root):
    """Odd bytes in a source's name: diagnostics and listings escape them, generated files stay UTF-8."""
    work = root / "work"
    name = os.fsdecode(b"\xff.xl")
    (work / name).write_text(OK)
    env = dict(os.environ, XLGEN_CACHE=str(root / "cache"), PYTHONIOENCODING="utf-8")
    for args in (["check", name], ["build", name, "-o", os.fsdecode(b"out\xfe")], ["diff", name]):
        result = subprocess.run([sys.executable, "-m", "xlgen", *args], cwd=work, env=env, capture_output=True,
                                text=True, errors="replace", timeout=120)
        assert result.returncode == 0, result.stderr
        assert not PYTHON_TEXT.search(result.stdout + result.stderr), result.stderr
    assert (work / os.fsdecode(b"out\xfe") / "ok_sim.py").read_text(encoding="utf-8").startswith("# Generated")


def test_empty_path_arguments(root):
    for args in (["check", ""], ["fmt", ""], ["build", "ok.xl", "-o", ""], ["build", ""], ["graph", "ok.xl", "-o", ""],
                 ["graph", " "]):
        run_cli(args, root, 2, "is not a path")


# ---- build: the output directory ------------------------------------------------------------

BUILT = ("ok_sim.py", "ok_kernel.cuh", "ok_cpu.cpp", "ok_gpu.cu")


def _link_out(w: Path, target: str):
    (w / "out").mkdir()
    os.symlink(target, w / "out" / "ok_sim.py")


OUTPUTS = {
    # name: (setup(work) -> -o value, words, extra build options)
    "-o is a file": (lambda w: "ok.xl", "exists and is not a directory", []),
    "-o's parent is a file": (lambda w: "ok.xl/sub/dir", "'ok.xl' is a file, not a directory", []),
    "-o is /dev/null": (lambda w: "/dev/null", "exists and is not a directory", []),
    "-o is a link loop": (lambda w: os.symlink("o", w / "o") or "o", "exists and is not a directory", []),
    "-o name too long": (lambda w: "o" * 5000, "too long", []),
    "a generated name links out of the directory": (
        lambda w: _link_out(w, "../../victim.txt") or "out", "is a symbolic link", []),
    "a generated name links inside the directory": (
        lambda w: _link_out(w, "ok_cpu.cpp") or "out", "is a symbolic link", []),
    "a generated name is a dangling link": (
        lambda w: _link_out(w, "../../created_elsewhere.txt") or "out", "is a symbolic link", []),
    "a generated name is a directory": (
        lambda w: (w / "out" / "ok_cpu.cpp").mkdir(parents=True) or "out", "is a directory", []),
    "a generated name is a FIFO": (
        lambda w: (w / "out").mkdir() or os.mkfifo(w / "out" / "ok_gpu.cu") or "out", "not a regular file", []),
    "--check, -o is a file": (lambda w: "ok.xl", "exists and is not a directory", ["--check"]),
    "--check, a generated name links out": (
        lambda w: _link_out(w, "../../victim.txt") or "out", "is a symbolic link", ["--check"]),
    "--check, a generated name is a FIFO": (
        lambda w: (w / "out").mkdir() or os.mkfifo(w / "out" / "ok_sim.py") or "out", "not a regular file",
        ["--check"]),
}


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_hostile_output_directory(root, case):
    setup, says, extra = OUTPUTS[case]
    out = setup(root / "work")
    run_cli(["build", "ok.xl", "-o", out, *extra], root, 1, says)
    assert not (root / "created_elsewhere.txt").exists()


def test_build_into_a_fresh_directory_writes_only_there(root):
    run_cli(["build", "ok.xl", "-o", "a/b/out"], root, 0, "created", may_change=("work/a",))
    assert sorted(p.name for p in (root / "work" / "a" / "b" / "out").iterdir()) == sorted(BUILT)


def _fail_on(monkeypatch, name: str, err: int, after: int = 0):
    """Make <name> (os.write, os.replace, os.open, tempfile.mkstemp) fail with `err` from its
    (after+1)-th call on, as a full disk, a size limit or a permission would."""
    import tempfile

    owner = tempfile if name == "mkstemp" else os
    real = getattr(owner, name)
    calls = [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise OSError(err, os.strerror(err))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


FAILURES = {  # a write that fails, as the file system would make it fail
    "disk full on write": ("write", errno.ENOSPC, "no space left on the device"),
    "file size limit on write": ("write", errno.EFBIG, "file size limit"),
    "read-only directory (no temporary file)": ("mkstemp", errno.EACCES, "permission denied"),
    "read-only file system": ("mkstemp", errno.EROFS, "read-only"),
    "quota exceeded": ("write", errno.EDQUOT, "quota exceeded"),
    "rename fails": ("replace", errno.EIO, "Input/output error"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_build_failure_leaves_the_old_files(root, monkeypatch, failure):
    work = root / "work"
    run_cli(["build", "ok.xl", "-o", "out"], root, 0, "created", may_change=("work/out",))
    (work / "ok.xl").write_text(OK.replace("n < 3", "n < 4").replace("n >= 3", "n >= 4"))  # every file changes
    name, err, says = FAILURES[failure]
    _fail_on(monkeypatch, name, err, after=0)
    run_cli(["build", "ok.xl", "-o", "out"], root, 1, says)  # nothing changed: not even a temporary file


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_fmt_failure_leaves_the_source(root, monkeypatch, failure):
    (root / "work" / "u.xl").write_text(UNFORMATTED)
    name, err, says = FAILURES[failure]
    _fail_on(monkeypatch, name, err)
    run_cli(["fmt", "u.xl"], root, 1, says)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_graph_failure_leaves_the_old_picture(root, monkeypatch, failure):
    (root / "work" / "states.dot").write_text("the old picture\n")
    name, err, says = FAILURES[failure]
    _fail_on(monkeypatch, name, err)
    run_cli(["graph", "ok.xl", "-o", "states.dot"], root, 1, says)


def test_fmt_of_a_read_only_file(root):
    path = root / "work" / "u.xl"
    path.write_text(UNFORMATTED)
    path.chmod(0o444)
    run_cli(["fmt", "u.xl"], root, 1, "is read-only")


def test_fmt_through_a_link_formats_its_target_and_keeps_the_link(root):
    work = root / "work"
    (work / "real.xl").write_text(UNFORMATTED)
    (work / "real.xl").chmod(0o640)
    os.symlink("real.xl", work / "link.xl")
    run_cli(["fmt", "link.xl"], root, 0, "formatted link.xl", may_change=("work/real.xl",))
    assert os.readlink(work / "link.xl") == "real.xl"
    assert stat.S_IMODE(os.stat(work / "real.xl").st_mode) == 0o640
    assert (work / "real.xl").read_text() == CliRunner().invoke(main, ["fmt", "--stdout", "real.xl"]).stdout


# ---- graph -o ----------------------------------------------------------------------------------

GRAPHS = {
    "missing directory": (lambda w: "nodir/states.dot", 1, "no such directory"),
    "parent is a file": (lambda w: "ok.xl/states.dot", 1, "no such directory"),
    "-o is a directory": (lambda w: (w / "d.dot").mkdir() or "d.dot", 1, "is a directory"),
    "-o is a link": (lambda w: os.symlink("../victim.txt", w / "l.dot") or "l.dot", 1, "is a symbolic link"),
    "-o is a FIFO": (lambda w: os.mkfifo(w / "f.dot") or "f.dot", 1, "not a regular file"),
    "unknown format": (lambda w: "states.txt", 2, "give a file ending in .dot"),
    "no suffix": (lambda w: "states", 2, "give a file ending in .dot"),
}


@pytest.mark.parametrize("case", sorted(GRAPHS))
def test_hostile_graph_output(root, case):
    setup, code, says = GRAPHS[case]
    run_cli(["graph", "ok.xl", "-o", setup(root / "work")], root, code, says)


# ---- resource limits in a real process ---------------------------------------------------------


def _limited(args: list[str], cwd: Path, fsize: int) -> subprocess.CompletedProcess:
    """`xlgen ARGS` in a process whose files may not grow past `fsize` bytes (RLIMIT_FSIZE)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, XLGEN_CACHE=str(cwd.parent / "cache"))
    return subprocess.run([sys.executable, "-m", "xlgen", *args], cwd=cwd, preexec_fn=limit, env=env,
                          capture_output=True, text=True, timeout=120)


def test_fmt_under_a_file_size_limit_keeps_the_source(root):
    work = root / "work"
    text = UNFORMATTED + "".join(f"const C{i}: i32 = {i}+1\n" for i in range(400))  # ~8 KB formatted
    (work / "u.xl").write_text(text)
    before = snapshot(root)
    result = _limited(["fmt", "u.xl"], work, 4096)
    assert result.returncode == 1, result.stderr
    assert "file size limit" in result.stderr and not PYTHON_TEXT.search(result.stderr)
    assert snapshot(root) == before  # the source as it was, no temporary file left


def test_build_under_a_file_size_limit_keeps_the_old_files(root):
    work = root / "work"
    run_cli(["build", "ok.xl", "-o", "out"], root, 0, "created", may_change=("work/out",))
    (work / "ok.xl").write_text(OK.replace("n < 3", "n < 4").replace("n >= 3", "n >= 4"))
    before = snapshot(root)
    result = _limited(["build", "ok.xl", "-o", "out"], work, 1024)  # the smallest generated file is larger
    assert result.returncode == 1, result.stderr
    assert "file size limit" in result.stderr and not PYTHON_TEXT.search(result.stderr)
    assert snapshot(root) == before


# ---- the simulator: --timeout and Ctrl-C ---------------------------------------------------------

SPIN = """\
pipeline spin

request {
    n: i32
    acc: u32
}

stage work when n < 3 {
    for i in 0..1048576 {
        for j in 0..1048576 {
            acc += 1u
        }
    }
    n += 1
}

done when n >= 3
"""


@pytest.mark.parametrize("command", ["sim", "diff"])
def test_timeout_stops_the_simulator_with_a_report(root, command):
    (root / "work" / "spin.xl").write_text(SPIN)
    started = time.monotonic()
    out = run_cli([command, "spin.xl", "--max-active", "2", "--timeout", "0.5"], root, 3, "--timeout 0.5 s reached")
    assert time.monotonic() - started < 30
    assert re.search(r"^\s+0\s+0\s+work\s+spin\.xl:\d+\s+\(running\)$", out, re.M), out
    assert re.search(r"^\s+1\s+0\s+-\s+\(waiting for its turn\)$", out, re.M), out
    assert "2 active requests, 6 queued" in out


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_timeout_values(root, value):
    run_cli(["sim", "ok.xl", "--timeout", value], root, 2, "--timeout")


def test_a_timeout_that_is_not_reached_changes_nothing(root):
    out = run_cli(["sim", "ok.xl", "--timeout", "60"], root, 0, "8 done")
    assert "stopped" not in out


def test_ctrl_c_prints_the_same_report(root):
    """KeyboardInterrupt inside the run (here: from the per-round observer, in round 2)."""
    from xlgen.backends.build import load_text
    from xlgen.runtime import sim

    module = load_text(OK, "ok.xl").sim_module()

    def interrupt(rnd, *_):
        if rnd == 2:
            raise KeyboardInterrupt

    with pytest.raises(sim.SimHang) as stopped:
        sim.run_stoppable(module, {}, [{} for _ in range(5)], sim.LaunchConfig(max_active=3), observer=interrupt)
    report = stopped.value.report
    assert stopped.value.interrupted
    assert "interrupted (Ctrl-C)" in report and "stopped in round 2 (3 active requests, 2 queued, 0 ended)" in report
    assert [int(line.split()[0]) for line in report.splitlines()[2:]] == [0, 1, 2]


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_from_the_terminal(root):
    """A real SIGINT to a running `xlgen sim`: the report, exit code 130, no traceback."""
    work = root / "work"
    (work / "spin.xl").write_text(SPIN)
    env = dict(os.environ, XLGEN_CACHE=str(root / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "xlgen", "sim", "spin.xl"], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (work.parent / "cache").exists() and time.monotonic() < deadline:  # compiled: running soon
        time.sleep(0.1)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "(running)" in err
    assert not PYTHON_TEXT.search(err), err


# ---- unit checks of the file helpers -------------------------------------------------------------


def test_a_file_that_grows_past_the_limit_while_read(tmp_path, monkeypatch):
    """The limit holds on the bytes read, not on the size stat reports (e.g. /proc files report 0)."""
    path = tmp_path / "x.xl"
    path.write_bytes(b"#" * (MAX_SOURCE_BYTES + 10))
    monkeypatch.setattr(os, "fstat", lambda fd, real=os.fstat: os.stat_result(
        (stat.S_IFREG | 0o644,) + tuple(real(fd))[1:6] + (0,) + tuple(real(fd))[7:10]))
    with pytest.raises(files.FileProblem, match="larger than"):
        files.read_source_bytes(path)


def test_permission_denied_source(tmp_path, monkeypatch):
    path = tmp_path / "x.xl"
    path.write_text(OK)
    _fail_on(monkeypatch, "open", errno.EACCES)
    with pytest.raises(files.FileProblem, match=r"permission denied; make it readable"):
        files.read_source_bytes(path)


def test_new_files_get_the_usual_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        files.write_atomically(tmp_path / "new.txt", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o644
