"""Checks the compiler proves cannot fail (xlgen/backends/ranges.py): what it leaves out of the
C++ code, the lanes loops it versions, and that the CPU build still raises exactly the simulator's
errors on both copies of a versioned loop (the fast one and the checked one)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xlgen.backends.build import load_text
from xlgen.runtime import cpu, sim
from xlgen.tools.check.diff import compare

MATVEC = """pipeline rows
const C: i32 = 4
tensor w: f32[4, 8]
request {
    n: i32
    x: f32[8]
    h: f32[32]
    y: f32[32]
    done_: bool
}
stage matvec when !done_ {
    lanes for e in 0..n * C {
        let t = e / C
        let i = e % C
        let s = sum(j in 0..8: w[i, j] * x[j])
        y[e] = s + h[t * C + i]
    }
    done_ = true
}
trace matvec: y
done when done_
"""


def kernel(source: str) -> str:
    compiled = load_text(source, "ranges.xl")
    return next(text for name, text in compiled.files.items() if name.endswith("_kernel.cuh"))


def run_both(source: str, inputs, params=None):
    compiled = load_text(source, "ranges.xl")
    config = sim.LaunchConfig(max_active=len(inputs), max_rounds=20)
    want = sim.run(compiled.sim_module(), params or {}, inputs, config)
    got = cpu.run(compiled, params or {}, inputs, config)
    assert compare(compiled.program, want, got) is None
    return want


def test_a_matvec_loop_is_versioned_and_its_element_checks_proved():
    code = kernel(MATVEC)
    # y[e] and h[t * C + i] hold for e < 32: the loop runs them unchecked when hi <= 32 (and a
    # row at a time for up to 8 positions: grouping.py)
    assert re.search(r"xl_lanes_grouped<true, 4, 8, true(, false, 0x\w+, 0x\w+)?>\(err, 1, xl_lo, xl_hi, xl_lo >= 0 && xl_hi <= 32,", code)
    # e % C, e / C: a non-negative e and a constant divisor; w[i, j]: i in 0..3, j in 0..7
    assert "xl_rem_nz(e, C)" in code and "xl_div_nz(e, C)" in code
    assert "return xl_fmul(p.w[((int32_t)(i)) * 8 + (int32_t)(j)], r.x[j]);" in code
    # the sum's elements cannot fail: no error test per element
    assert "xl_reduce_sum<float, false>" in code


@pytest.mark.parametrize("n", [0, 3, 8, 9, 40])  # 9 and 40 take the checked copy, and fail there
def test_both_copies_raise_what_the_simulator_raises(n):
    w = np.arange(32, dtype=np.float32).reshape(4, 8)
    inputs = [{"n": n, "x": [1.0] * 8, "h": [0.5] * 32}]
    result = run_both(MATVEC, inputs, {"w": w})
    errors = [r for r in result.records if int(r[2]) == sim.KIND_ERROR]
    assert bool(errors) == (n * 4 > 32)  # past the arrays: an INDEX error, as in every backend


# A loop like the real pair's attention scores: `e % ctx` of a range whose length the stage does
# not know, reading a table of 16 entries through `s / 4`. K = 32 (att's length) proves the
# table's index, and so does every bound up to 64 (s <= 63, s / 4 <= 15): the fast path takes
# ranges up to 64 long, not only up to the array's 32.
SCORES = """pipeline scores
request {
    rows: i32
    ctx: i32
    table: i32[16]
    att: i32[32]
    done_: bool
}
stage score when !done_ {
    let c = ctx
    lanes for e in 0..rows * c {
        let s = e % c
        let v = table[s / 4]
        if e < 32 {
            att[e] = v
        }
    }
    done_ = true
}
trace score: att
done when done_
"""


def test_the_fast_path_takes_the_largest_range_that_proves_the_same_checks():
    code = kernel(SCORES)
    assert "xl_lo >= 0 && xl_hi <= 64," in code
    assert re.search(r"r\.table\[xl_idx_v\(xl_chk, err, \d+, \d+, xl_div_nz\(s, 4\)", code)


@pytest.mark.parametrize("rows, ctx", [(1, 64), (2, 32), (1, 65), (3, 22), (16, 4)])
def test_at_the_fast_limit_and_past_it_both_copies_raise_what_the_simulator_raises(rows, ctx):
    # (1, 64), (2, 32), (16, 4): 64 iterations, the fast copy, s <= 63; (1, 65): the checked copy,
    # table[16] fails; (3, 22): 66 iterations, the checked copy, s <= 21, nothing fails
    result = run_both(SCORES, [{"rows": rows, "ctx": ctx, "table": list(range(16))}])
    errors = [r for r in result.records if int(r[2]) == sim.KIND_ERROR]
    assert bool(errors) == (ctx > 64)


def test_an_empty_interval_proves_no_division():
    """Under `i > 7` in a loop over 0..8 the interval of i is empty; `i - 8` is then (0, -1), which
    once passed for a non-zero divisor and divided by 0 in the analysis (fuzz seed 1031071)."""
    source = """pipeline empty
request {
    a: i32[8]
    k: i32
}
stage s when k == 0 {
    lanes for i in 0..8 {
        a[i] = i > 7 ? 5 / (i - 8) : i % (i + 1)
    }
    k = 1
}
trace s: a
done when k == 1
"""
    assert "xl_div(err" in kernel(source)  # not proved: the checked division stays
    run_both(source, [{}])


NONZERO = """pipeline nonzero
request {
    n: i32
    m: i32
    lo: i32
    out: i32[64]
    k: i32
}
stage s when k == 0 {
    let cols = m
    let count = n * cols
    lanes for e in 0..n * cols {
        out[e] = e / cols + e % cols
    }
    lanes for e in lo..n * cols {
        out[e + 8] = e / cols
    }
    let total = sum(j in 0..cols * 2: j / cols)
    out[0] = total + count
    k = 1
}
trace s: out
done when k == 1
"""


def test_a_factor_of_a_ranges_end_is_not_zero_inside_it():
    """`lanes for e in 0..n * cols`: an iteration means n * cols > 0, so cols != 0 (wrapping or
    not, a product with a factor 0 is 0): e / cols needs no check. From `lo`, which may be
    negative, nothing follows."""
    code = kernel(NONZERO)
    assert code.count("xl_div_nz(e, cols)") == 1 and "xl_rem_nz(e, cols)" in code
    assert "xl_div(err, 1, 16, e, cols)" in code  # the loop from lo: checked
    assert "xl_div_nz(j, cols)" in code  # a reduction over 0..cols * 2
    # the same results and errors as the simulator: empty ranges (m = 0, n = 0), a range from
    # lo = -3 (no zero divisor), a product that wraps to 0 (no iteration) and ranges past `out`
    result = run_both(NONZERO, [{"n": 3, "m": 5}, {"n": 4, "m": 0}, {"n": 0, "m": 7}, {"n": 1, "m": 2, "lo": -3},
                                {"n": 65536, "m": 65536}, {"n": 9, "m": 8}, {"n": 2, "m": 2, "lo": -9}])
    errors = sorted(int(r[0]) for r in result.records if int(r[2]) == sim.KIND_ERROR)
    assert errors == [5, 6], errors


def test_wrapping_arithmetic_proves_nothing():
    """i32 wraps: an index whose exact value would leave i32 is not bounded."""
    source = """pipeline wraps
request {
    a: f32[8]
    b: f32[8]
    k: i32
}
stage s when k == 0 {
    lanes for i in 0..8 {
        let big = i * 1073741824 + i
        a[i] = b[big % 8]
    }
    k = 1
}
trace s: a
done when k == 1
"""
    assert "xl_idx(err, 1," in kernel(source)  # big % 8 may be negative after wrapping
    run_both(source, [{}])
