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
