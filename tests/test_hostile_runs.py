"""A hostile user's corpus, continued (issue 26): what runs a pipeline — sim's plots, sweep, demo,
companions, --weights, --address, long lanes loops and reductions, large pools.

The harness is tests/test_hostile_inputs.py's: every case runs the real command line and
asserts the exit code, a one-line error naming the input and what to do, no Python exception
text, and that nothing changed outside the command's output (no file written through a link,
no result lost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from test_hostile_inputs import OK, PYTHON_TEXT, root, run_cli, snapshot  # noqa: F401 - root is a fixture
from xlgen.cli import main

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "stages" / "xl_spec.xl"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _error_line(out: str, says: str) -> str:
    """The one line of `out` that carries the error: it names what is wrong (`says`)."""
    lines = [ln for ln in out.splitlines() if says.lower() in ln.lower()]
    assert lines, f"expected {says!r} in:\n{out}"
    return lines[0]


def _victim(root: Path) -> bytes:
    return (root / "victim.txt").read_bytes()


# ---- files written through symbolic links -------------------------------------------------------

def _link(work: Path, name: str) -> None:
    os.symlink("../victim.txt" if "/" not in name else "../../victim.txt", work / name)


@pytest.mark.parametrize("option", [["--plot", "kv=kv.png"], ["--kv-plot", "kv.png"]])
def test_sim_plot_through_a_link(root, option):
    work = root / "work"
    _link(work, "kv.png")
    before = _victim(root)
    out = run_cli(["sim", str(BUNDLED), "-w", "small", *option], root, 2, "is a symbolic link")
    assert "kv.png" in _error_line(out, "symbolic link") and "remove the link" in out
    assert _victim(root) == before and os.readlink(work / "kv.png") == "../victim.txt"


def test_sim_plot_is_written_atomically(root):
    run_cli(["sim", str(BUNDLED), "-w", "small", "--plot", "kv=kv.png"], root, 0, "wrote kv.png",
            may_change=("work/kv.png",))
    assert (root / "work" / "kv.png").read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in (root / "work").iterdir() if p.name.startswith(".kv.png")] == []


@pytest.mark.parametrize("name", ["block_sizes.png", "kv.png"])
def test_demo_plot_through_a_link(root, name):
    work = root / "work"
    (work / "d").mkdir()
    _link(work, f"d/{name}")
    out = run_cli(["demo", "-w", "small", "--no-gpu", "-o", "d"], root, 1, "is a symbolic link")
    assert name in _error_line(out, "symbolic link")
    assert _victim(root) == b"the user's file\n"


def test_demo_real_plot_through_a_link(root):
    work = root / "work"
    (work / "d").mkdir()
    _link(work, "d/real_block_sizes.png")
    out = run_cli(["demo", "--real", "--no-gpu", "--prompts", "0", "-n", "2", "-o", "d"], root, 1,
                  "is a symbolic link")
    assert "real_block_sizes.png" in _error_line(out, "symbolic link")


# ---- sweep --------------------------------------------------------------------------------------

SPIN = """\
pipeline spin

param mode: i32 = 0

request {
    n: i32
    acc: u32
}

stage work when n < 2 {
    if mode == 2 {
        for i in 0..1048576 {
            for j in 0..1048576 {
                acc = hash_u32(acc ^ (j as u32))
            }
        }
    }
    n += 1
}

done when n >= 2
"""


def _sweep_spec(work: Path, extra: str = "", pipeline: str = "spin.xl", source: str = SPIN, backends='["sim"]',
                **top) -> str:
    if pipeline == "spin.xl":
        (work / "spin.xl").write_text(source)
    lines = [f'pipeline = "{pipeline}"', f"backends = {backends}"]
    lines += [f"{k} = {v}" for k, v in top.items()]
    (work / "s.toml").write_text("\n".join(lines) + "\n" + extra)
    return "s.toml"


def test_sweep_results_through_a_link(root):
    work = root / "work"
    _sweep_spec(work, "[grid]\nmode = [0]\n")
    (work / "out").mkdir()
    _link(work, "out/results.jsonl")
    out = run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 1, "is a symbolic link")
    assert "results.jsonl" in _error_line(out, "symbolic link")
    assert _victim(root) == b"the user's file\n"


@pytest.mark.parametrize("name", ["results.csv", "results.md", "plot-rounds-vs-mode.png"])
def test_sweep_tables_and_plots_through_a_link_are_refused_before_any_point_runs(root, name):
    work = root / "work"
    _sweep_spec(work, '[grid]\nmode = [0]\n\n[[plot]]\nx = "mode"\ny = "rounds"\n')
    (work / "out").mkdir()
    _link(work, f"out/{name}")
    out = run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 1, "is a symbolic link")
    assert name in _error_line(out, "symbolic link")
    assert not (work / "out" / "results.jsonl").exists() or (work / "out" / "results.jsonl").read_text() == ""


def test_sweep_plot_is_written_where_it_belongs(root):
    work = root / "work"
    _sweep_spec(work, '[grid]\nmode = [0, 1]\n\n[[plot]]\nx = "mode"\ny = "rounds"\n')
    run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 0, "wrote", may_change=("work/out",))
    assert (work / "out" / "plot-rounds-vs-mode.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in (work / "out").iterdir() if p.name.startswith(".")]


def test_sweep_dry_run_of_a_billion_points_counts_them(root):
    work = root / "work"
    values = list(range(1, 1001))
    _sweep_spec(work, f"[grid]\nmax_active = {values}\nmax_rounds = {values}\ncount = {values}\n")
    started = time.monotonic()
    out = run_cli(["sweep", "s.toml", "--dry-run"], root, 2, "1,000,000,000 points (the first 50 listed)")
    assert time.monotonic() - started < 30
    assert len([ln for ln in out.splitlines() if "to run" in ln]) == 50
    assert "more than the 1,000,000 points a sweep runs" in out
    out = run_cli(["sweep", "s.toml", "--serial"], root, 2, "split it into smaller specs")
    assert not (work / "sweep-s").exists()


@pytest.mark.parametrize("spec, says", [
    ("/dev/zero", "'/dev/zero' is not a regular file (a device); give a TOML spec"),
    ("f.toml", "'f.toml' is not a regular file (a FIFO); give a TOML spec"),
    ("d.toml", "'d.toml' is not a regular file (a directory); give a TOML spec"),
    ("u.toml", "not valid UTF-8 text"),
    ("nope.toml", "no such file: 'nope.toml'"),
])
def test_sweep_spec_that_is_not_a_file(root, spec, says):
    work = root / "work"
    os.mkfifo(work / "f.toml")
    (work / "d.toml").mkdir()
    (work / "u.toml").write_bytes(b"pipeline = \"\xff\"\n")
    started = time.monotonic()
    run_cli(["sweep", spec, "--serial"], root, 2, says)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("workloads, says", [
    ('[["small"]]', "workload ['small']: give a bundled workload's name or a JSON file"),
    ("[{ name = 1 }]", "workload {'name': 1}: give a bundled workload's name or a JSON file"),
    ("{ a = 1 }", "workload {'a': 1}: give a bundled workload's name or a JSON file"),
])
def test_sweep_workload_given_as_a_list_or_table(root, workloads, says):
    _sweep_spec(root / "work", workloads=workloads)
    run_cli(["sweep", "s.toml", "--serial"], root, 2, says)


def test_sweep_resume_with_a_damaged_results_file(root):
    work = root / "work"
    _sweep_spec(work, "[grid]\nmode = [0, 1]\n")
    run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 0, "2 ok", may_change=("work/out",))
    results = work / "out" / "results.jsonl"
    good = results.read_text().splitlines()
    damaged = [good[0], "{not json", "[1, 2]", '{"key": "abc"}', '{"key": 5, "status": "ok"}',
               '{"key": "k", "status": "ok", "metrics": [1]}', good[1][: len(good[1]) // 2]]
    results.write_text("\n".join(damaged))  # the last line cut short, without its newline
    out = run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 0, "1 finished earlier",
                  may_change=("work/out",))
    for n, words in ((2, "not a JSON object"), (3, "a JSON list, not an object"), (4, "'status' is None"),
                     (5, "no 'key'"), (6, "'metrics' and 'axes' must be objects"), (7, "not a JSON object")):
        assert f"results.jsonl:{n}: {words}" in out and "skipped (its point runs again)" in out, out
    assert "2 ok" in out
    lines = results.read_text().splitlines()
    assert lines[:6] == damaged[:6]  # nothing lost: the damaged lines stay, for the user to look at
    assert json.loads(lines[-1])["status"] == "ok"  # the new row on a line of its own
    out = run_cli(["sweep", "s.toml", "--dry-run", "-o", "out"], root, 0, "2 points")
    assert out.count("ok  ") == 2 and "results.jsonl:2: not a JSON object" in out


@pytest.mark.parametrize("out_dir, says", [
    ("spin.xl", "is a file; give a directory"),
    ("spin.xl/sub", "'spin.xl' is a file, not a directory"),
])
def test_sweep_output_that_cannot_be_a_directory(root, out_dir, says):
    _sweep_spec(root / "work", "[grid]\nmode = [0]\n")
    run_cli(["sweep", "s.toml", "--serial", "-o", out_dir], root, {"spin.xl": 2}.get(out_dir, 1), says)


@pytest.mark.skipif(IS_ROOT, reason="root writes into a read-only directory; the path-under-a-file case covers it")
def test_sweep_output_not_writable(root):
    work = root / "work"
    _sweep_spec(work, "[grid]\nmode = [0]\n")
    (work / "ro").mkdir()
    (work / "ro").chmod(0o555)
    try:
        run_cli(["sweep", "s.toml", "--serial", "-o", "ro"], root, 1, "not writable")
    finally:
        (work / "ro").chmod(0o755)


def test_sweep_count_gets_the_memory_estimate(root):
    work = root / "work"
    _sweep_spec(work, pipeline=str(BUNDLED), count="[2147483647]")
    out = run_cli(["sweep", "s.toml", "--serial"], root, 2, "count = 2147483647:")
    assert "of memory before the run starts" in out or "use fewer requests" in out


def test_sweep_timeout_stops_a_cpu_point(root):
    work = root / "work"
    _sweep_spec(work, "[grid]\nmode = [2]\n", backends='["cpu"]', timeout=1)
    started = time.monotonic()
    out = run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 4, "timeout = 1 s reached",
                  may_change=("work/out",))
    assert time.monotonic() - started < 120  # the C++ compile, then 1 s
    assert "the CPU build's run" in out


def test_sweep_timeout_covers_a_companion_that_loops_on_import(root):
    work = root / "work"
    (work / "loop_tools.py").write_text("while True:\n    pass\n")
    _sweep_spec(work, "[grid]\nmode = [0]\n", source=SPIN.replace("param mode", 'companion "loop_tools.py"\n\nparam mode'),
                timeout=1)
    started = time.monotonic()
    out = run_cli(["sweep", "s.toml", "--serial", "-o", "out"], root, 4, "did not finish loading within the "
                  "timeout (1 s)", may_change=("work/out",))
    assert time.monotonic() - started < 30
    assert "loop_tools.py" in _error_line(out, "did not finish loading")


def _needs_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("needs Ray (pip install -e '.[sweep]')")


def test_sweep_at_an_unreachable_ray_cluster(root):
    _needs_ray()
    _sweep_spec(root / "work", "[grid]\nmode = [0]\n")
    started = time.monotonic()
    out = run_cli(["sweep", "s.toml", "--address", "127.0.0.1:1", "-o", "out"], root, 2,
                  "cannot reach the Ray cluster at --address 127.0.0.1:1", may_change=("work/out",))
    assert time.monotonic() - started < 30 and "ray start --head" in out


def test_gpus_at_an_unreachable_ray_cluster(root):
    _needs_ray()
    started = time.monotonic()
    run_cli(["run", "ok.xl", "--gpus", "2", "--address", "127.0.0.1:1"], root, 2,
            "cannot reach the Ray cluster at --address 127.0.0.1:1")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("reply", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"", None])
def test_sweep_at_an_address_that_is_not_ray(root, monkeypatch, reply):
    """A port that answers, but not as Ray (a web server; one that closes; one that says nothing):
    Ray itself would retry for minutes."""
    import socket
    import threading

    from xlgen.tools.measure import sweep as engine

    _needs_ray()
    monkeypatch.setattr(engine, "RAY_CONNECT_SECONDS", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.recv(100)
            if reply is None:
                time.sleep(3)
            elif reply:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    _sweep_spec(root / "work", "[grid]\nmode = [0]\n")
    started = time.monotonic()
    try:
        run_cli(["sweep", "s.toml", "--address", address, "-o", "out"], root, 2,
                f"--address {address} answers, but not as a Ray cluster", may_change=("work/out",))
    finally:
        server.close()
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("address, says", [("nowhere", "give HOST:PORT"), ("host:port", "is not a number")])
def test_sweep_address_that_is_not_one(root, address, says):
    _needs_ray()
    _sweep_spec(root / "work", "[grid]\nmode = [0]\n")
    run_cli(["sweep", "s.toml", "--address", address, "-o", "out"], root, 2, says, may_change=("work/out",))


def test_ray_that_cannot_start_is_one_line(root, monkeypatch):
    """What `ulimit -v 6G` does to Ray (its processes fail to start), without starting one."""
    _needs_ray()
    import ray as real_ray

    def refuse(*args, **kwargs):
        raise RuntimeError("Failed to start the GCS server.\nsee /tmp/ray/session_latest/logs\nmore")

    monkeypatch.setattr(real_ray, "is_initialized", lambda: False)
    monkeypatch.setattr(real_ray, "init", refuse)
    _sweep_spec(root / "work", "[grid]\nmode = [0]\n")
    out = run_cli(["sweep", "s.toml", "-o", "out"], root, 2, "cannot start a local Ray: Failed to start the GCS "
                  "server.; under a memory limit (ulimit -v)", may_change=("work/out",))
    assert "--serial" in out


# ---- demo ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("out_dir, says", [
    ("ok.xl", "'ok.xl' exists and is not a directory"),
    ("ok.xl/sub", "'ok.xl' is a file, not a directory"),
])
@pytest.mark.parametrize("real", [False, True])
def test_demo_output_that_cannot_be_a_directory(root, out_dir, says, real):
    args = ["--real", "--prompts", "0", "-n", "2"] if real else ["-w", "small"]
    run_cli(["demo", "--no-gpu", *args, "-o", out_dir], root, 1, says)


@pytest.mark.skipif(IS_ROOT, reason="root writes into a read-only directory; the path-under-a-file case covers it")
def test_demo_output_not_writable(root):
    work = root / "work"
    (work / "ro").mkdir()
    (work / "ro").chmod(0o555)
    try:
        run_cli(["demo", "--no-gpu", "-w", "small", "-o", "ro"], root, 1, "not writable")
    finally:
        (work / "ro").chmod(0o755)


def _broken_models(tmp: Path, how: str) -> Path:
    import shutil

    models = tmp / "models"
    shutil.copytree(REPO / "models" / "bytes_pair", models / "bytes_pair",
                    ignore=shutil.ignore_patterns("*.safetensors"))
    pair = models / "bytes_pair"
    if how == "no pair folder":
        shutil.rmtree(pair)
    elif how == "binding not JSON":
        (pair / "pipeline.json").write_text("{not json")
    elif how == "binding empty":
        (pair / "pipeline.json").write_text("{}")
    elif how == "binding a list":
        (pair / "pipeline.json").write_text("[1, 2]")
    elif how == "binding a directory":
        (pair / "pipeline.json").unlink()
        (pair / "pipeline.json").mkdir()
    elif how == "prompts a table":
        (pair / "prompts.json").write_text('{"prompts": 5}')
    elif how == "reference damaged":
        (pair / "reference_tokens.json").write_text('{"a": 1}')
    elif how == "weights missing":
        pass  # the .safetensors were not copied
    elif how == "weights a directory":
        (pair / "pair.safetensors").mkdir()
    elif how == "weights damaged":
        (pair / "pair.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    return models


BROKEN_MODELS = {
    "no pair folder": "pipeline.json: no such file or directory; the real model pair lives in models/bytes_pair/",
    "binding not JSON": "pipeline.json: not JSON",
    "binding empty": "not a binding of the pair to a pipeline (no key 'request'); restore",
    "binding a list": "not a binding of the pair to a pipeline (a value of the wrong kind",
    "binding a directory": "pipeline.json: is a directory",
    "prompts a table": 'prompts.json: expected {"prompts": [',
    "reference damaged": "not a reference of model 'target' (no key 'models'); restore it",
    "weights missing": "pair.safetensors: no such file (python3 models/byte_lm.py pair writes it)",
    "weights a directory": "pair.safetensors: is not a regular file",
    "weights damaged": "pair.safetensors: not a readable .safetensors file",
}


@pytest.mark.parametrize("how", sorted(BROKEN_MODELS))
def test_demo_real_with_a_broken_models_folder(root, monkeypatch, how):
    from xlgen.companion import load as load_companion

    rp = load_companion(REPO / "stages" / "byte_spec_tools.py").beside("real_pair")

    models = _broken_models(root, how)
    monkeypatch.setattr(rp, "models_dir", lambda: models)
    rp._binding.cache_clear()
    run_cli(["demo", "--real", "--no-gpu", "--prompts", "0", "-n", "2", "-o", "d"], root, 2, BROKEN_MODELS[how],
            may_change=("models",))
    assert not (root / "work" / "d").exists()


# ---- companions ---------------------------------------------------------------------------------

def _with_companion(work: Path, declared: str, body: str = "") -> str:
    (work / "c.xl").write_text(OK.replace("pipeline ok\n", f'pipeline ok\ncompanion "{declared}"\n'))
    return "c.xl"


COMPANIONS = {
    # name: (setup(work) -> the declared path, words)
    "up and out": (lambda w: "../x.py", "a companion must be inside the pipeline's folder"),
    "down, up and out": (lambda w: (w / "sub").mkdir() or "sub/../../x.py", "without '..'"),
    "absolute": (lambda w: str(w.parent / "x.py"), "a companion must be inside the pipeline's folder"),
    "home": (lambda w: "~/x.py", "a companion must be inside the pipeline's folder"),
    "a link out of the folder": (lambda w: os.symlink("../x.py", w / "l.py") or "l.py",
                                 "leads out of the pipeline's folder through a symbolic link"),
}


@pytest.mark.parametrize("command", ["check", "sim", "diff", "graph"])
@pytest.mark.parametrize("case", sorted(COMPANIONS))
def test_a_companion_outside_the_pipelines_folder(root, case, command):
    work = root / "work"
    (root / "x.py").write_text("open('/tmp/xlgen-pwned', 'w').write('ran')\n")
    setup, says = COMPANIONS[case]
    source = _with_companion(work, setup(work))
    out = run_cli([command, source], root, 1, says)
    assert "c.xl:2:1: error: companion" in out  # file:line:col
    assert not Path("/tmp/xlgen-pwned").exists()


def test_an_imported_library_may_not_declare_the_companion(root):
    work = root / "work"
    (work / "tools.py").write_text("raise SystemExit('ran')\n")
    (work / "lib.xl").write_text('companion "tools.py"\nconst K: i32 = 1\n')
    (work / "m.xl").write_text(OK.replace("pipeline ok\n", 'pipeline ok\nimport "lib.xl"\n').replace("n += 1", "n += K"))
    for command in ("check", "sim"):
        out = run_cli([command, "m.xl"], root, 1, "is declared in an imported file: only the pipeline's main file "
                      "(m.xl) may declare its companion")
        assert "lib.xl:1:1: error" in out


def test_every_run_says_which_companion_it_loads(root):
    work = root / "work"
    (work / "c_tools.py").write_text("from xlgen.companion import metrics\n\n@metrics\ndef m(run):\n    return {}\n")
    source = _with_companion(work, "c_tools.py")
    for args in (["sim", source], ["diff", source, "--backend", "cpu"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        said = [ln for ln in result.stderr.splitlines() if "companion" in ln]
        assert len(said) == 1 and "c_tools.py (its Python code)" in said[0], result.stderr
    # and in a process of its own
    env = dict(os.environ, XLGEN_CACHE=str(root / "cache"))
    done = subprocess.run([sys.executable, "-m", "xlgen", "sim", source], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("running the pipeline's companion") == 1 and "c_tools.py" in done.stderr
    check = subprocess.run([sys.executable, "-m", "xlgen", "check", source], cwd=work, env=env, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0 and "companion" not in check.stderr  # check runs no Python


@pytest.mark.parametrize("command", ["sim", "diff"])
def test_timeout_stops_a_companion_that_loops_on_import(root, command):
    work = root / "work"
    (work / "loop_tools.py").write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    source = _with_companion(work, "loop_tools.py")
    started = time.monotonic()
    out = run_cli([command, source, "--timeout", "1"], root, 1, "did not finish loading within the timeout (1 s)")
    assert time.monotonic() - started < 30
    assert "loop_tools.py" in _error_line(out, "did not finish loading")


# ---- legal programs at the limits ----------------------------------------------------------------

LONG = """\
pipeline long

param hi: i32 = 64

request {
    n: i32
    acc: f32
    a: i32[64]
}

stage s when n < 1 {
    let r = sum(j in 0..hi: (j as f32) * 0.5)
    acc = r
    lanes for i in 0..hi {
        let t = i * 2
        if i < 64 {
            a[i] = t
        }
    }
    n += 1
}

done when n >= 1
"""


@pytest.mark.parametrize("hi, code, says", [("33554433", 0, "1 done"), ("2147483647", 3, "--timeout 5 s reached")])
def test_a_legal_long_reduction_runs_in_pieces_and_stops_at_the_timeout(root, hi, code, says):
    """2^25 to 2^31 iterations: the simulator runs them in pieces of vec.CHUNK (bounded memory:
    2^25 finish, where they once needed 1.5 GiB at once), and --timeout stops it between pieces
    with the hang report (exit 3)."""
    (root / "work" / "long.xl").write_text(LONG)
    started = time.monotonic()
    run_cli(["sim", "long.xl", "--count", "1", "--param", f"hi={hi}", "--timeout", "5"], root, code, says)
    assert time.monotonic() - started < 60


def test_sixteen_pools_of_2_28_elements(root):
    pools = "".join(f"pool p{i}: f32[1, 268435456] owned by own\n" for i in range(16))
    (root / "work" / "p.xl").write_text(OK.replace("request {", f"shared {{\n    own: i32[1]\n}}\n\n{pools}\nrequest {{"))
    out = run_cli(["check", "p.xl"], root, 1, "pool 'p2' brings the pools to 805306368 elements in all; the limit is "
                  "536870912")
    assert "p.xl:9:6: error" in out and "1 error generated" in out


@pytest.mark.parametrize("kind", ["tensor", "pool"])
def test_sixty_five_dimensions(root, kind):
    dims = ", ".join(["1"] * 65)
    decl = (f"tensor w: f32[{dims}]" if kind == "tensor"
            else f"shared {{\n    own: i32[1]\n}}\n\npool pl: f32[{dims}] owned by own")
    (root / "work" / "d.xl").write_text(OK.replace("request {", f"{decl}\n\nrequest {{"))
    run_cli(["check", "d.xl"], root, 1, f"{kind} '{'w' if kind == 'tensor' else 'pl'}' has 65 dimensions; the limit "
            "is 64")


# ---- --weights ----------------------------------------------------------------------------------

TENSOR = OK.replace("request {", "tensor w: f32[2, 3]\n\nrequest {").replace("n += 1", "n += 1 + ((w[0, 0] as i32) & 0)")

WEIGHTS = {
    "a FIFO": (lambda w: os.mkfifo(w / "f.npz") or "f.npz", "not a regular file (a FIFO)"),
    "a link loop": (lambda w: os.symlink("loop.npz", w / "loop.npz") or "loop.npz", "a symbolic link loop"),
    "/dev/zero": (lambda w: "/dev/zero", "not a regular file (a device)"),
    "a directory": (lambda w: (w / "d.npz").mkdir() or "d.npz", "is a directory"),
    "missing": (lambda w: "nope.npz", "no such weights file"),
}


@pytest.mark.parametrize("case", sorted(WEIGHTS))
def test_weights_that_are_not_a_file(root, case):
    work = root / "work"
    (work / "t.xl").write_text(TENSOR)
    setup, says = WEIGHTS[case]
    started = time.monotonic()
    run_cli(["sim", "t.xl", "--weights", setup(work)], root, 2, says)
    assert time.monotonic() - started < 30


def test_arrays_the_program_does_not_declare_are_not_read(root):
    work = root / "work"
    (work / "t.xl").write_text(TENSOR)
    np.savez(work / "w.npz", w=np.ones((2, 3), np.float32), big=np.zeros(4, np.float32))
    with zipfile.ZipFile(work / "w.npz", "a") as z:  # an array that would fail (or fill memory) if read
        z.writestr("huge.npy", b"\x93NUMPY\x01\x00" + b"\xff" * 64)
    run_cli(["sim", "t.xl", "--weights", "w.npz"], root, 0, "8 done")


def test_a_declared_array_of_the_wrong_shape_is_refused_before_it_is_read(root, monkeypatch):
    work = root / "work"
    (work / "t.xl").write_text(TENSOR)
    np.savez(work / "w.npz", w=np.ones((3000, 3), np.float32))
    from numpy.lib import npyio

    monkeypatch.setattr(npyio.NpzFile, "__getitem__", lambda self, key: pytest.fail(f"{key} was read"))
    run_cli(["sim", "t.xl", "--weights", "w.npz"], root, 2, "expected f32[2, 3], found float32[3000, 3]")


# ---- the simulator's pieces for long ranges (xlgen/semantics/vec.py: lane_chunks, Pieces) --------

@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_a_reduction_in_pieces_has_the_bits_of_the_whole(op, dtype):
    """Pieces of 64 iterations give what reduce_sum/reduce_best give on the whole range: f32 sums
    lane by lane in order (NaN, infinities, -0.0 and cancellation included), ties to the lowest index."""
    from xlgen.semantics import vec

    rng = np.random.default_rng(26)
    for n, start in ((0, 5), (1, -3), (31, 0), (64, 7), (65, -100), (1000, 12), (4099, 1 << 30)):
        if dtype is np.float32:
            v = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
            special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38], dtype=np.float32)
            if n in (31, 65):  # elsewhere finite: sums whose bits depend on the order
                v[rng.random(n) < 0.05] = rng.choice(special)
        else:
            v = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, n, dtype=np.int64, endpoint=True).astype(dtype)
            v[rng.random(n) < 0.1] = v[0] if n else 0  # ties
        whole = vec.Lanes(start, start + n)
        want = vec.reduce_sum(whole, v, dtype) if op == "sum" else vec.reduce_best(whole, v, dtype, op)
        pieces = vec.Pieces(op, dtype)
        for L in vec.lane_chunks(start, start + n, 64):
            pieces.add(L, v[L.index.astype(np.int64) - start])
        got = pieces.result()
        rtype = np.int32 if op.startswith("arg") else dtype
        assert np.asarray(got, dtype=rtype).tobytes() == np.asarray(want, dtype=rtype).tobytes(), (op, dtype, n)


def test_a_lanes_loop_in_pieces_fails_with_the_lowest_index():
    from xlgen.semantics import vec
    from xlgen.semantics.ops import ERR_DIV_ZERO, ERR_INDEX, XlRuntimeError

    pieces = vec.Pieces("loop")
    ran = []
    for L in vec.lane_chunks(0, 300, 64):
        ran.append(len(L.index))
        L.check(L.index == 200, ERR_INDEX, 9)
        L.check(L.index == 130, ERR_DIV_ZERO, 7)
        L.end()
        pieces.add(L)
    assert ran == [64, 64, 64, 64, 44]  # every piece runs: the other iterations go on
    with pytest.raises(XlRuntimeError) as failed:
        pieces.result()
    assert (failed.value.code, failed.value.line) == (ERR_DIV_ZERO, 7)


def test_a_timeout_between_two_lines_still_gives_the_hang_report():
    """Python 3.11 may stop a frame where it has no line (tb_lineno None): the report skips that
    frame instead of failing with a TypeError (seen as a sweep point's error under load)."""
    from types import SimpleNamespace

    from xlgen.runtime import sim

    frame = SimpleNamespace(f_code=SimpleNamespace(co_filename="/x/p_sim.py"))
    inner = SimpleNamespace(tb_frame=frame, tb_lineno=None, tb_next=None)
    exc = SimpleNamespace(line=0, __traceback__=SimpleNamespace(tb_frame=frame, tb_lineno=None, tb_next=inner))
    assert sim._error_line(exc, "/x/p_sim.py") == 0


@pytest.mark.parametrize("command", ["demo", "sweep"])
def test_output_folder_not_writable_as_any_user(root, monkeypatch, command):
    """The not-writable check itself, also where the tests run as root (who may write anyway):
    os.access says no for the output folder."""
    work = root / "work"
    (work / "ro").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p).name == "ro" and mode & os.W_OK
                        else real_access(p, mode, **kw))
    if command == "demo":
        run_cli(["demo", "--no-gpu", "-w", "small", "-o", "ro"], root, 1, "-o 'ro': the directory is not writable")
    else:
        _sweep_spec(work, "[grid]\nmode = [0]\n")
        run_cli(["sweep", "s.toml", "--serial", "-o", "ro"], root, 1, "cannot write results into 'ro': permission "
                "denied")
