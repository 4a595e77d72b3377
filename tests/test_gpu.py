"""The GPU mega-kernel against the simulator (run on a GPU machine; skipped without one).

Deterministic mode must reproduce the simulator's traces and final state bit
for bit; fast mode (no rounds) must reach the same final request state.
"""

from __future__ import annotations

import numpy as np
import pytest

from xlgen.backends.build import load, load_text
from xlgen.tools.check.diff import committed_output_fields, compare, compare_results
from xlgen.runtime import sim
from xlgen.semantics.ops import ERR_WATCHDOG
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, LaunchConfig
from xlgen.tools.pipeline.workload import from_dict

gpu = pytest.importorskip("xlgen.runtime.gpu")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')"),
]


@pytest.fixture(scope="module")
def bundled():
    return load("stages/xl_spec.xl")


def _workload(module, count: int, max_active: int):
    """Requests of every profile with short answers, so the simulator keeps up at 10,000."""
    return from_dict({
        "seed": count,
        "launch": {"max_active": max_active, "max_rounds": 100000},
        "generate": {"count": count, "fields": {
            "seed": {"counter": 17},
            "prompt_len": {"uniform": [4, 64]},
            "max_new_tokens": {"uniform": [4, 40]},
            "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
            "base_acceptance": {"uniform": [0.1, 1.0]},
        }},
    }, module)


@pytest.mark.parametrize("count,max_active", [(1, 1), (7, 4), (64, 64), (1000, 256), (10000, 1024)])
def test_bundled_pipeline_deterministic_equals_simulator(bundled, count, max_active):
    w = _workload(bundled.sim_module(), count, max_active)
    expected = sim.run(bundled.sim_module(), w.params, w.inputs, w.config)
    got = gpu.run(bundled, w.params, w.inputs, w.config, mode="deterministic")
    divergence = compare(bundled.program, expected, got)
    assert divergence is None, divergence.render()
    assert (got.records[:, 2] == KIND_DONE).sum() == count


@pytest.mark.parametrize("count", [7, 1000])
@pytest.mark.parametrize("kv_cache", [False, True])
def test_bundled_pipeline_fast_mode_commits_the_same_tokens(bundled, count, kv_cache):
    w = _workload(bundled.sim_module(), count, 64)
    params = {**w.params, "kv_cache": kv_cache}
    expected = sim.run(bundled.sim_module(), params, w.inputs, w.config)
    got = gpu.run(bundled, params, w.inputs, w.config, mode="fast")
    # With the KV cache off nothing in a request depends on the schedule, so the whole
    # final state must match; with it on, page grants depend on the schedule (KV
    # counters differ) but the answers may not.
    fields = committed_output_fields(bundled.program) if kv_cache else None
    divergence = compare_results(bundled.program, expected, got, fields)
    assert divergence is None, divergence.render()
    np.testing.assert_array_equal(expected.requests["out_tokens"], got.requests["out_tokens"])


HANG = """
pipeline hang
request { n: i32 }
stage spin when n >= 0 { n = (n + 1) % 1000 }
done when n < 0
"""


def test_hang_is_aborted_with_a_report():
    compiled = load_text(HANG, "hang.xl")
    with pytest.raises(gpu.HangError) as info:
        gpu.run(compiled, {}, [{} for _ in range(50)], LaunchConfig(max_active=50, max_rounds=2_000_000_000),
                timeout=2.0)
    report = info.value.report
    assert "did not finish" in report and "request" in report
    assert "hang.xl" in report


def test_watchdog_fails_every_unfinished_request_like_the_simulator():
    compiled = load_text(HANG, "hang.xl")
    inputs = [{} for _ in range(5)]
    config = LaunchConfig(max_active=2, max_rounds=30)
    expected = sim.run(compiled.sim_module(), {}, inputs, config)
    got = gpu.run(compiled, {}, inputs, config)
    assert compare(compiled.program, expected, got) is None
    errors = got.records[got.records[:, 2] == KIND_ERROR]
    assert len(errors) == 5 and set(errors[:, 4]) == {ERR_WATCHDOG}


ARBITER = """
pipeline tally
shared { total: i32  order: i32[64] }
request { n: i32  ticket: i32 = -1 }
stage work when n < 3 { n += 1 }
arbiter take when n == 3 && ticket < 0 { ticket = total  order[total % 64] = req_id  total += 1 }
trace take: ticket
done when ticket >= 0
"""


def test_arbiters_grant_in_request_id_order_on_the_gpu():
    compiled = load_text(ARBITER, "tally.xl")
    inputs = [{"n": i % 3} for i in range(40)]
    config = LaunchConfig(max_active=16)
    expected = sim.run(compiled.sim_module(), {}, inputs, config)
    got = gpu.run(compiled, {}, inputs, config)
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, divergence.render()


@pytest.mark.parametrize("mode", ["host-loop", "graph"])
def test_baselines_from_the_same_ir_reproduce_the_simulator(bundled, mode):
    """The host-launched loop and CUDA-graph replay run the same stage code, so
    their traces equal the simulator's too: the benchmark compares identical work."""
    w = _workload(bundled.sim_module(), 64, 16)
    expected = sim.run(bundled.sim_module(), w.params, w.inputs, w.config)
    got = gpu.run(bundled, w.params, w.inputs, w.config, mode=mode)
    divergence = compare(bundled.program, expected, got)
    assert divergence is None, divergence.render()
    timing = got.extra["timing"]
    # stages, the arbiter kernel (when the pipeline has arbiters), retire, admit
    per_round = len(bundled.program.per_request_stages) + bool(bundled.program.phase2_stages) + 2
    assert timing.launches == 1 + got.rounds * (per_round if mode == "host-loop" else 1)


@pytest.mark.parametrize("mode", ["host-loop", "graph"])
def test_baselines_run_arbiters_in_request_id_order(mode):
    compiled = load_text(ARBITER, "tally.xl")
    inputs = [{"n": i % 3} for i in range(40)]
    config = LaunchConfig(max_active=16)
    expected = sim.run(compiled.sim_module(), {}, inputs, config)
    got = gpu.run(compiled, {}, inputs, config, mode=mode)
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, divergence.render()


def test_round_timestamps_are_monotonic(bundled):
    w = _workload(bundled.sim_module(), 64, 16)
    got = gpu.run(bundled, w.params, w.inputs, w.config)
    stamps = got.extra["round_end_ns"]
    assert len(stamps) == got.rounds + 1 and stamps[0] == 0
    assert np.all(np.diff(stamps) >= 0) and stamps[-1] > 0
