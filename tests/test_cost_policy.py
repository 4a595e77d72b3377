"""The cost policy (block_policy = COST, stages/asbs.xl and cost_batch.xl) on the real pair and the
bundled pipeline.

- Every decision is the policy's: a Python model of it (numpy float32, one rounding per
  operation, as docs/semantics.md defines f32; the batch's sums in fixed point) replays each
  request's EMA updates from the trace of the CPU build and, round by round, the batch's block
  choice over the requests that took part (the trace of cost_batch), and must give the traced
  values exactly: EMAs, blocks, plain-step counts, and the blocks drafted at the next step.
- One block per round for the whole batch (the cap aside); speculation switches off (B = 0,
  plain steps, the EMAs frozen), probes with B = 1 for the whole batch and switches back on;
  under KV pressure the blocks keep ASBS's cap.
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

from test_byte_spec import ALL_PROMPTS, N_NEW, PROMPTS, answers, compiled, plain, request, run, weights

COST = 1  # BlockPolicy.COST
KV_PRESSURE = 1  # the first member of ReqFlag
COST_ONE = 4096  # asbs.xl: one expected token in fixed point
MAX_BLOCK = 128
F = np.float32
# Costs that put the break-even near an acceptance of 0.75: the real pair's requests switch
# between plain steps (B = 0) and blocks of 1 and 4 (probes every 3rd plain step).
# The draft's catch-up free and no margin (cost_catchup, cost_margin 0): the batch's rule is
# then the rate rule.
EXACT_COSTS = {"cost_catchup": 0.0, "cost_margin": 0.0}
SWITCHING = {"block_policy": COST, "cost_b0": 1.0, "cost_b1": 1.75, "cost_b2": 2.4, "cost_b4": 3.3, "cost_b8": 5.0,
             "cost_probe_every": 3, **EXACT_COSTS}
# Verifying more positions nearly free (a weight-once pass): large blocks pay.
CHEAP_VERIFY = {"block_policy": COST, "cost_b0": 1.0, "cost_b1": 1.1, "cost_b2": 1.2, "cost_b4": 1.45, "cost_b8": 2.0,
                **EXACT_COSTS}
DEFAULTS = {"asbs_ema_init": 0.8, "cost_alpha": 0.1, "cost_probe_every": 32, "kv_pressure_cap": 2, "cost_b0": 469.0,
            "cost_b1": 927.0, "cost_b2": 1280.0, "cost_b4": 1935.0, "cost_b8": 3151.0, "cost_catchup": 14.0, "cost_margin": 0.05}


# ---- the policy, written again in Python ------------------------------------------------------

def expected_commit(a: np.float32, b: int) -> int:
    """E(b) = 1 + a + ... + a^b term by term in f32, then in fixed point (truncated)."""
    tokens = power = F(1)
    for _ in range(min(max(b, 0), 8)):
        power = F(power * a)
        tokens = F(tokens + power)
    return int(F(tokens * F(COST_ONE)))


def cost_rule(p: dict, sums: dict[int, int], plain_run: int) -> int:
    """The B of {0, 1, 2, 4, 8} maximising sums[B] / cost(B) in f32, ties to the smaller; a probe."""
    best, best_rate = 0, F(F(sums[0]) / F(p["cost_b0"]))
    for b in (1, 2, 4, 8):
        rate = F(F(sums[b]) / F(p[f"cost_b{b}"]))
        if rate > best_rate:
            best, best_rate = b, rate
    if best == 0 and p["cost_probe_every"] > 0 and plain_run >= p["cost_probe_every"]:
        best = 1
    return best


def finish_time(left: int, e: int, cost: float) -> np.float32:
    """The time to make `left` tokens at e / COST_ONE tokens per step of `cost`."""
    return F(F(F(left) / F(F(e) / F(COST_ONE))) * F(cost))


def cost_batch_rule(p: dict, sums: dict[int, int], plain_run: int, left: int, behind: int) -> int:
    """The B of {0, 1, 2, 4, 8} that makes `left` tokens soonest, B > 0 after the draft's catch-up
    of `behind` positions and only if sooner than plain by the margin, ties to the smaller; a probe
    where an always-right draft would repay it."""
    catchup, margin = F(F(p["cost_catchup"]) * F(behind)), F(F(1) + F(p["cost_margin"]))
    plain_time = finish_time(left, sums[0], p["cost_b0"])
    best, best_time = 0, plain_time
    for b in (1, 2, 4, 8):
        t = F(finish_time(left, sums[b], p[f"cost_b{b}"]) + catchup)
        if t < best_time:
            best, best_time = b, t
    if best > 0 and F(best_time * margin) >= plain_time:
        best = 0
    if best == 0 and p["cost_probe_every"] > 0 and plain_run >= p["cost_probe_every"]:
        if F(F(finish_time(left, 2 * sums[0], p["cost_b1"]) + catchup) * margin) < plain_time:
            best = 1
    return best


def accept(ema: np.float32) -> np.float32:
    return min(ema, F(1)) if ema >= 0 else F(0)


def cap_of(p: dict, pressure: bool) -> int:
    return p["kv_pressure_cap"] if pressure else 8


def model_batch(p: dict, emas: list[np.float32], pressures: list[bool], plain_run: int, left: int, behind: int) -> int:
    """cost_batch's choice for the batch before each request's cap: the sums of E_i(min(B, cap_i)),
    the tokens the batch has left and the farthest its drafts are behind."""
    sums = {b: sum(expected_commit(accept(e), min(b, cap_of(p, pr))) if b else COST_ONE
                   for e, pr in zip(emas, pressures)) for b in (0, 1, 2, 4, 8)}
    return cost_batch_rule(p, sums, plain_run, left, behind)


def model_ema(p: dict, ema: np.float32, accepted: int, proposed: int) -> np.float32:
    """next_ema under COST: one update per examined draft token, none for a plain step."""
    alpha = F(p["cost_alpha"])
    for j in range(min(proposed, accepted + 1)):
        x = F(1) if j < accepted else F(0)
        ema = F(F(alpha * x) + F(F(F(1) - alpha) * ema))
    return ema


def replay(result, params: dict) -> tuple[list[list[int]], dict[int, dict[int, int]]]:
    """Replays the run round by round and checks every traced value against the model: the EMAs
    after each verify (spec_verify), and at each round's end the batch's block, the plain-step
    counts and the EMAs it read (cost_batch); each step drafts min(the block chosen for it, the
    tokens left) and prefill keeps the batch's first block (the KV cache is on). Returns each
    request's blocks, step by step, and each round's blocks by request."""
    p = {**DEFAULTS, **params}
    program = compiled().program

    def series(stage, *names):
        return {name: trace_series(program, result, stage, name) for name in names}

    verify = series("spec_verify", "accepted_prefix_len", "draft_len", "ema_acceptance_rate", "current_block_size")
    batch = series("cost_batch", "current_block_size", "ema_acceptance_rate", "plain_steps", "req_flags", "d_rows")
    prefill = series("prefill", "current_block_size", "token_limit")
    commits = trace_series(program, result, "commit", "n_out")

    def by_round(table):  # {round: {request: (values...)}}
        out: dict[int, dict[int, tuple]] = {}
        names = list(table)
        for req, (rounds, _) in table[names[0]].items():
            for k, r in enumerate(rounds):
                out.setdefault(int(r), {})[req] = tuple(table[n][req][1][k] for n in names)
        return out

    verify_at, batch_at, prefill_at = by_round(verify), by_round(batch), by_round(prefill)
    commit_at = by_round({"n_out": commits})
    n = len(result.requests)
    final = result.requests
    ema = [F(p["asbs_ema_init"])] * n
    plain_steps = [0] * n
    block: list[int | None] = [None] * n  # the block chosen for the request's next step
    limit, n_out = [0] * n, [0] * n
    steps: list[list[int]] = [[] for _ in range(n)]
    decisions: dict[int, dict[int, int]] = {}
    for r in sorted(set(verify_at) | set(batch_at) | set(prefill_at)):
        for i, (traced_block, token_limit) in sorted(prefill_at.get(r, {}).items()):
            assert block[i] is not None and int(traced_block) == block[i], (r, i, "prefill")
            limit[i] = int(token_limit)
        for i, (acc, drafted, traced_ema, traced_block) in sorted(verify_at.get(r, {}).items()):
            assert int(traced_block) == block[i], (r, i, traced_block, block[i])  # the block verified
            assert int(drafted) == min(block[i], limit[i] - n_out[i]), (r, i, drafted, block[i])
            steps[i].append(block[i])
            ema[i] = model_ema(p, ema[i], int(acc), int(drafted))
            assert F(traced_ema).tobytes() == ema[i].tobytes(), (r, i, traced_ema, ema[i])
        for i, (count,) in commit_at.get(r, {}).items():
            n_out[i] = int(count)
        members = sorted(batch_at.get(r, {}))
        if not members:
            continue
        rows = [batch_at[r][i] for i in members]
        pressures = [bool(int(flags) & KV_PRESSURE) for *_, flags, _ in rows]
        for i, (_, traced_ema, *_) in zip(members, rows):
            assert F(traced_ema).tobytes() == ema[i].tobytes(), (r, i, "the EMA cost_batch read")
        # (a request yet to prefill has all of its limit left: prefill sets the one it will have)
        left = sum(int(final["token_limit"][i]) - n_out[i] for i in members)
        behind = max(max(int(final["prompt_len"][i]) + n_out[i] - 1 - int(d_rows), 0)
                     for i, (*_, d_rows) in zip(members, rows))
        b = model_batch(p, [ema[i] for i in members], pressures, max(plain_steps[i] for i in members), left, behind)
        for i, (traced_block, _, traced_plain, *_), pressure in zip(members, rows, pressures):
            block[i] = max(min(b, cap_of(p, pressure), MAX_BLOCK), 0)
            plain_steps[i] = plain_steps[i] + 1 if b == 0 else 0
            assert int(traced_block) == block[i], (r, i, traced_block, block[i])
            assert int(traced_plain) == plain_steps[i], (r, i, traced_plain, plain_steps[i])
        decisions[r] = {i: block[i] for i in members}
    return steps, decisions


# ---- the real pair --------------------------------------------------------------------------

@pytest.mark.parametrize("max_active", [1, 8])
@pytest.mark.parametrize("costs", [SWITCHING, CHEAP_VERIFY], ids=["switching", "cheap-verify"])
def test_every_decision_is_the_batchs_and_the_tokens_are_plain_greedys(costs, max_active):
    result = run("cpu", ALL_PROMPTS, costs, max_active=max_active)
    assert answers(result) == [list(a) for a in plain("cpu")]
    steps, decisions = replay(result, costs)
    # One block per round for every request of the batch (no pressure here).
    assert all(len(set(d.values())) == 1 for d in decisions.values())
    if max_active > 1:
        assert max(len(d) for d in decisions.values()) == max_active
    used = {b for bs in steps for b in bs}
    if costs is SWITCHING:  # off, probes, and on again
        assert {0, 1} <= used, used
        if max_active == 1:
            assert 4 in used, used
            assert any(0 in bs[:k] and bs[k] > 1 for bs in steps for k in range(len(bs)))  # back on after a probe
    else:  # long blocks; 8 only alone (a batch's random-bytes prompts pull the sums down)
        assert 0 not in used and (8 if max_active == 1 else 4) in used, used


@pytest.mark.parametrize("max_active", [1, 8])
def test_the_h100_defaults_decode_plain_and_never_probe(max_active):
    # At the default costs a block of 1 saves 469 - 927 / 2 = 5.5 per token (1.2%) even with a
    # draft that is always right: below the 5% margin, and its catch-up costs 14 per position, so
    # the batch decodes plain and does not even probe.
    params = {"block_policy": COST}
    result = run("cpu", ALL_PROMPTS, params, max_active=max_active, n_new=48)
    assert answers(result) == [list(a) for a in plain("cpu", 48)]
    steps, _ = replay(result, params)
    assert all(set(bs) == {0} for bs in steps), steps
    assert (result.requests["total_proposed"] == 0).all()


@pytest.mark.parametrize("max_active", [1, 8])
def test_without_catch_up_and_margin_the_h100_defaults_probe_together_every_32_steps(max_active):
    # With a free catch-up and no margin speculation still does not pay at the default costs:
    # plain steps, and a probe (a block of 1 for every request of the batch at once) after 32.
    params = {"block_policy": COST, **EXACT_COSTS}
    result = run("cpu", ALL_PROMPTS, params, max_active=max_active, n_new=48)
    assert answers(result) == [list(a) for a in plain("cpu", 48)]
    steps, decisions = replay(result, params)
    for bs in steps:
        assert bs[:33] == [0] * 32 + [1] and set(bs[33:]) <= {0}, bs
    probes = [r for r, d in decisions.items() if 1 in d.values()]
    assert all(set(decisions[r].values()) == {1} for r in probes)
    if max_active == 8:
        assert len(probes) == 1 and len(decisions[probes[0]]) == 8  # one probe round, all 8 requests


@pytest.mark.parametrize("catchup", [1.0, 0.01])
def test_the_batch_speculates_only_where_it_repays_the_drafts_catch_up(catchup):
    # SWITCHING's costs, where the free catch-up switches between plain steps and blocks of 1
    # and 4. A catch-up of a whole plain step per position is never repaid: plain throughout,
    # no probes. A small one delays speculation until the EMAs and the tokens left repay it;
    # every decision is the replay's either way, and the tokens are plain greedy's.
    params = {**SWITCHING, "cost_catchup": catchup}
    result = run("cpu", ALL_PROMPTS, params, max_active=8)
    assert answers(result) == [list(a) for a in plain("cpu")]
    steps, _ = replay(result, params)
    drafted = sum(b > 0 for bs in steps for b in bs)
    if catchup == 1.0:
        assert drafted == 0 and (result.requests["total_proposed"] == 0).all()
    else:  # the first step plain (where free, a block of 1): the prompt's catch-up is not yet repaid
        free, _ = replay(run("cpu", ALL_PROMPTS, SWITCHING, max_active=8), SWITCHING)
        assert 0 < drafted < sum(b > 0 for bs in free for b in bs), (drafted, free)
        assert all(bs[0] == 0 for bs in steps) and all(bs[0] == 1 for bs in free), (steps, free)


def test_a_block_must_beat_plain_by_the_margin():
    # SWITCHING's blocks of 1 and 4 gain a few percent on plain steps: a 30% margin keeps the
    # batch plain. CHEAP_VERIFY's long blocks make the tokens up to twice as fast: they stay, where
    # the batch's EMAs are high enough.
    for costs, speculates in ((SWITCHING, False), (CHEAP_VERIFY, True)):
        params = {**costs, "cost_margin": 0.3}
        result = run("cpu", ALL_PROMPTS, params, max_active=8)
        assert answers(result) == [list(a) for a in plain("cpu")]
        steps, _ = replay(result, params)
        used = {b for bs in steps for b in bs}
        assert (max(used) >= 2) if speculates else (used == {0}), (costs, used)


def test_plain_steps_propose_nothing_and_leave_the_ema():
    result = run("cpu", PROMPTS, {"block_policy": COST, "cost_probe_every": 0}, max_active=3)
    reqs = result.requests
    assert (reqs["total_proposed"] == 0).all()  # no probes: never a draft
    assert np.array_equal(reqs["ema_acceptance_rate"], np.full(len(PROMPTS), F(0.8)))
    assert answers(result) == [list(plain("cpu")[ALL_PROMPTS.index(name)]) for name in PROMPTS]


def test_kv_pressure_caps_the_blocks_at_two():
    # Pressure from the second KV round on (threshold 0; the pool is empty in the first): every
    # block chosen after the first round is at most 2, and the pressured requests' E counts
    # E(min(B, 2)) in the batch's sums (the replay checks it).
    params = {**CHEAP_VERIFY, "kv_pressure_threshold": 0.0}
    result = run("cpu", ALL_PROMPTS, params, max_active=8)
    assert answers(result) == [list(a) for a in plain("cpu")]
    _, decisions = replay(result, params)
    first = min(decisions)
    later = {b for r, d in decisions.items() if r > first for b in d.values()}
    assert min(decisions[first].values()) > 2 and max(later) == 2 and 0 not in later, (decisions[first], later)


def test_eviction_keeps_the_answer():
    result = run("cpu", ALL_PROMPTS, {**SWITCHING, "pool_pages": 48}, max_active=8, n_new=128)
    assert answers(result) == [list(a) for a in plain("cpu", 128)]
    assert result.requests["recomputed_rows"].sum() > 0
    replay(result, {**SWITCHING, "pool_pages": 48})


def test_simulator_and_cpu_build_agree_bit_for_bit():
    # Short runs (the simulator is slow): the first 12 bytes of one prompt of each kind, 24 new
    # tokens, switching costs with a probe every 2nd plain step, a pool small enough to evict.
    names = ("code_class", "prose_play", "random_0")
    inputs = []
    for name in names:
        r = request(name, 24)
        r["seq"][12:] = 0
        r["prompt_len"] = 12
        inputs.append(r)
    params = {**weights(), **SWITCHING, "cost_probe_every": 2, "pool_pages": 4}
    config = LaunchConfig(max_active=3)
    reference_run = sim.run(compiled().sim_module(), params, inputs, config)
    cpu_run = cpu.run(compiled(), params, inputs, config)
    mismatch = compare(compiled().program, reference_run, cpu_run)
    assert mismatch is None, mismatch
    blocks = trace_series(compiled().program, reference_run, "cost_batch", "current_block_size")
    assert {0, 1, 4} <= set(np.concatenate([blocks[i][1] for i in blocks]).tolist())
    replay(reference_run, {**SWITCHING, "cost_probe_every": 2})
    assert reference_run.requests["recomputed_rows"].sum() > 0
    plain_run = cpu.run(compiled(), {**weights(), "speculate": False}, inputs, config)
    assert answers(reference_run) == answers(plain_run)


# ---- the bundled pipeline (xl_spec: the same asbs.xl) ---------------------------------------

@pytest.fixture(scope="module")
def xl_spec():
    return load("stages/xl_spec.xl")


def test_xl_spec_simulator_and_cpu_build_agree(xl_spec):
    # xl_spec has no cost_batch stage: under COST each request applies the cost rule to its own
    # EMA at its verify (and at prefill, for its first block).
    from xlgen.tools.pipeline.workload import load as load_workload

    for workload, costs in (("mixed", SWITCHING), ("kv_pressure", CHEAP_VERIFY),
                            ("small", {**CHEAP_VERIFY, "kv_cache": False})):
        w = load_workload(f"workloads/{workload}.json", xl_spec.sim_module())
        params = {**w.params, **{k: v for k, v in costs.items() if k not in EXACT_COSTS}}  # (byte_spec's alone)
        reference_run = sim.run(xl_spec.sim_module(), params, w.inputs, w.config)
        cpu_run = cpu.run(xl_spec, params, w.inputs, w.config)
        mismatch = compare(xl_spec.program, reference_run, cpu_run)
        assert mismatch is None, mismatch
        p = {**DEFAULTS, **params}
        first = trace_series(xl_spec.program, reference_run, "prefill", "current_block_size")
        blocks = trace_series(xl_spec.program, reference_run, "spec_verify", "current_block_size")
        emas = trace_series(xl_spec.program, reference_run, "spec_verify", "ema_acceptance_rate")
        used = set()
        for req, (_, chosen) in blocks.items():
            plain_run = 1 if int(first[req][1][0]) == 0 else 0
            for ema, block in zip(emas[req][1], chosen):
                # The request's own choice (its KV pressure is not traced: either cap).
                own = {min(cost_rule(p, {b: expected_commit(accept(F(ema)), min(b, cap)) if b else COST_ONE
                                         for b in (0, 1, 2, 4, 8)}, plain_run), cap)
                       for cap in (8, p["kv_pressure_cap"])}
                assert int(block) in own, (workload, req, ema, block, own)
                plain_run = plain_run + 1 if int(block) == 0 else 0
                used.add(int(block))
        assert len(used) > 2 and (0 in used or costs is not SWITCHING), used
