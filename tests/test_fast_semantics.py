"""Fast mode's semantics without a GPU: `sim.run_interleaved` runs requests one
iteration at a time in a seeded random order, as fast mode's warps may (stages,
then phase 2 in an epoch with the other requests waiting then, then `done when`).
Results that must not depend on the schedule are checked across seeds and worker
counts; the KV cache's answers and pool invariants among them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_kv_cache import KV_ON, SCENARIOS, _check_tokens
from xlgen.backends.build import load, load_text
from xlgen.tools.check.diff import compare_results
from xlgen.runtime import sim
from xlgen.runtime.sim import KIND_DONE, LaunchConfig
from xlgen.tools.pipeline.workload import from_dict
from xlgen.tools.pipeline.companion import load as load_companion

# The bundled pipeline's companion (stages/xl_spec_tools.py), loaded as every tool loads it.
TOOLS = load_companion(Path(__file__).resolve().parent.parent / "stages" / "xl_spec_tools.py").module
assert_invariants = TOOLS.assert_invariants


@pytest.fixture(scope="module")
def compiled():
    return load("stages/xl_spec.xl")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("seed", [0, 1])
def test_kv_scenarios_keep_answers_and_invariants_in_any_order(compiled, name, seed):
    make, params, max_active = SCENARIOS[name]
    inputs = make(compiled.sim_module())
    config = LaunchConfig(max_active=max_active, max_rounds=20_000)
    for workers in (max_active, len(inputs)):
        result = sim.run_interleaved(compiled.sim_module(), params, inputs, config, workers=workers, seed=seed)
        _check_tokens(result, inputs, params)
        assert_invariants(result, params["pool_pages"])


@pytest.mark.parametrize("seed", [0, 1])
def test_an_oversubscribed_pool_is_shared_in_epochs(compiled, seed):
    """300 requests at once through 100 pages (a tenth of what they would hold at once, about):
    epochs let the oldest waiting request evict younger ones, so every request finishes with
    its plain greedy tokens and nothing leaks."""
    from test_kv_cache import _inputs, evictions_by_cause
    inputs = _inputs(compiled.sim_module(), 300, (0.0, 1.0), seed=9)
    params = {"pool_pages": 100, **KV_ON}
    result = sim.run_interleaved(compiled.sim_module(), params, inputs, LaunchConfig(max_rounds=50_000), seed=seed)
    _check_tokens(result, inputs, params)
    assert_invariants(result, 100)
    assert sum(evictions_by_cause(result).values()) > 0


def test_without_the_kv_cache_any_order_gives_the_deterministic_final_state(compiled):
    module = compiled.sim_module()
    w = from_dict({"seed": 4, "generate": {"count": 40, "fields": {
        "seed": {"counter": 7}, "prompt_len": {"uniform": [4, 64]}, "max_new_tokens": {"uniform": [4, 40]},
        "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]}, "base_acceptance": {"uniform": [0.1, 1.0]}}}},
        module)
    params = {**w.params, "kv_cache": False}
    expected = sim.run(module, params, w.inputs, LaunchConfig(max_active=8))
    for seed in range(3):
        got = sim.run_interleaved(module, params, w.inputs, LaunchConfig(max_active=8), workers=8, seed=seed)
        divergence = compare_results(compiled.program, expected, got)
        assert divergence is None, divergence.render()
        assert (got.records[:, 2] == KIND_DONE).sum() == 40


TICKETS = """
pipeline tickets
shared { next_ticket: i32 }
request { steps: i32  ticket: i32 = -1 }
stage work when steps < 3 { steps += 1 }
arbiter take when steps == 3 && ticket < 0 { ticket = next_ticket  next_ticket += 1 }
done when ticket >= 0
"""


def test_the_interleaving_is_real():
    """An arbiter that hands out tickets in arrival order: the order, hence each
    request's ticket, depends on the schedule (so the seeds must give different
    orders), while the set of tickets handed out does not."""
    module = load_text(TICKETS, "tickets.xl").sim_module()
    tickets = set()
    for seed in range(6):
        got = sim.run_interleaved(module, {}, [{} for _ in range(8)], LaunchConfig(max_active=8), seed=seed)
        assert sorted(got.requests["ticket"].tolist()) == list(range(8))
        tickets.add(tuple(got.requests["ticket"].tolist()))
    assert len(tickets) > 1
    deterministic = sim.run(module, {}, [{} for _ in range(8)], LaunchConfig(max_active=8))
    assert deterministic.requests["ticket"].tolist() == list(range(8))


def test_a_request_that_never_finishes_hits_its_own_watchdog():
    module = load_text("pipeline spin\nrequest { n: i32 }\nstage s when n >= 0 { n += 1 }\ndone when n < 0\n",
                       "spin.xl").sim_module()
    got = sim.run_interleaved(module, {}, [{} for _ in range(3)], LaunchConfig(max_active=3, max_rounds=50), seed=1)
    errors = got.errors()
    assert sorted(errors[:, 0].tolist()) == [0, 1, 2]
    assert (errors[:, 1] == 50).all() and np.all(got.requests["n"] == 50)
