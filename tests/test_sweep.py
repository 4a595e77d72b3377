"""`xlgen sweep` on a local Ray, and requests sharded over Ray workers (xlgen.tools.measure.multigpu), on CPU.

The sweep runs for real: a local Ray of 2 CPU slots is started once for this module
(in-process tests) and once per subprocess (the kill tests).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen.cli import main

ray = pytest.importorskip("ray", reason="the sweep needs Ray (pip install -e '.[sweep]')")

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "stages" / "xl_spec.xl"

# A pipeline whose points cost what `spin` says, and fail as `mode` says: 1 a division by zero
# in every request (runtime errors), 2 a loop of 2^40 iterations (the point's timeout stops it).
KNOBS = """\
pipeline knobs

param spin: i32 = 1000
param mode: i32 = 0

request {
    n: i32
    acc: u32
}

stage work when n < 2 {
    for i in 0..1048576 {
        if i < spin {
            acc += 1u
        }
    }
    if mode == 1 {
        acc = acc / 0u
    }
    if mode == 2 {
        for i in 0..1048576 {
            for j in 0..1048576 {
                acc += 1u
            }
        }
    }
    n += 1
}

trace work: n, acc

done when n >= 2
"""


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    from xlgen.tools.measure.sweep import start_ray

    start_ray(cpus=2)
    yield
    ray.shutdown()


def sweep(args, code=0):
    result = CliRunner().invoke(main, ["sweep", *map(str, args)])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def rows(out_dir: Path) -> list[dict]:
    with open(out_dir / "results.csv") as f:
        return list(csv.DictReader(f))


def lines(out_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out_dir / "results.jsonl").read_text().splitlines()]


def test_a_grid_runs_as_ray_tasks_and_resumes(tmp_path):
    spec = tmp_path / "grid.toml"
    spec.write_text(f"""
pipeline = "{PIPELINE}"
workloads = ["small"]
metrics = ["tokens", "acceptance_rate", "wall_s"]
[grid]
fixed_block = [0, 2, 8]
max_active = [2, 4]
[[plot]]
x = "max_active"
y = "acceptance_rate"
""")
    out = tmp_path / "out"
    text = sweep([spec, "-o", out])
    assert "6 points, 0 finished earlier, 6 to run on a local Ray" in text
    assert "of 6: 6 ok, 0 failed" in text
    table = rows(out)
    assert [int(r["point"]) for r in table] == list(range(6))
    assert {(r["fixed_block"], r["max_active"]) for r in table} == {(b, a) for b in "028" for a in "24"}
    assert all(r["status"] == "ok" and r["requests"] == "7" for r in table)
    # Every point ran in a Ray worker, not here, and gave the simulator's own result.
    assert all(row["pid"] != os.getpid() for row in lines(out))
    from xlgen.backends.build import load
    from xlgen.runtime import sim
    from xlgen.tools.pipeline.workload import load as load_workload, resolve

    compiled = load(PIPELINE)
    w = load_workload(resolve("small"), compiled.sim_module())
    w.config.max_active = 4
    expected = sim.run(compiled.sim_module(), {**w.params, "fixed_block": 8}, w.inputs, w.config)
    row = next(r for r in table if r["fixed_block"] == "8" and r["max_active"] == "4")
    assert int(row["tokens"]) == int(expected.requests["n_out"].sum())
    assert (out / "results.md").read_text().count("\n") == 2 + 6
    assert (out / "plot-acceptance_rate-vs-max_active.png").stat().st_size > 1000
    # The same command again: every point is finished, nothing runs, nothing is appended.
    before = (out / "results.jsonl").read_text()
    text = sweep([spec, "-o", out])
    assert "6 finished earlier, 0 to run" in text
    assert (out / "results.jsonl").read_text() == before
    # A grid grown by one value runs only the new points.
    spec.write_text(spec.read_text().replace("max_active = [2, 4]", "max_active = [2, 4, 7]"))
    text = sweep([spec, "-o", out])
    assert "9 points, 6 finished earlier, 3 to run" in text
    assert len(lines(out)) == 9 and len(rows(out)) == 9


def test_a_failing_point_is_reported_with_its_params_and_the_sweep_goes_on(tmp_path):
    (tmp_path / "knobs.xl").write_text(KNOBS)
    spec = tmp_path / "fail.toml"
    # the timeout covers loading the pipeline too: room for a loaded machine (4 s failed with the
    # machine's cores busy elsewhere), and mode 2 still never ends
    spec.write_text('pipeline = "knobs.xl"\ntimeout = 10\n[grid]\nmode = [0, 1, 2]\nspin = [10, 20]\n')
    out = tmp_path / "out"
    text = sweep([spec, "-o", out], code=4)
    assert "of 6: 2 ok, 4 failed" in text
    assert "(workload=default backend=sim mode=1 spin=10): 8 of 8 requests failed: 8 runtime errors" in text
    assert "division by zero" in text
    assert "(workload=default backend=sim mode=2 spin=20): SimHang: simulator stopped" in text
    table = {(r["mode"], r["spin"]): r for r in rows(out)}
    assert table[("0", "20")]["status"] == "ok" and table[("0", "20")]["rounds"] == "4"
    assert table[("1", "10")]["status"] == "failed" and table[("1", "10")]["runtime_errors"] == "8"
    assert "timeout 10 s reached" in table[("2", "10")]["error"]
    # Failed points count as finished (a resume does not redo them) unless asked.
    assert "6 finished earlier, 0 to run" in sweep([spec, "-o", out], code=4)
    assert "2 finished earlier, 4 to run" in sweep([spec, "-o", out, "--retry-failed"], code=4)


def test_spec_errors_are_reported_together_before_anything_runs(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(f"""
pipeline = "{PIPELINE}"
repeat = 2
backends = ["sim", "tpu"]
[grid]
fixd_block = [1, 2]
vocab = [1.5]
[[plot]]
x = "nope"
y = "tokens"
""")
    result = CliRunner().invoke(main, ["sweep", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    for text in ("unknown key 'repeat'; did you mean 'repeats'?", "backend 'tpu': choose from sim, cpu, gpu",
                 "'fixd_block' is neither a launch parameter of pipeline xl_spec; did you mean 'fixed_block'?",
                 "vocab = 1.5", "x = 'nope' is not a swept column"):
        assert text in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    spec.write_text("pipeline = [")
    result = CliRunner().invoke(main, ["sweep", str(spec)])
    assert result.exit_code == 2 and "invalid TOML" in result.output


def test_without_ray_the_sweep_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    result = CliRunner().invoke(main, ["sweep", str(ROOT / "docs" / "sweep_example.toml"), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "pip install 'xlgen[sweep]'" in result.output and "--serial" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(main, ["run", str(PIPELINE), "-w", "small", "--gpus", "2"])
    assert result.exit_code == 2 and "pip install 'xlgen[sweep]'" in result.output


def test_the_documented_example_spec_is_valid():
    from xlgen.tools.measure.sweep import load_spec

    spec = load_spec(ROOT / "docs" / "sweep_example.toml")
    assert len(spec.points) == 2 * 4 * 3 + 2 and "asbs_hi" in spec.columns
    gpu = load_spec(ROOT / "docs" / "sweep_gpu.toml")
    assert {p.axes["backend"] for p in gpu.points} == {"gpu"} and len(gpu.points) == 6


# ---- interrupted sweeps and killed workers (a subprocess each: a Ray of its own) -------------

def _start(spec: Path, out: Path, cpus: int = 1) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "xlgen", "sweep", str(spec), "-o", str(out), "--cpus", str(cpus)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _done_lines(out: Path) -> int:
    path = out / "results.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _spin_spec(tmp_path: Path, n: int) -> Path:
    (tmp_path / "knobs.xl").write_text(KNOBS)
    spec = tmp_path / "spin.toml"
    spec.write_text(f'pipeline = "knobs.xl"\n[grid]\nspin = {[300_000 + i for i in range(n)]}\n')
    return spec


def test_an_interrupted_sweep_resumes_without_redoing_finished_points(tmp_path):
    spec, out = _spin_spec(tmp_path, 8), tmp_path / "out"
    proc = _start(spec, out)
    try:
        _wait_for(lambda: _done_lines(out) >= 2, 60, "two finished points")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray, as a lost machine would
        proc.communicate()
    first = (out / "results.jsonl").read_text().splitlines()
    finished = len([ln for ln in first if ln.strip()])
    assert 2 <= finished < 8
    text = sweep([spec, "-o", out])
    assert f"8 points, {finished} finished earlier, {8 - finished} to run" in text
    after = (out / "results.jsonl").read_text().splitlines()
    assert after[:len(first)] == first  # the finished points' lines are untouched...
    keys = [json.loads(ln)["key"] for ln in after]
    assert len(keys) == len(set(keys)) == 8  # ...and none of them ran again
    assert all(r["status"] == "ok" for r in rows(out)) and len(rows(out)) == 8


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _busy_worker(driver: int) -> int | None:
    for pid in _descendants(driver):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if title.startswith(b"ray::run_point"):
            return pid
    return None


def test_a_killed_worker_does_not_lose_its_point(tmp_path):
    spec, out = _spin_spec(tmp_path, 6), tmp_path / "out"
    proc = _start(spec, out, cpus=2)
    try:
        victim = _wait_for(lambda: _busy_worker(proc.pid), 60, "a Ray worker running a point")
        os.kill(victim, signal.SIGKILL)
        text, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, text
    assert "of 6: 6 ok, 0 failed" in text  # Ray ran the killed worker's point again
    keys = [row["key"] for row in lines(out)]
    assert len(keys) == len(set(keys)) == 6
    assert len({row["pid"] for row in lines(out)} - {victim}) >= 1


# ---- requests sharded over Ray workers (the --gpus path, on the simulator) ---------------------

def test_the_plan_deals_requests_round_robin_and_keeps_linked_requests_together():
    from xlgen.tools.measure.multigpu import plan

    parts = plan([{} for _ in range(7)], 3)
    assert [s.ids.tolist() for s in parts] == [[0, 3, 6], [1, 4], [2, 5]]
    inputs = [{}, {}, {"graft_source_id": 0}, {}, {"graft_source_id": 3}, {"graft_source_id": 9}]
    parts = plan(inputs, 2, ["graft_source_id"])
    assert [s.ids.tolist() for s in parts] == [[0, 2, 5], [1, 3, 4]]
    assert parts[0].inputs[1]["graft_source_id"] == 0  # request 2 borrows from local request 0
    assert parts[1].inputs[2]["graft_source_id"] == 1  # request 4 from 3, local 1
    assert parts[0].inputs[2]["graft_source_id"] == 9  # no such request: left as given


def test_sharded_runs_commit_the_single_runs_tokens_and_greedy_decodings():
    from xlgen.backends.build import load
    from xlgen.tools.pipeline.metrics import run_counts
    from xlgen.tools.measure.multigpu import ShardPool, bench_sharded, committed_differences, greedy_differences
    from xlgen.runtime import sim
    from xlgen.tools.pipeline.workload import load as load_workload, resolve

    compiled = load(PIPELINE)
    module = compiled.sim_module()
    w = load_workload(resolve("mixed"), module)
    w.inputs = w.inputs[:30]
    w.config.max_active = 8
    for i in range(0, 30, 4):  # grafted pairs: they must share a worker
        w.inputs[i + 1]["graft_source_id"] = i
    single = sim.run(module, w.params, w.inputs, w.config)
    pool = ShardPool(compiled, PIPELINE, 2, backend="sim")
    try:
        run = pool.run(w)
        bench = bench_sharded(pool, w, repeats=1)
    finally:
        pool.close()
    assert sorted(s.requests for s in run.shards) == [14, 16] and len({s.device for s in run.shards}) == 2
    assert committed_differences(compiled.program, single, run.result) == []
    assert greedy_differences(compiled, w.params, run.result) == []
    np.testing.assert_array_equal(run.result.requests["graft_source_id"], single.requests["graft_source_id"])
    assert run.tokens == int(single.requests["n_out"].sum()) > 0
    c = run_counts(run.result)
    assert c.requests == 30 and c.done == 30 and c.failed == 0
    assert sorted(set(run.result.records[:, 0].tolist())) == list(range(30))
    assert bench.identical and bench.differ_from_greedy == [] and "2 workers" in bench.table()


def test_gpus_beyond_the_cluster_is_a_usage_error():
    result = CliRunner().invoke(main, ["run", str(PIPELINE), "-w", "small", "--gpus", "2"])
    assert result.exit_code == 2 and "--gpus 2: the Ray cluster has 0 GPUs" in result.output
