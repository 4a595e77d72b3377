"""The paged KV cache of the bundled pipeline (stages/kv.xl) under stress.

Every scenario runs on the simulator with the pool invariants checked after every
round (the companion stages/xl_spec_tools.py), on the CPU build (traces and final state identical), and
on the GPU (deterministic mode) when one is present. In every scenario every
request finishes, nothing is leaked, and the committed tokens are still those of
plain greedy decoding: the KV cache delays requests, it never changes an answer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xlgen.backends.build import load
from xlgen.tools.check.diff import compare
from xlgen.runtime import cpu, gpu, sim
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, LaunchConfig
from xlgen.tools.pipeline.workload import from_dict
from xlgen.tools.pipeline.companion import load as load_companion

# The bundled pipeline's companion (stages/xl_spec_tools.py), loaded as every tool loads it.
TOOLS = load_companion(Path(__file__).resolve().parent.parent / "stages" / "xl_spec_tools.py").module
PoolObserver = TOOLS.PoolObserver
assert_invariants = TOOLS.assert_invariants
evictions_by_cause = TOOLS.evictions_by_cause
fragmentation_ratio = TOOLS.fragmentation_ratio
kv_hit_rate = TOOLS.kv_hit_rate
residency = TOOLS.residency
greedy_tokens = TOOLS.greedy_tokens
report = TOOLS.kv_report

KV_PRESSURE, PINNED, GRAFTED = 1, 2, 4  # flags ReqFlag (checked below)


@pytest.fixture(scope="module")
def compiled():
    return load("stages/xl_spec.xl")


def _inputs(module, count, acceptance, prompt=(16, 64), out=(8, 48), seed=3, **fields):
    return from_dict({"seed": seed, "generate": {"count": count, "fields": {
        "seed": {"counter": 100 * seed}, "prompt_len": {"uniform": list(prompt)},
        "max_new_tokens": {"uniform": list(out)},
        "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
        "base_acceptance": {"uniform": list(acceptance)},
        "priority": {"uniform": [0, 3]}, **fields}}}, module).inputs


def _grafted(module, count=40):
    """Request 0 and every 8th request hold a 64-token system prompt; the others graft it."""
    inputs = _inputs(module, count, (0.3, 1.0), prompt=(70, 120), seed=5)
    for i, r in enumerate(inputs):
        src = (i // 8) * 8
        r["shared_prefix_len"] = 64
        if i != src:
            r["graft_source_id"] = src
    return inputs


KV_ON = {"kv_cache": True}  # the KV cache is a launch option (off by default)

# name -> (inputs(module), params, max_active)
SCENARIOS = {
    "pool_too_small": (lambda m: _inputs(m, 40, (0.1, 1.0)), {"pool_pages": 12}, 8),
    "tiny_pool_oversize": (lambda m: _inputs(m, 16, (0.1, 1.0)), {"pool_pages": 6}, 4),
    "all_reject": (lambda m: _inputs(m, 40, (0.0, 0.0)), {"pool_pages": 24}, 8),
    "all_accept": (lambda m: _inputs(m, 40, (1.0, 1.0)), {"pool_pages": 24}, 8),
    "priority_eviction": (lambda m: _inputs(m, 40, (0.1, 1.0)), {"pool_pages": 16, "eviction_policy": 1}, 8),
    "fixed8_pressure": (lambda m: _inputs(m, 40, (0.1, 1.0)), {"pool_pages": 24, "fixed_block": 8}, 8),
    "heavy_grafting": (_grafted, {"pool_pages": 48}, 8),
    "pinned_deadlock": (lambda m: [{**r, "req_flags": PINNED} for r in _inputs(m, 12, (0.5, 1.0), prompt=(40, 60))],
                        {"pool_pages": 14}, 4),
}
SCENARIOS = {name: (make, {**params, **KV_ON}, active) for name, (make, params, active) in SCENARIOS.items()}



def _run_sim(compiled, params, inputs, max_active):
    observer = PoolObserver(params.get("pool_pages", 16384))
    result = sim.run(compiled.sim_module(), params, inputs, LaunchConfig(max_active=max_active, max_rounds=20_000),
                     observer=observer)
    return result, observer


def _check_tokens(result, inputs, params):
    recs = result.records
    assert not (recs[:, 2] == KIND_ERROR).any(), recs[recs[:, 2] == KIND_ERROR][:3]
    assert sorted(recs[recs[:, 2] == KIND_DONE][:, 0].tolist()) == list(range(len(inputs)))
    vocab, eos = params.get("vocab", 32000), params.get("eos_token", 0)
    for i, req in enumerate(inputs):
        want = greedy_tokens(req["seed"], req["prompt_len"], req["max_new_tokens"], vocab, eos)
        n = int(result.requests["n_out"][i])
        assert result.requests["out_tokens"][i][:n].tolist() == want, f"request {i}"


def test_flag_members_are_as_assumed(compiled):
    m = compiled.sim_module()
    assert (m.ReqFlag.KV_PRESSURE, m.ReqFlag.PINNED, m.ReqFlag.GRAFTED) == (KV_PRESSURE, PINNED, GRAFTED)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_kv_scenario_invariants_tokens_and_cpu_agree(compiled, name):
    make, params, max_active = SCENARIOS[name]
    inputs = make(compiled.sim_module())
    result, observer = _run_sim(compiled, params, inputs, max_active)
    assert_invariants(result, params["pool_pages"], observer)
    _check_tokens(result, inputs, params)
    again = cpu.run(compiled, params, inputs, LaunchConfig(max_active=max_active, max_rounds=20_000))
    divergence = compare(compiled.program, result, again)
    assert divergence is None, divergence.render()
    rep = report(compiled.program, result)
    assert 0.0 <= rep.fragmentation_ratio < 1.0 and 0.0 <= rep.kv_hit_rate <= 1.0
    assert rep.peak_live <= params["pool_pages"]


def test_pool_too_small_waits_evicts_and_misses(compiled):
    make, params, max_active = SCENARIOS["pool_too_small"]
    result, _ = _run_sim(compiled, params, make(compiled.sim_module()), max_active)
    reqs = result.requests
    assert reqs["kv_waits"].sum() > 0 and reqs["kv_misses"].sum() > 0
    ev = evictions_by_cause(result)
    assert ev["decode"] + ev["recompute"] > 0
    assert kv_hit_rate(result) < 1.0


def test_an_ample_pool_never_evicts_and_always_hits(compiled):
    inputs = _inputs(compiled.sim_module(), 24, (0.1, 1.0))
    result, observer = _run_sim(compiled, {"pool_pages": 4096, **KV_ON}, inputs, 8)
    assert_invariants(result, 4096, observer)
    assert kv_hit_rate(result) == 1.0 and sum(evictions_by_cause(result).values()) == 0
    assert result.requests["kv_waits"].sum() == 0
    assert (result.requests["req_flags"] & KV_PRESSURE).sum() == 0


def test_kv_pressure_caps_asbs_blocks(compiled):
    """All-accept requests converge to B = 8, except while the pool is over 85% full."""
    from xlgen.tools.pipeline.metrics import trace_series

    inputs = _inputs(compiled.sim_module(), 16, (1.0, 1.0), prompt=(60, 64), out=(100, 120),
                     profile={"cycle": ["CONSTANT"]})
    free, _ = _run_sim(compiled, {"pool_pages": 4096, **KV_ON}, inputs, 8)
    tight, _ = _run_sim(compiled, {"pool_pages": 60, **KV_ON}, inputs, 8)
    b_free = np.concatenate([v for _, v in trace_series(compiled.program, free, "spec_verify", "current_block_size").values()])
    b_tight = np.concatenate([v for _, v in trace_series(compiled.program, tight, "spec_verify", "current_block_size").values()])
    assert (b_free == 8).all()
    assert (b_tight == 2).any() and set(b_tight.tolist()) <= {2, 8}
    res = residency(compiled.program, tight)
    assert (res.live > 0.85 * 60).any()


def test_residency_report_is_consistent(compiled):
    make, params, max_active = SCENARIOS["fixed8_pressure"]
    result, _ = _run_sim(compiled, params, make(compiled.sim_module()), max_active)
    res = residency(compiled.program, result)
    pool = params["pool_pages"]
    np.testing.assert_array_equal(res.live, res.committed + res.draft)
    np.testing.assert_array_equal(res.free, pool - res.live)
    assert (res.used_tokens <= res.committed * 16).all()
    # a snapshot is the pool as the round's KV stage found it: the last one still holds
    # the last request's pages, which that stage freed
    assert res.live[-1] > 0 and int(result.shared["kv_live"][0]) == 0
    assert 0.0 < fragmentation_ratio(res, 16) < 1.0


def test_grafting_borrows_the_shared_prefix_and_skips_it(compiled):
    make, params, max_active = SCENARIOS["heavy_grafting"]
    inputs = make(compiled.sim_module())
    result, _ = _run_sim(compiled, params, inputs, max_active)
    reqs = result.requests
    grafted = np.nonzero(reqs["req_flags"] & GRAFTED)[0]
    assert len(grafted) >= len(inputs) // 2
    for i in grafted:
        assert inputs[i].get("graft_source_id", -1) >= 0
        assert reqs["prefill_tokens"][i] == reqs["prompt_len"][i] - 64  # 4 borrowed pages of 16
    for i in range(len(inputs)):
        if i not in grafted:
            assert reqs["prefill_tokens"][i] == reqs["prompt_len"][i]


def test_priority_aware_eviction_spares_the_high_priority_request(compiled):
    """Three requests through an 8-page pool (priorities 2, 3, 0). Request 0 runs; 1
    and 2 stall with committed pages and both are candidates when 0 needs a page.
    LRU takes the page used longest ago, request 1's; priority-aware eviction takes
    the low-priority request 2's instead, and request 1 never misses."""
    constant = compiled.sim_module().Profile.CONSTANT
    inputs = [{"seed": 10 + i, "prompt_len": p, "max_new_tokens": n, "profile": constant,
               "base_acceptance": 1.0, "priority": prio}
              for i, (p, n, prio) in enumerate([(32, 24, 2), (16, 48, 3), (32, 24, 0)])]
    misses = {}
    for policy in (0, 1):
        params = {"pool_pages": 8, "eviction_policy": policy, **KV_ON}
        result, observer = _run_sim(compiled, params, inputs, 3)
        assert_invariants(result, 8, observer)
        _check_tokens(result, inputs, params)
        misses[policy] = result.requests["kv_miss_pages"].tolist()
    assert misses[0][1] > 0 and misses[1][1] == 0, misses
    assert misses[0][2] > 0 and misses[1][2] > 0, misses


def test_stalled_pinned_requests_yield_instead_of_deadlocking(compiled):
    make, params, max_active = SCENARIOS["pinned_deadlock"]
    result, _ = _run_sim(compiled, params, make(compiled.sim_module()), max_active)
    assert evictions_by_cause(result)["yield"] > 0


def test_oversize_requests_run_uncached(compiled):
    inputs = [{"seed": 1, "prompt_len": 5000, "max_new_tokens": 20}, {"seed": 2, "prompt_len": 30, "max_new_tokens": 20}]
    result, observer = _run_sim(compiled, {"pool_pages": 64, **KV_ON}, inputs, 2)
    assert_invariants(result, 64, observer)
    _check_tokens(result, inputs, {})
    assert result.requests["kv_oversize"].tolist() == [1, 0]


def test_thousands_of_requests_through_a_small_pool(compiled):
    inputs = _inputs(compiled.sim_module(), 2000, (0.0, 1.0), prompt=(1, 40), out=(1, 12), seed=9)
    params = {"pool_pages": 96, "eviction_policy": 1, **KV_ON}
    config = LaunchConfig(max_active=32, max_rounds=50_000)
    observer = PoolObserver(96, every=7)
    result = sim.run(compiled.sim_module(), params, inputs, config, observer=observer)
    assert_invariants(result, 96, observer)
    _check_tokens(result, inputs, params)
    divergence = compare(compiled.program, result, cpu.run(compiled, params, inputs, config))
    assert divergence is None, divergence.render()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", ["deterministic", "fast"])
def test_kv_scenario_on_the_gpu(compiled, name, mode):
    make, params, max_active = SCENARIOS[name]
    inputs = make(compiled.sim_module())
    config = LaunchConfig(max_active=max_active, max_rounds=20_000)
    expected, _ = _run_sim(compiled, params, inputs, max_active)
    got = gpu.run(compiled, params, inputs, config, mode=mode)
    _check_tokens(got, inputs, params)
    if mode == "deterministic":
        divergence = compare(compiled.program, expected, got)
        assert divergence is None, divergence.render()
    assert_invariants(got, params["pool_pages"])  # fast mode too: nothing leaked


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", ["deterministic", "fast"])
def test_kv_scenario_with_phase2_over_the_grid(compiled, name, mode, monkeypatch):
    """Phase 2 spread over several blocks (docs/gpu.md) whatever the batch: -DXL_GRID_PHASE2_MIN=0
    (by default only batches that block 0 would take in several chunks), four times the
    scenario's batch, 4 slots a block (-DXL_PHASE2_BLOCK_SLOTS=4; by default every block): traces
    identical to the simulator's. In fast mode, every epoch over 4 serving blocks
    (-DXL_FAST_SERVERS=4): greedy's tokens, nothing leaked."""
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", "-DXL_GRID_PHASE2_MIN=0 " +
                       ("-DXL_FAST_SERVERS=4" if mode == "fast" else "-DXL_PHASE2_BLOCK_SLOTS=4"))
    make, params, max_active = SCENARIOS[name]
    inputs = make(compiled.sim_module())
    config = LaunchConfig(max_active=4 * max_active, max_rounds=20_000)
    got = gpu.run(compiled, params, inputs, config, mode=mode, grid=8 if mode == "fast" else None)
    assert got.extra["timing"].grid > 1
    _check_tokens(got, inputs, params)
    if mode == "fast":
        assert_invariants(got, params["pool_pages"])
        return
    expected, _ = _run_sim(compiled, params, inputs, 4 * max_active)
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, divergence.render()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
@pytest.mark.parametrize("options", ["", "-DXL_PHASE2_BLOCK_SLOTS=32"])
def test_a_crowd_through_a_small_pool_on_the_gpu(compiled, options, monkeypatch):
    """1,000 requests, 256 at once, through 256 pages (eviction, priority-aware): more than
    block 0's threads, so phase 2 runs over the grid by default (every block, or 8 blocks of 32
    slots); traces identical to the simulator's, whose pool invariants hold every 7th round."""
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)
    inputs = _inputs(compiled.sim_module(), 1000, (0.0, 1.0), seed=9)
    params = {"pool_pages": 256, "eviction_policy": 1, **KV_ON}
    config = LaunchConfig(max_active=256, max_rounds=50_000)
    observer = PoolObserver(256, every=7)
    expected = sim.run(compiled.sim_module(), params, inputs, config, observer=observer)
    assert_invariants(expected, 256, observer)
    assert sum(evictions_by_cause(expected).values()) > 0  # the pool is short: eviction across blocks
    got = gpu.run(compiled, params, inputs, config)
    assert got.extra["timing"].grid > 1
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, divergence.render()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
@pytest.mark.parametrize("options", ["", "-DXL_FAST_SERVERS=0"])
def test_fast_mode_shares_an_oversubscribed_pool_on_the_gpu(compiled, options, monkeypatch):
    """Fast mode, 1,000 requests at once through a pool that holds about a tenth of their pages:
    phase 2 runs in epochs (every request waiting at that moment together), so the oldest is
    served first and younger ones are evicted for it; served by block 0, or by as many blocks as
    give each 32 slots. Every request finishes with plain greedy decoding's tokens, nothing leaks
    (the pool's final invariants), and eviction did happen."""
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)
    inputs = _inputs(compiled.sim_module(), 1000, (0.0, 1.0), seed=9)
    params = {"pool_pages": 512, **KV_ON}
    got = gpu.run(compiled, params, inputs, LaunchConfig(max_active=1000, max_rounds=50_000), mode="fast")
    _check_tokens(got, inputs, params)
    assert_invariants(got, 512)
    assert sum(evictions_by_cause(got).values()) > 0 and got.requests["kv_waits"].sum() > 0



def test_the_narrowed_walk_changes_nothing_but_the_speed(compiled, tmp_path):
    """Served without a graft, kv_manage walks only the entries kv_plan found changing, from kv_plan's
    count of the kept pages (docs/kv_cache.md): the same records, request state and pool as the walk
    over the whole table, which this copy of the pipeline always takes."""
    stages = Path(__file__).resolve().parent.parent / "stages"
    for source in list(stages.glob("*.xl")) + list(stages.glob("*.py")):
        (tmp_path / source.name).write_text(source.read_text())
    kv = (tmp_path / "kv.xl").read_text()
    assert kv.count("let narrow = ok && !grafted") == 1
    (tmp_path / "kv.xl").write_text(kv.replace("let narrow = ok && !grafted", "let narrow = false"))
    whole = load(tmp_path / "xl_spec.xl")
    for name in ("pool_too_small", "priority_eviction", "heavy_grafting", "all_accept"):
        make, params, max_active = SCENARIOS[name]
        inputs = make(compiled.sim_module())
        cfg = LaunchConfig(max_active=max_active, max_rounds=20_000)
        narrowed = sim.run(compiled.sim_module(), params, inputs, cfg)
        divergence = compare(compiled.program, narrowed, sim.run(whole.sim_module(), params, inputs, cfg))
        assert divergence is None, f"{name}: {divergence.render()}"
