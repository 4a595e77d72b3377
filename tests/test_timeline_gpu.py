"""The kernel timeline on the GPU (`--timeline`; skipped without one): the timeline build runs
the same computation (traces and state identical to the simulator's), and what it records is a
valid, nested, monotonic trace with an event for every request in every round it ran, a
barrier wait for every team, phase 2 on block 0 alone; with a team of warps and in fast mode
too; a full buffer drops events and says so, without touching anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from xlgen.backends.build import load
from xlgen.tools.measure import timeline as tl
from xlgen.tools.check.diff import committed_output_fields, compare, compare_results
from xlgen.tools.pipeline.metrics import slot_utilisation
from xlgen.tools.pipeline import workload as workloads

gpu = pytest.importorskip("xlgen.runtime.gpu")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')"),
]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compiled():
    return load(ROOT / "stages" / "xl_spec.xl")


def _run(compiled, workload, sim_result=None, **kwargs):
    w = workloads.load(workloads.resolve(workload), compiled.sim_module())
    result = gpu.run(compiled, w.params, w.inputs, w.config, timeline=True, **kwargs)
    trace = tl.to_trace(result.extra["timeline"], compiled.program)
    return w, result, trace


def _xs(trace, **match):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and all(e.get(k) == v for k, v in match.items())]


@pytest.mark.parametrize("workload", ["small", "mixed"])
def test_a_deterministic_timeline_is_valid_and_complete(compiled, workload):
    from xlgen.runtime import sim

    w, result, trace = _run(compiled, workload)
    reference = sim.run(compiled.sim_module(), w.params, w.inputs, w.config)
    assert compare(compiled.program, reference, result) is None  # the timeline build computes the same
    assert tl.check_trace(trace) == []
    assert trace["otherData"]["dropped"] == 0
    requests = _xs(trace, name="request")
    # one event per request per round it was in the batch (its phase 1)
    assert len(requests) == slot_utilisation(result, w.config.max_active).busy
    assert {e["args"]["request"] for e in requests} == set(range(len(w.inputs)))
    for s in compiled.program.per_request_stages:
        assert len(_xs(trace, name=s.name)) == len(requests)
    teams = trace["otherData"]["teams"]
    barriers = _xs(trace, name="barrier wait")
    assert {e["tid"] for e in barriers} == set(range(teams))
    block0 = {tid for tid in range(teams) if tid % trace["otherData"]["grid"] == 0}
    assert {e["tid"] for e in _xs(trace, name="phase 2")} == block0
    assert len(_xs(trace, name="phase 2")) == len(block0) * result.rounds
    times = sorted({round(e["dur"] * 1000) for e in trace["traceEvents"] if e["ph"] == "X"} - {0})
    print(f"{workload}: {len(trace['traceEvents'])} events, {teams} teams on "
          f"{len({e['pid'] for e in barriers})} SMs, shortest nonzero event {times[0]} ns")
    print(tl.profile(trace).table())


def test_a_team_of_warps_records_one_thread_per_block(compiled):
    _w, result, trace = _run(compiled, "small", team_warps=8)
    assert tl.check_trace(trace) == []
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {f"block {b} (team of 8 warps)" for b in range(result.extra["timing"].grid)}


def test_fast_mode_records_each_request_whole(compiled):
    from xlgen.runtime import sim

    w, result, trace = _run(compiled, "mixed", mode="fast")
    reference = sim.run(compiled.sim_module(), w.params, w.inputs, w.config)
    fields = committed_output_fields(compiled.program)
    assert compare_results(compiled.program, reference, result, fields) is None
    assert tl.check_trace(trace) == []
    assert sorted(e["args"]["request"] for e in _xs(trace, name="request")) == list(range(len(w.inputs)))
    assert not _xs(trace, name="barrier wait")


def test_a_full_buffer_drops_events_and_nothing_else(compiled, monkeypatch):
    from xlgen.runtime import sim

    monkeypatch.setattr(gpu, "TIMELINE_MIN_EVENTS", 16)
    monkeypatch.setattr(gpu, "TIMELINE_ROUNDS", 1)
    monkeypatch.setattr(gpu, "TIMELINE_MAX_BYTES", 1 << 12)  # no room to run again with more
    w, result, trace = _run(compiled, "small")
    reference = sim.run(compiled.sim_module(), w.params, w.inputs, w.config)
    assert compare(compiled.program, reference, result) is None
    assert trace["otherData"]["dropped"] > 0
    assert tl.check_trace(trace) == []
    assert "events dropped" in tl.summary_line(trace, "t.json", "t.png")
