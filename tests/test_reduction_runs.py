"""Reductions side by side over one range, taken in one pass on the GPU and in the CPU build
(ir.reduction_runs, docs/gpu.md): each keeps its own bits, and the statement that fails is the
first in program order that does, as when they run one after another (the simulator, the
specification, still runs them so)."""

from __future__ import annotations

import numpy as np
import pytest

from test_semantics_backends import line_of, run_on
from xlgen.backends.build import load_text
from xlgen.core import ir
from xlgen.runtime.sim import KIND_ERROR
from xlgen.semantics.ops import ERR_DIV_ZERO, ERR_INDEX
from xlgen.tools.check.fuzzgen import backends

BACKENDS = [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in backends()]

SRC = """pipeline runs
request {
    xs: i32[40]
    d: i32 = -1000
    cut: i32
    n: i32 = 40
    total: i32
    most: i32
    at: i32
    f: f32
    after: i32
    done_: bool
}
stage work when !done_ {
    let total_ = sum(k in 0..n: xs[k])
    let most_ = max(k in 0..n: 100000 / (xs[k] - d))
    let at_ = argmin(k in 0..n: xs[k + cut])
    let f_ = sum(k in 0..n: xs[k] as f32 * 0.1)
    let after_ = sum(k in 0..n: total_ + xs[k])
    total = total_
    most = most_
    at = at_
    f = f_
    after = after_
    done_ = true
}
trace work: total, most, at, f, after
done when done_
"""


def test_reductions_side_by_side_over_one_range_are_one_run():
    body = load_text(SRC, "runs.xl").program.stages[0].body
    runs = ir.reduction_runs(body)
    # the fifth reads the first's result: a run of its own
    assert [[s.name for s in run] for run in runs[:2]] == [["total_", "most_", "at_", "f_"], ["after_"]]
    assert all(len(run) == 1 for run in runs[2:])
    source = load_text(SRC, "runs.xl").files["runs_kernel.cuh"]
    assert source.count("xl_reduce_pass(") == 1 and source.count("XlSumPass<") == 2


def test_a_run_holds_at_most_its_maximum_and_needs_equal_bounds():
    lets = "\n".join(f"    let s{i} = sum(k in 0..n: xs[k] + {i})" for i in range(ir.REDUCTION_RUN_MAX + 2))
    src = SRC.replace("    let total_ = sum(k in 0..n: xs[k])", lets + "\n    let total_ = sum(k in 1..n: xs[k])")
    runs = ir.reduction_runs(load_text(src, "runs.xl").program.stages[0].body)
    # s0..s7 | s8, s9 | total_ (over 1..n) | most_, at_, f_, after_ (total_ is not in their run)
    assert [len(run) for run in runs[:4]] == [ir.REDUCTION_RUN_MAX, 2, 1, 4]


def _xs(seed: int) -> list[int]:
    return [int(v) for v in np.random.default_rng(seed).integers(-50, 50, 40)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_gives_each_reduction_its_own_value(backend):
    xs = _xs(1)
    _, result = run_on(backend, SRC, [{"xs": xs}])
    r = result.requests[0]
    assert int(r["total"]) == sum(xs)
    assert int(r["most"]) == max(100000 // (x + 1000) for x in xs)
    assert int(r["at"]) == int(np.argmin(xs))
    assert int(r["after"]) == 40 * sum(xs) + sum(xs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_first_failing_reduction_in_program_order_is_the_error(backend):
    """most_ fails at k = 35 (xs[35] == d) and at_ at k = 30 (30 + cut = 40, out of range): the
    error is most_'s, the earlier statement, though at_'s failing element comes first; with
    most_ not failing, at_'s."""
    xs = _xs(2)
    xs[35] = 77
    for d, want, text in ((77, ERR_DIV_ZERO, "let most_"), (1000, ERR_INDEX, "let at_")):
        _, result = run_on(backend, SRC, [{"xs": xs, "d": d, "cut": 10}])
        (err,) = result.errors().tolist()
        assert (err[4], err[5]) == (want, line_of(SRC, text))
        assert int(result.per_request(0)[-1][2]) == KIND_ERROR


AHEAD_SRC = """pipeline ahead
shared {
    tab: i32[16]
    used: i32[16]
}
request {
    ix: i32[8]
    n: i32 = 8
    m: i32 = 8
    seeded: bool
    a: i32
    b: i32
    lo: i32
    c: i32
    done_: bool
}
collective seed when !seeded {
    tab[req_id] = req_id * 3 + 1
    used[req_id] = 100 - req_id
    seeded = true
}
stage count when seeded && !done_ {
    let a_ = sum(k in 0..n: (k < m && ix[k] >= 0) ? tab[ix[k]] : 0)
    let b_ = sum(k in 0..n: (k < m && ix[k] >= 0 && tab[ix[k]] > 4) ? used[ix[k]] : 1)
    let lo_ = min(k in 0..n: k < 1 ? tab[ix[k + 7]] : 99)
    let c_ = sum(k in 0..n: tab[ix[k] & 15] - used[ix[k] & 15])
    a = a_
    b = b_
    lo = lo_
    c = c_
    done_ = true
}
trace count: a, b, lo, c
done when done_
"""


def test_shared_reads_of_a_run_are_read_ahead_and_guarded():
    """Each distinct shared read of the run's elements once per element, before their conditions
    (emit_cpp._reads_ahead), the reads in its index guarded too (xl_peek): `ix[k + 7]` is in
    range only where `k < 1` holds."""
    source = load_text(AHEAD_SRC, "ahead.xl").files["ahead_kernel.cuh"]
    assert source.count("xl_peek(sh.tab, xl_peek(r.ix, xl_k))") == 1
    assert "xl_peek(sh.used, xl_peek(r.ix, xl_k))" in source
    assert "xl_peek(sh.tab, xl_peek(r.ix, xl_add(xl_k, 7)))" in source
    assert "sh.tab[" not in source.split("stage_count")[1]  # every use takes the value read ahead
    # `tab[ix[k] & 15]`'s own index cannot fail, but `ix[k]` inside it can: its use still evaluates it
    assert "xl_peek(sh.tab, xl_band(xl_peek(r.ix, xl_k), 15))" in source
    assert "xl_then(xl_band(r.ix[xl_idx(err, " in source


@pytest.mark.parametrize("backend", BACKENDS)
def test_reads_ahead_give_the_programs_values_and_errors(backend):
    """Out-of-range indexes the program does not evaluate (behind `k < m`, `ix[k] >= 0`, `k < 1`)
    raise nothing; one it evaluates raises the index error of its own statement, also where it is
    inside an index proved in range (`ix[8]` in `tab[ix[k] & 15]`, request 4)."""
    inputs = [{"ix": [0, 3, -1, 2, 1, 50, 77, 1], "m": 5}, {"ix": [2] * 8, "n": 4}, {"ix": [1] * 8, "m": 0},
              {"ix": [0, 1, 50, 1, 1, 1, 1, 1]}, {"ix": [3] * 8, "n": 9}]
    _, result = run_on(backend, AHEAD_SRC, inputs)
    r = result.requests  # tab[0..3] = 1, 4, 7, 10 and used[0..3] = 100, 99, 98, 97 (seed)
    assert [int(r["a"][i]) for i in range(3)] == [1 + 10 + 7 + 4, 4 * 7, 0]
    assert [int(r["b"][i]) for i in range(3)] == [1 + 97 + 1 + 98 + 1 + 3, 4 * 98, 8]
    assert [int(r["lo"][i]) for i in range(3)] == [4, 7, 4]
    assert int(r["c"][1]) == 4 * (7 - 98)
    errors = sorted((e[0], e[4], e[5]) for e in result.errors().tolist())  # request 3's a_ reads tab[50]
    assert errors == [(3, ERR_INDEX, line_of(AHEAD_SRC, "let a_")), (4, ERR_INDEX, line_of(AHEAD_SRC, "let c_"))]


# The warp's finish of a reduction (xl_runtime.cuh: xl_warp_best, xl_warp_sum; redux.sync on the
# GPU): min/max pairs by the order key with ties to the lowest index across lanes, and 32-bit
# integer sums that wrap. Ranges of 70 elements from lo: each lane holds two or three.
FINISH_SRC = """pipeline finishes
request {
    xs: f32[70]
    ks: i32[70]
    us: u32[70]
    lo: i32
    n: i32 = 70
    hi_v: f32
    lo_v: f32
    hi_at: i32
    lo_at: i32
    k_hi: i32
    k_lo_at: i32
    k_sum: i32
    u_sum: u32
    done_: bool
}
stage work when !done_ {
    let hi_v_ = max(j in lo..n: xs[j])
    let lo_v_ = min(j in lo..n: xs[j])
    let hi_at_ = argmax(j in lo..n: xs[j])
    let lo_at_ = argmin(j in lo..n: xs[j])
    let k_hi_ = max(j in lo..n: ks[j])
    let k_lo_at_ = argmin(j in lo..n: ks[j])
    let k_sum_ = sum(j in lo..n: ks[j])
    let u_sum_ = sum(j in lo..n: us[j])
    hi_v = hi_v_
    lo_v = lo_v_
    hi_at = hi_at_
    lo_at = lo_at_
    k_hi = k_hi_
    k_lo_at = k_lo_at_
    k_sum = k_sum_
    u_sum = u_sum_
    done_ = true
}
trace work: hi_v, lo_v, hi_at, lo_at, k_hi, k_lo_at, k_sum, u_sum
done when done_
"""


def _finish_case(seed: int, lo: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    xs = rng.integers(-8, 8, 70).astype(np.float32)  # few values: ties in many lanes
    ks = rng.integers(-3, 3, 70).astype(np.int64)
    ks[rng.integers(0, 70, 6)] = 2**31 - 1  # the sum wraps
    us = rng.integers(0, 2**32, 70, dtype=np.uint64)
    return {"xs": xs.tolist(), "ks": ks.tolist(), "us": us.tolist(), "lo": lo}


@pytest.mark.parametrize("backend", BACKENDS)
def test_warp_finishes_take_ties_to_the_lowest_index_and_sums_wrap(backend):
    cases = [_finish_case(1), _finish_case(2, lo=5), _finish_case(3, lo=69)]
    zeros = _finish_case(4)
    zeros["xs"] = [0.0] * 70
    zeros["xs"][40], zeros["xs"][50] = -0.0, -0.0  # -0.0 < 0.0 in the order: min takes the first -0.0
    special = _finish_case(5)
    special["xs"][33], special["xs"][64] = float("inf"), float("nan")  # NaN above +inf
    special["xs"][2] = float("-inf")
    cases += [zeros, special]
    _, result = run_on(backend, FINISH_SRC, cases)
    for i, case in enumerate(cases[:3]):
        r, lo = result.requests[i], case["lo"]
        xs, ks = np.asarray(case["xs"][lo:], np.float32), np.asarray(case["ks"][lo:], np.int64)
        assert (float(r["hi_v"]), float(r["lo_v"])) == (xs.max(), xs.min())
        assert (int(r["hi_at"]), int(r["lo_at"])) == (lo + int(np.argmax(xs)), lo + int(np.argmin(xs)))
        assert (int(r["k_hi"]), int(r["k_lo_at"])) == (ks.max(), lo + int(np.argmin(ks)))
        wrapped = (int(ks.sum()) + 2**31) % 2**32 - 2**31
        assert int(r["k_sum"]) == wrapped and int(r["u_sum"]) == sum(case["us"][lo:]) % 2**32
    z, s = result.requests[3], result.requests[4]
    assert (int(z["lo_at"]), int(z["hi_at"])) == (40, 0) and np.signbit(np.float32(z["lo_v"]))
    assert (int(s["hi_at"]), int(s["lo_at"])) == (64, 2) and np.isnan(float(s["hi_v"]))
