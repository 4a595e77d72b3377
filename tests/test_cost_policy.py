"""The cost policy (block_policy = COST, stages/asbs.xl) on the real pair and the bundled pipeline.

- Every decision is the policy's: a Python model of it (numpy float32, one rounding per
  operation, as docs/semantics.md defines f32) replays each request's EMA updates and block
  choices from the trace of the CPU build, and must give the traced values exactly.
- Speculation switches off (B = 0, plain steps, the EMA frozen), probes with B = 1 and switches
  back on; under KV pressure the blocks keep ASBS's cap.
- Committed tokens equal plain greedy decoding's; the simulator and the CPU build agree bit for
  bit (traces, final state, pools), also under eviction.
"""

from __future__ import annotations

import numpy as np
import pytest

from xlgen.backends.build import load
from xlgen.runtime import cpu, sim
from xlgen.runtime.sim import LaunchConfig
from xlgen.tools.check.diff import compare
from xlgen.tools.pipeline.metrics import trace_series

from test_byte_spec import ALL_PROMPTS, PROMPTS, answers, compiled, plain, request, run, weights

COST = 1  # BlockPolicy.COST
F = np.float32
# Costs that put the break-even near an acceptance of 0.75: the real pair's requests switch
# between plain steps (B = 0) and blocks of 1 and 4 (probes every 3rd plain step).
SWITCHING = {"block_policy": COST, "cost_b0": 1.0, "cost_b1": 1.75, "cost_b2": 2.4, "cost_b4": 3.3, "cost_b8": 5.0,
             "cost_probe_every": 3}
# Verifying more positions nearly free (a weight-once pass): large blocks pay.
CHEAP_VERIFY = {"block_policy": COST, "cost_b0": 1.0, "cost_b1": 1.1, "cost_b2": 1.2, "cost_b4": 1.45, "cost_b8": 2.0}
DEFAULTS = {"asbs_ema_init": 0.8, "cost_alpha": 0.1, "cost_probe_every": 8, "kv_pressure_cap": 2, "cost_b0": 469.0,
            "cost_b1": 927.0, "cost_b2": 1280.0, "cost_b4": 1935.0, "cost_b8": 3151.0}


# ---- the policy, written again in Python ------------------------------------------------------

def model_block(p: dict, ema: np.float32, pressure: bool, plain_run: int) -> int:
    """cost_block_size: argmax over B of E(B) / cost(B), E(B) = 1 + a + ... + a^B in f32."""
    a = min(ema, F(1)) if ema >= 0 else F(0)
    cap = p["kv_pressure_cap"] if pressure else 8
    best, best_rate = 0, F(1) / F(p["cost_b0"])
    tokens = power = F(1)
    for b in range(1, 9):
        power = F(power * a)
        tokens = F(tokens + power)
        if b > cap:
            break
        if b in (1, 2, 4, 8):
            rate = F(tokens / F(p[f"cost_b{b}"]))
            if rate > best_rate:
                best, best_rate = b, rate
    if best == 0 and p["cost_probe_every"] > 0 and plain_run >= p["cost_probe_every"]:
        best = 1
    return min(best, p["kv_pressure_cap"]) if pressure else best


def model_ema(p: dict, ema: np.float32, accepted: int, proposed: int) -> np.float32:
    """next_ema under COST: one update per examined draft token, none for a plain step."""
    alpha = F(p["cost_alpha"])
    for j in range(min(proposed, accepted + 1)):
        x = F(1) if j < accepted else F(0)
        ema = F(F(alpha * x) + F(F(F(1) - alpha) * ema))
    return ema


def replay(result, params: dict) -> list[list[int]]:
    """Checks every traced EMA and block against the model; returns each request's blocks,
    the first one (prefill's) included."""
    p = {**DEFAULTS, **params}
    program = compiled().program
    series = {name: trace_series(program, result, "spec_verify", name)
              for name in ("accepted_prefix_len", "draft_len", "ema_acceptance_rate", "current_block_size")}
    first = trace_series(program, result, "prefill", "current_block_size")
    out = []
    for i in range(len(result.requests)):
        ema, plain_run = F(p["asbs_ema_init"]), 0
        block = model_block(p, ema, False, 0)
        assert int(first[i][1][0]) == block, (i, "prefill")
        plain_run = 1 if block == 0 else 0
        blocks = [block]
        cols = [series[name][i][1] for name in series]
        for step, (acc, drafted, traced_ema, traced_block) in enumerate(zip(*cols)):
            assert drafted <= block, (i, step)  # B = 0: nothing drafted
            ema = model_ema(p, ema, int(acc), int(drafted))
            assert F(traced_ema).tobytes() == ema.tobytes(), (i, step, traced_ema, ema)
            block = model_block(p, ema, False, plain_run)
            assert int(traced_block) == block, (i, step, traced_block, block, ema, plain_run)
            plain_run = plain_run + 1 if block == 0 else 0
            blocks.append(block)
        out.append(blocks)
    return out


# ---- the real pair --------------------------------------------------------------------------

@pytest.mark.parametrize("costs", [SWITCHING, CHEAP_VERIFY, {"block_policy": COST}],
                         ids=["switching", "cheap-verify", "default-costs"])
def test_every_decision_is_the_policys_and_the_tokens_are_plain_greedys(costs):
    result = run("cpu", ALL_PROMPTS, costs, max_active=8)
    assert answers(result) == [list(a) for a in plain("cpu")]
    blocks = replay(result, costs)
    used = {b for bs in blocks for b in bs}
    if costs is SWITCHING:  # off, probes, and on again
        assert {0, 1, 4} <= used, used
        assert any(0 in bs[:k] and bs[k] > 1 for bs in blocks for k in range(len(bs)))  # back on after a probe
    elif costs is CHEAP_VERIFY:
        assert 0 not in used and 8 in used, used
    else:  # the H100 defaults: speculation does not pay at the draft's agreement; probes only
        assert used == {0, 1}, used
        for bs in blocks:
            assert bs[:10] == [0] * 8 + [1, 0], bs  # 8 plain steps, then a probe


def test_plain_steps_propose_nothing_and_leave_the_ema():
    result = run("cpu", PROMPTS, {"block_policy": COST, "cost_probe_every": 0}, max_active=3)
    reqs = result.requests
    assert (reqs["total_proposed"] == 0).all()  # no probes: never a draft
    assert np.array_equal(reqs["ema_acceptance_rate"], np.full(len(PROMPTS), F(0.8)))
    assert answers(result) == [list(plain("cpu")[ALL_PROMPTS.index(name)]) for name in PROMPTS]


def test_kv_pressure_caps_the_blocks_at_two():
    # Pressure from the first KV round on (threshold 0): every block after the first is at most 2.
    params = {**CHEAP_VERIFY, "kv_pressure_threshold": 0.0}
    result = run("cpu", ALL_PROMPTS, params, max_active=8)
    assert answers(result) == [list(a) for a in plain("cpu")]
    blocks = trace_series(compiled().program, result, "spec_verify", "current_block_size")
    chosen = np.concatenate([blocks[i][1][1:] for i in blocks])
    assert chosen.max() == 2 and 0 not in chosen


def test_eviction_keeps_the_answer():
    result = run("cpu", ALL_PROMPTS, {**SWITCHING, "pool_pages": 48}, max_active=8, n_new=128)
    assert answers(result) == [list(a) for a in plain("cpu", 128)]
    assert result.requests["recomputed_rows"].sum() > 0


def test_simulator_and_cpu_build_agree_bit_for_bit():
    # Short runs (the simulator is slow): the first 24 bytes of one prompt of each kind, 20 new
    # tokens, switching costs with a probe every 2nd plain step, a pool small enough to evict.
    names = ("code_class", "prose_play", "random_0")
    inputs = []
    for name in names:
        r = request(name, 20)
        r["seq"][24:] = 0
        r["prompt_len"] = 24
        inputs.append(r)
    params = {**weights(), **SWITCHING, "cost_probe_every": 2, "pool_pages": 6}
    config = LaunchConfig(max_active=3)
    reference_run = sim.run(compiled().sim_module(), params, inputs, config)
    cpu_run = cpu.run(compiled(), params, inputs, config)
    mismatch = compare(compiled().program, reference_run, cpu_run)
    assert mismatch is None, mismatch
    blocks = trace_series(compiled().program, reference_run, "spec_verify", "current_block_size")
    assert {0, 1} <= set(np.concatenate([blocks[i][1] for i in blocks]).tolist())
    assert reference_run.requests["recomputed_rows"].sum() > 0
    plain_run = cpu.run(compiled(), {**weights(), "speculate": False}, inputs, config)
    assert answers(reference_run) == answers(plain_run)


# ---- the bundled pipeline (xl_spec: the same asbs.xl) ---------------------------------------

@pytest.fixture(scope="module")
def xl_spec():
    return load("stages/xl_spec.xl")


def test_xl_spec_simulator_and_cpu_build_agree(xl_spec):
    from xlgen.tools.pipeline.workload import load as load_workload

    for workload, costs in (("mixed", SWITCHING), ("kv_pressure", CHEAP_VERIFY)):
        w = load_workload(f"workloads/{workload}.json", xl_spec.sim_module())
        params = {**w.params, **costs}
        reference_run = sim.run(xl_spec.sim_module(), params, w.inputs, w.config)
        cpu_run = cpu.run(xl_spec, params, w.inputs, w.config)
        mismatch = compare(xl_spec.program, reference_run, cpu_run)
        assert mismatch is None, mismatch
        blocks = trace_series(xl_spec.program, reference_run, "spec_verify", "current_block_size")
        used = set(np.concatenate([blocks[i][1] for i in blocks]).tolist())
        assert len(used) > 2 and (0 in used or costs is not SWITCHING), used
