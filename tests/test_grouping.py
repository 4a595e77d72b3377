"""Weight-once passes (xlgen/backends/grouping.py): which lanes loops the C++ code runs a row at a
time, and that doing so changes no bit: the CPU build (and the GPU, with every team shape)
against the simulator, with partial groups, a range that starts mid-row, and tails that fail
for some iterations."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xlgen.backends import grouping
from xlgen.backends.build import load, load_text
from xlgen.core import ir
from xlgen.runtime import cpu, sim
from xlgen.semantics import ops
from xlgen.tools.check.diff import compare

# Positions x rows over n positions from position `first`: sums reading row i of `w` and the
# position's slice of `x`; the tail stores, and for rows past `limit` reads past `x` (an
# INDEX error for those iterations only, the lowest failing one reported).
PASS = """pipeline passes
const K: i32 = 8
const P: i32 = 5
tensor w: f32[K, 40]
request {
    first: i32
    skip: i32
    n: i32
    limit: i32 = 100
    x: f32[P * 40]
    y: f32[P * K]
    z: f32[P * K]
    done_: bool
}
stage pass when !done_ {
    lanes for e in first * K + skip..n * K {
        let t = e / K
        let i = e % K
        let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])
        let b = sum(j in 0..40: w[i, j] * w[i, j] - x[t * 40 + j])
        let c = sum(j in 0..33: x[t * 40 + j] * (t as f32))
        y[e] = a + b
        let at = i > limit ? P * 40 + t : t
        z[e] = c + x[at]
    }
    done_ = true
}
trace pass: y, z
done when done_
"""


def lanes_loops(compiled) -> list[ir.Lanes]:
    return [s for st in compiled.program.stages for s in ir.statements(st.body) if isinstance(s, ir.Lanes)]


def kernel(compiled) -> str:
    return next(text for name, text in compiled.files.items() if name.endswith("_kernel.cuh"))


def inputs_for(cases, positions=5):
    rng = np.random.default_rng(7)
    return [{"first": first, "n": n, "limit": limit, "skip": skip,
             "x": rng.standard_normal(positions * 40).astype(np.float32).tolist()} for first, n, limit, skip in cases]


# The same pass over 9 positions: groups of 9, so a tile of 4 rows (a team of one warp; 2 rows in
# a team of 4, 1 in a team of 16: xl_group_rows_per_tile) holds 36 sums per sum statement, 32 of
# them reduced by a transposed butterfly and the other 4 by plain ones, each lane then running a
# second tail (xl_group_tails). Whole positions run in tiles; a range starting mid-position (skip)
# a row at a time; 2 or 3 positions (fewer than XL_GROUP_MIN_POSITIONS) in tiles of rows of one.
PASS9 = PASS.replace("const P: i32 = 5", "const P: i32 = 9")
CASES9 = [(0, 9, 100, 0), (0, 9, 3, 0), (1, 9, 100, 0), (0, 5, 100, 0), (0, 9, 100, 3), (2, 7, 6, 0), (0, 10, 100, 0),
          (3, 5, 100, 0), (0, 2, 4, 0), (4, 7, 100, 0)]

# ... with a gain: in w[i, j] * (x[t * 40 + j] * g[j]), g[j] is the same for every iteration of a
# tile (read once per element, xl_c), the product with x for every row (xl_a), w[i, j] for every
# position (xl_w).
GAIN = PASS9.replace("tensor w: f32[K, 40]", "tensor w: f32[K, 40]\ntensor g: f32[40]").replace(
    "let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])", "let a = sum(j in 0..40: w[i, j] * (x[t * 40 + j] * g[j]))")


def gain_weights():
    return {**weights(), "g": (np.arange(40, dtype=np.float32) / 13.0 - 1.5)}


# (first position, end position, rows past which the tail fails, iterations skipped at the start).
# Grouped (xl_lanes_grouped) from 4 positions per row on average (XL_GROUP_MIN_POSITIONS): the
# first, third, fourth, fifth and last; the others run one iteration at a time.
CASES = [(0, 5, 100, 0), (0, 1, 100, 0), (0, 5, 100, 3), (1, 5, 5, 0), (0, 5, 0, 0), (0, 3, 100, 0),
         (0, 6, 100, 0), (0, 4, 100, 5), (2, 5, 100, 0)]


def weights():
    return {"w": (np.arange(8 * 40, dtype=np.float32).reshape(8, 40) / 7.0 - 20.0)}


def agrees(compiled, params, inputs, team_warps=None):
    """The simulator's result, after checking the CPU build (team_warps None) or the GPU with a
    team of that many warps (or (warps, blocks): a cluster of blocks) against it, bit for bit."""
    warps, blocks = team_warps if isinstance(team_warps, tuple) else (team_warps, 1)
    config = sim.LaunchConfig(max_active=len(inputs), max_rounds=5)
    want = sim.run(compiled.sim_module(), params, inputs, config)
    if team_warps is None:
        got = cpu.run(compiled, params, inputs, config)
    else:
        gpu = pytest.importorskip("xlgen.runtime.gpu")
        if not gpu.available():
            pytest.skip("needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
        got = gpu.run(compiled, params, inputs, config, mode="deterministic", team_warps=warps, team_blocks=blocks)
    assert compare(compiled.program, want, got) is None
    return want


def test_the_pass_is_grouped_with_the_weight_read_once():
    compiled = load_text(PASS, "passes.xl")
    code = kernel(compiled)
    # bound 40 (y, z of P * K), K = 8: groups of up to 5 positions
    assert re.search(r"xl_lanes_grouped<true, 8, 5, true(, false, 0x\w+, 0x\w+)?>\(err, 1, xl_lo, xl_hi, xl_lo >= 0 && xl_hi <= 40,", code)
    assert code.count("xl_sum_tile<float, xl_R, 5>(xl_lo, xl_hi, xl_n, ") == 3
    # and with fewer positions, a tile of rows of one position: the activation read once per
    # element for every row, each row's tail on its own lane; a and b (one range) in one pass
    assert code.count("xl_sum_rows<float, xl_R, false, 2>(") == 1 and code.count("xl_sum_rows<float, xl_R, false, 1>(") == 1
    assert "return xl_fmul(p.w[(xl_idx_v(xl_chk, err, 1, " in code and ", xl_w);" in code
    assert "xl_rows_tails<xl_R>(xl_rlo, xl_rhi, [&](int32_t xl_ri) {" in code
    assert "XL_LANE_STORE(r.z[xl_i], xl_v);" in code  # a row's tail stores on its lane
    # the weight is read once per element for every position of the group; a sum with no
    # weight (c) reads nothing once
    assert re.search(r"return p\.w\[\(xl_idx_v\(xl_chk, err, 1, \d+, i, 8, \d+\)\) \* 40 \+ \(int32_t\)\(j\)\]; \},", code)
    # ... and the activation once for every row of the tile, the element their product
    assert re.search(r"\[&\]\(int32_t xl_g, int32_t j, \[\[maybe_unused\]\] int32_t xl_c\) -> float \{ "
                     r"\[\[maybe_unused\]\] const int32_t t = xl_t0 \+ xl_g; XlErr err = \{0, 0, 0\}; return r\.x\[", code)
    assert "return xl_fmul(xl_w, xl_a);" in code
    # (nothing here is the same for every iteration of a tile: see test_a_gain_is_read_once_per_tile)
    assert "[](auto...) -> int32_t { return 0; }," in code


def test_what_is_not_grouped():
    def plan_of(body: str):
        source = PASS.replace(PASS[PASS.index("    lanes for"):PASS.index("    done_ = true")], body)
        return [grouping.plan(s, 40) for s in lanes_loops(load_text(source, "passes.xl"))]

    split = "        let t = e / K\n        let i = e % K\n"
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") != [None]
    # a sum whose start depends on the position (its stop may: each sum of a tile stops on its own)
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in t..40: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") == [None]
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..t + 1: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") != [None]
    # no split of the loop variable
    assert plan_of("    lanes for e in 0..n * K {\n"
                   + "        let a = sum(j in 0..40: w[e % K, j])\n        y[e] = a\n    }\n") == [None]
    # two different splits
    assert plan_of("    lanes for e in 0..n * K {\n        let t = e / K\n        let i = e % 4\n"
                   + "        let a = sum(j in 0..40: w[i, j])\n        y[e] = a\n    }\n") == [None]
    # a sum whose range reads an earlier sum (per position): the head ends before it (fuzz seed 4103995)
    assert [r.name for r in plan_of("    lanes for e in 0..n * K {\n" + split
                                    + "        let a = sum(j in 0..40: w[i, j])\n"
                                    + "        let b = sum(j in 0..clamp(a as i32, 0, 40): w[i, j])\n"
                                    + "        y[e] = b\n    }\n")[0].sums] == ["a"]
    # a sum reading a local of the body other than the split
    assert plan_of("    lanes for e in 0..n * K {\n" + split + "        let a = sum(j in 0..40: w[i, j])\n"
                   + "        let b = sum(j in 0..40: w[i, j] * a)\n        y[e] = b\n    }\n")[0].sums[0].name == "a"
    # preludes: what reads the position but no row, before the sums (Rows.preludes); not one the
    # body assigns (a tile holds one value for its rows), nor one reading the row, nor a run of
    # them with no sum after it (the loop's sums are then those of old)
    def preludes_and_sums(body: str) -> tuple[list[str], list[str]]:
        head = plan_of("    lanes for e in 0..n * K {\n" + split + body + "        y[e] = a\n    }\n")[0]
        return [x.name for x in head.preludes], [r.name for r in head.sums]

    norm = "        let s = sum(j in 0..40: x[t * 40 + j] * x[t * 40 + j])\n        let m = rsqrt(s)\n"
    a = "        let a = sum(j in 0..40: w[i, j] * (x[t * 40 + j] * m))\n"
    assert preludes_and_sums(norm + a) == (["s", "m"], ["a"])
    assert preludes_and_sums(norm + a + "        m = 1.0\n") == ([], ["s"])  # (then no sum: s is one)
    assert preludes_and_sums("        let m = sum(j in 0..40: x[t * 40 + j] * (i as f32))\n" + a) == ([], ["m"])
    assert preludes_and_sums("        let a = sum(j in 0..40: x[t * 40 + j])\n") == ([], ["a"])
    # not versioned (no bound): a grouped loop's fast path is the only one grouped
    loop = lanes_loops(load_text(PASS, "passes.xl"))[0]
    assert grouping.plan(loop, None) is None and grouping.plan(loop, 8) is None  # one position per group


def test_which_loops_run_rows_together():
    def plan_of(body: str):
        source = PASS.replace(PASS[PASS.index("    lanes for"):PASS.index("    done_ = true")], body)
        return [grouping.rows_plan(s) for s in lanes_loops(load_text(source, "passes.xl"))]

    split = "        let t = e / K\n        let i = e % K\n"
    rows = plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n")[0]
    assert rows.k == 8 and rows.positions == ("t",) and rows.rows == ("i",) and [r.name for r in rows.sums] == ["a"]
    # a sum whose range depends on the position: the same for every row of a tile
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..t + 1: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") != [None]
    # ... but not one whose range depends on the row: it stays in the tail, which a lane cannot run
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..i + 1: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") == [None]
    # a reduction in the tail
    assert plan_of("    lanes for e in 0..n * K {\n" + split + "        let a = sum(j in 0..40: w[i, j])\n"
                   + "        let m = max(j in 0..40: x[t * 40 + j] * a)\n        y[e] = m\n    }\n") == [None]
    # no split: the iteration is the row (any loop of sums), whatever its bound
    plain = plan_of("    lanes for e in first..n {\n"
                    + "        let a = sum(j in 0..40: w[e % K, j] * x[j])\n        y[e] = a\n    }\n")[0]
    assert plain.k is None and plain.rows == () and plain.positions == ()


# Rows without a split (like examples/gemv): a tile is R consecutive iterations of lo..hi, any
# lo and hi, the tail failing for some rows.
ROWS = """pipeline rows
tensor w: f32[40, 70]
request {
    lo: i32
    hi: i32
    limit: i32 = 100
    x: f32[70]
    y: f32[40]
    done_: bool
}
stage pass when !done_ {
    lanes for i in lo..hi {
        let a = sum(j in 0..70: w[i, j] * x[j])
        let b = sum(j in 3..lo % 7 + 60: x[j] - w[i, j])
        y[i] = (i > limit ? x[70 + i] : a) + b
    }
    done_ = true
}
trace pass: y
done when done_
"""


# (lo, hi, limit): ranges from 0, mid-tile and past `y`, empty, and tails failing past `limit`
ROWS_CASES = [(0, 40, 100), (0, 1, 100), (3, 37, 100), (5, 40, 20), (0, 40, 0), (-2, 9, 100), (7, 7, 100),
              (30, 41, 100)]


def rows_launch(seed: int, cases):
    rng = np.random.default_rng(seed)
    inputs = [{"lo": lo, "hi": hi, "limit": limit, "x": rng.standard_normal(70).astype(np.float32).tolist()}
              for lo, hi, limit in cases]
    return {"w": rng.standard_normal((40, 70)).astype(np.float32)}, inputs


def test_rows_without_a_split_cpu_equals_the_simulator():
    compiled = load_text(ROWS, "rows.xl")
    code = kernel(compiled)
    assert re.search(r"xl_lanes_grouped<true, 40, 1, false(, false, 0x\w+, 0x\w+)?>\(err, 1, xl_lo, xl_hi, xl_lo >= 0 && xl_hi <= 40,", code)
    assert code.count("xl_sum_rows<float, xl_R, false, 1>(") == 2  # (two ranges)
    want = agrees(compiled, *rows_launch(3, ROWS_CASES))
    errors = {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    assert errors == {3, 4, 5, 7}, errors  # a failing tail (3, 4); ranges past the arrays (5, 7)


# Rows whose sums read a pool: a request reads its own page (rows below 20) or `other` (a page
# another request owns: NOT_OWNER; or past the pool: INDEX). A tile in which an element failed
# runs again an iteration at a time (xl_lanes_grouped), where the lowest failing one is found.
ROWS_POOL = """pipeline rows_pool
const PAGES: i32 = 8
pool kv: f32[PAGES, 32] owned by page_owner
shared {
    page_owner: i32[PAGES] = -1
}
request {
    page: i32 = -1
    other: i32
    lo: i32
    hi: i32
    x: f32[40]
    y: f32[40]
    done_: bool
}
arbiter grant when page == -1 {
    page_owner[req_id] = req_id
    page = req_id
}
stage fill when page >= 0 && !done_ {
    lanes for j in 0..32 {
        kv[page, j] = x[j] * 2.0 - 1.0
    }
    lanes for i in lo..hi {
        let a = sum(j in 0..32: kv[i < 20 ? page : other, j] * x[i])
        let b = sum(j in 0..32: x[j + other * 2])
        y[i] = a + b
    }
    done_ = true
}
trace fill: y
done when done_
"""


def rows_pool_inputs(seed: int):
    rng = np.random.default_rng(seed)
    cases = [(0, 0, 40), (0, 1, 40), (1, 9, 33), (3, 3, 20), (2, 5, 40), (8, 8, 40), (4, 30, 31), (6, 0, 17)]
    return [{"other": other, "lo": lo, "hi": hi, "x": rng.standard_normal(40).astype(np.float32).tolist()}
            for other, lo, hi in cases]


def test_rows_reading_a_pool_cpu_equals_the_simulator():
    compiled = load_text(ROWS_POOL, "rows_pool.xl")
    assert "if (xl_sum_rows<float, xl_R, true, 2>(" in kernel(compiled)
    want = agrees(compiled, {}, rows_pool_inputs(11))
    errors = {int(r[0]): int(r[4]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    # NOT_OWNER (1 reads page 0, 2 page 1, 4 page 2, 6 page 4 at rows >= 20), INDEX (5 reads page 8;
    # 7 reads x past its end in b, the part of the element the same for every row)
    assert sorted(errors) == [1, 2, 4, 5, 6, 7], errors


def test_user_names_that_the_emitter_renames_do_not_clash_with_a_tiles():
    """A user name the C++ emitter must rename (`r`, `p`, `std`: `xl_r`, ...) inside a tile of rows
    or a group (fuzz seeds 5001046, 5001055 and 5001328 once did not compile)."""
    source = """pipeline clash
const K: i32 = 4
tensor w: f32[K, 8]
request {
    n: i32
    y: f32[8 * K]
    done_: bool
}
stage s when !done_ {
    lanes for e in 0..n * K {
        let p = e / K
        let std = e % K
        let r = sum(j in 0..8: w[std, j] * (p as f32))
        y[e] = r
    }
    done_ = true
}
trace s: y
done when done_
"""
    compiled = load_text(source, "clash.xl")
    code = kernel(compiled)
    assert "xl_sum_rows<" in code and "xl_sum_tile<" in code and "float xl_r = xl_sums0" in code
    agrees(compiled, {"w": np.arange(32, dtype=np.float32).reshape(4, 8) / 3.0}, [{"n": n} for n in (1, 2, 8)])


# Lets between the split and the sums, some reading the position alone (u), some the row alone
# (v): an element's part hoisted out of a tile never reads one (it is evaluated where the lets
# are not); before, the hoisted `x[u + j]` named an undeclared `u` and the C++ did not compile.
HEAD_LETS = """pipeline head_lets
const K: i32 = 8
tensor w: f32[K, 40]
request {
    n: i32
    x: f32[200]
    y: f32[40]
    done_: bool
}
stage pass when !done_ {
    lanes for e in 0..n * K {
        let t = e / K
        let i = e % K
        let u = t * 40
        let v = i * 2
        let a = sum(j in 0..40: w[i, j] * x[u + j])
        let b = sum(j in 0..40: w[v / 2, j] - x[u + j])
        y[e] = a + b
    }
    done_ = true
}
trace pass: y
done when done_
"""


def head_lets_launch():
    w = {"w": np.arange(320, dtype=np.float32).reshape(8, 40) / 9}
    return w, [{"n": n, "x": (np.arange(200, dtype=np.float32) / 7).tolist()} for n in (1, 2, 5, 6)]


def test_lets_between_the_split_and_the_sums():
    compiled = load_text(HEAD_LETS, "head_lets.xl")
    code = kernel(compiled)
    assert code.count("xl_sum_rows<float, xl_R, false, 2>(") == 1 and code.count("xl_sum_tile<") == 2
    assert "const int32_t u = xl_mul(t, 40);" in code
    want = agrees(compiled, *head_lets_launch())
    assert len(want.errors()) == 1  # n = 6: y past its end


# Attention's weighted sum in miniature: row = t * 2 + i / HEAD is the same over a tile of rows
# (R <= 32 rows from a multiple of R, HEAD a multiple of 32: grouping.Rows.per_tile), so the
# attention weight att[row * 16 + s] is read once per element for the tile; it may fail (n = 4
# reads past att: row 7), and the pool's owner check may (another's page, rows >= 40).
HEAD_ROWS = """pipeline head_rows
const PAGES: i32 = 8
const D: i32 = 64
const HEAD: i32 = 32
pool kv: f32[PAGES, 16] owned by page_owner
shared {
    page_owner: i32[PAGES] = -1
}
request {
    page: i32 = -1
    other: i32
    n: i32
    att: f32[7 * 16]
    y: f32[4 * D]
    done_: bool
}
arbiter grant when page == -1 {
    page_owner[req_id] = req_id
    page = req_id
}
stage fill when page >= 0 && !done_ {
    lanes for s in 0..16 {
        kv[page, s] = (s as f32) * 0.5 - 3.0
    }
    lanes for e in 0..n * D {
        let t = e / D
        let i = e % D
        let row = t * 2 + i / HEAD
        let acc = sum(s in 0..16: att[row * 16 + s] * kv[i < 40 ? page : other, s] * (i as f32))
        y[e] = acc
    }
    done_ = true
}
trace fill: y
done when done_
"""


def head_rows_inputs(seed: int):
    """(another request's page, positions): requests 3 and 4 fail (HEAD_ROWS)."""
    rng = np.random.default_rng(seed)
    return [{"other": other, "n": n, "att": rng.standard_normal(112).astype(np.float32).tolist()}
            for other, n in [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (5, 3), (6, 2), (7, 1)]]


def test_a_let_the_same_over_a_tile_of_rows_is_read_once_per_element():
    compiled = load_text(HEAD_ROWS, "head_rows.xl")
    loop = next(x for x in lanes_loops(compiled) if x.var == "e")
    head = grouping.rows_plan(loop)
    assert head.per_tile(loop.var) == {"row"} and "row" not in head.per_row(loop.var)
    code = kernel(compiled)
    # declared once per tile from its first row, and the weight read in the shared part, which
    # reports its failures (xl_shared_part)
    assert "[[maybe_unused]] const int32_t i = xl_row0;" in code
    assert re.search(r"\[&\]\(int32_t xl_j, XlErr& err\) -> float \{ \[\[maybe_unused\]\] const int32_t s = xl_j; "
                     r"\(void\)err; return r\.att\[", code)
    want = agrees(compiled, {}, head_rows_inputs(3))
    # request 3 reads past att (n = 4: rows 32.. of position 3), request 4 another's page first
    assert {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {3, 4}


def test_which_lets_are_the_same_over_a_tile():
    def per_tile(let: str) -> set[str]:
        source = HEAD_ROWS.replace("let row = t * 2 + i / HEAD", f"let row = {let}")
        loop = next(x for x in lanes_loops(load_text(source, "h.xl")) if x.var == "e")
        return grouping.rows_plan(loop).per_tile(loop.var)

    assert per_tile("t * 2 + i / HEAD") == {"row"}
    assert per_tile("i / 64 + t") == {"row"}
    assert per_tile("e / 64") == set()  # the loop variable differs between the rows
    assert per_tile("i / 16") == set()  # 16 rows may straddle a multiple of 16 in a tile of 32
    assert per_tile("(i + 1) / 32") == set()  # not the row itself
    assert per_tile("i % 2") == set()


# A request granted page req_id of the pool, each column c of its row i filled with i / 4 - c - req_id
# (PAGE_ROWS and SCORES read it).
OWN_PAGE_FILLED = """arbiter grant when !granted {
    page_owner[req_id] = req_id
    granted = true
}
stage fill when granted && !done_ {
    lanes for i in 0..D {
        for c in 0..4 {
            kv[req_id, i, c] = (i as f32) * 0.25 - (c as f32) - (req_id as f32)
        }
    }
"""

PAGE_ROWS = """pipeline page_rows
const PAGES: i32 = 8
const D: i32 = 64
const HEAD: i32 = 32
pool kv: f32[PAGES, D, 4] owned by page_owner
shared {
    page_owner: i32[PAGES] = -1
}
request {
    pages: i32[4]
    n: i32
    att: f32[8 * 16]
    y: f32[4 * D]
    granted: bool
    done_: bool
}
""" + OWN_PAGE_FILLED + """    # attention's weighted sum of V: position s in page pages[s / 4], column s % 4
    lanes for e in 0..n * D {
        let t = e / D
        let i = e % D
        let row = t * 2 + i / HEAD
        let acc = sum(s in 0..16: att[row * 16 + s] * kv[pages[s / 4], i, s % 4])
        y[e] = acc
    }
    done_ = true
}
trace fill: y
done when done_
"""


def page_rows_inputs(seed: int):
    """Request r owns page r; its page table is its own page four times, but for request 3 (another's
    page: NOT_OWNER) and request 5 (a page past the pool: INDEX)."""
    rng = np.random.default_rng(seed)
    tables = {3: [3, 3, 1, 3], 5: [5, 9, 5, 5]}
    return [{"pages": tables.get(r, [r] * 4), "n": n, "att": rng.standard_normal(128).astype(np.float32).tolist()}
            for r, n in enumerate([1, 2, 3, 4, 4, 3, 2, 1])]


def test_a_tile_checks_a_pool_reads_page_once():
    compiled = load_text(PAGE_ROWS, "page_rows.xl")
    loop = next(x for x in lanes_loops(compiled) if x.var == "e")
    head = grouping.rows_plan(loop)
    parts = grouping.invariant_parts(head.sums[0].value, head.per_row(loop.var))
    # the attention weight (row: the same over the tile) and the page of the pool read, whose
    # column (i) differs per row
    assert [type(x).__name__ for x in parts] == ["Load", "PoolPage"]
    code = kernel(compiled)
    assert "struct XlParts { float p0; int32_t p1; };" in code
    assert re.search(r"return XlParts\{r\.att\[.*xl_pool_page\(err, \d+, \d+, \d+, sh\.page_owner, req_id, "
                     r"xl_idx\(err, \d+, \d+, r\.pages\[", code)
    assert "p.kv[((xl_w.p1) * 64 + (int32_t)(i)) * 4 + " in code  # the element: its row's column of that page
    want = agrees(compiled, {}, page_rows_inputs(5))
    # (request, error code): the failing part fails the tile, whose iterations then run one at a
    # time and fail as they must
    assert {(int(r[0]), int(r[4])) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {(3, ops.ERR_NOT_OWNER), (5, ops.ERR_INDEX)}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_a_pool_reads_page_checked_once_per_tile_equals_the_simulator(team_warps):
    agrees(load_text(PAGE_ROWS, "page_rows.xl"), {}, page_rows_inputs(6), team_warps)


# Attention's scores: each iteration a dot product of 32 in turn over one page of the pool. The page's
# checks (its index, its owner) go before the inner loop, once (emit_cpp._page_checked_once), numbered
# as in the loop's statement: request 3's table names another's page (NOT_OWNER), request 5's a page
# past the pool (INDEX), each at some positions only.
SCORES = """pipeline scores
const PAGES: i32 = 8
const D: i32 = 64
pool kv: f32[PAGES, D, 4] owned by page_owner
shared {
    page_owner: i32[PAGES] = -1
}
request {
    pages: i32[4]
    n: i32
    q: f32[D]
    att: f32[2 * 16]
    granted: bool
    done_: bool
}
""" + OWN_PAGE_FILLED + """    lanes for e in 0..2 * 16 {
        let s = e % 16
        let hd = e / 16
        let score = 0.0
        if s < n * 4 {
            let pg = pages[s / 4]
            for j in 0..32 {
                score += q[hd * 32 + j] * kv[pg, hd * 32 + j, s % 4]
            }
        }
        att[e] = score * 0.5
    }
    done_ = true
}
trace fill: att
done when done_
"""


def scores_inputs(seed: int):
    """Request r owns page r, its table that page four times; but request 3's names another's page at
    positions 8-11 (NOT_OWNER) and request 5's a page past the pool at positions 12-15 (INDEX)."""
    rng = np.random.default_rng(seed)
    tables = {3: [3, 3, 1, 3], 5: [5, 5, 5, 9]}
    return [{"pages": tables.get(r, [r] * 4), "n": n, "q": rng.standard_normal(64).astype(np.float32).tolist()}
            for r, n in enumerate([1, 2, 3, 4, 4, 4, 2, 1])]


def test_a_loops_pool_page_is_checked_once_before_it():
    compiled = load_text(SCORES, "scores.xl")
    code = kernel(compiled)
    page = re.search(r"const int32_t (xl_page\d+) = xl_pool_page\(err, 2, (\d+), \d+, sh\.page_owner, req_id, "
                     r"xl_idx\(err, 1, \2, pg, 8, \d+\)\);\n\s*if \(xl_failed\(err\)\) return;\n\s*"
                     r"for \(int32_t j = 0; j < 32; \+\+j\) \{\n\s*score = xl_fadd\(score, (.*)\);\n\s*\}", code)
    assert page, "the page's checks before the loop, no test in it"
    assert f"p.kv[(({page[1]}) * 64 + " in page[3] and "xl_pool_page" not in page[3]
    want = agrees(compiled, {}, scores_inputs(3))
    errors = {(int(r[0]), int(r[4])) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    assert errors == {(3, ops.ERR_NOT_OWNER), (5, ops.ERR_INDEX)}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, (4, 2)])
def test_gpu_a_loops_pool_page_checked_once_equals_the_simulator(team_warps):
    agrees(load_text(SCORES, "scores.xl"), {}, scores_inputs(4), team_warps)


def test_the_real_pairs_matrix_vector_passes_are_grouped():
    code = kernel(load("stages/byte_spec.xl"))
    # target: qkv, wo, up, down, attention's weighted sum of V rows, the LM head; draft: qkv, wo,
    # up, down, the weighted sum of V rows. A group holds the positions the loop's fast path proves
    # (ranges.py): the target's CHUNK (9); the draft's passes run on scratch sized for the target's
    # width, twice the draft's, so 18 positions' worth, MAX_GROUP (16) a group; the LM head's
    # bound is the residual stream's 1,152 elements, 4.5 positions of its 256 rows (5)
    sizes = re.findall(r"xl_lanes_grouped<(?:true|false), (\d+), (\d+), true[,>]", code)
    assert sorted(sizes) == sorted([("128", "9")] * 4 + [("512", "9"), ("256", "5")]
                                   + [("64", "16")] * 4 + [("256", "16"), ("256", "1")]), sizes
    # (the weighted sum and the sum of weights beside it: each V element read once for a tile's
    # positions, each its own causal stop, a tile whose owner or index check failed run again an
    # iteration at a time; the target's in groups of 9, the draft's of 16, as above)
    assert code.count("if (xl_sum_tile<float, xl_R, 9, true>(xl_lo, xl_hi, xl_n, ") == 2
    assert code.count("if (xl_sum_tile<float, xl_R, 16, true>(xl_lo, xl_hi, xl_n, ") == 2
    # ... and those and the draft's LM head (one position) run in tiles of rows when the pass has
    # few positions; q, k and v in one pass (their input read once); the weighted sum of V rows (a
    # sum over the KV pool: its elements may fail, the owner check) and the sum of weights (an
    # index check) in one pass, checked, the attention weight read once for both
    assert code.count("xl_rows_tails<xl_R>") == 12
    assert code.count("xl_sum_rows<float, xl_R, false, 3>(") == 2
    assert code.count("if (xl_sum_rows<float, xl_R, true, 2>(") == 2
    # the RMS norms where the q/k/v, MLP-up and LM-head sums read them: once per position of a tile
    # (preludes), in both kinds of tile
    # (each model: the iteration, the rows path and the weight-once tile of three loops; not the
    # draft's LM head, one position, so no weight-once tile)
    assert len(re.findall(r"float n(_\d+)? = xl_b_rsqrt\(err, ", code)) == 2 * 3 * 3 - 1
    assert len(re.findall(r"xl_pre_n(_\d+)?\[xl_g\] = n(_\d+)?;", code)) == 5


def test_cpu_build_equals_the_simulator():
    want = agrees(load_text(PASS, "passes.xl"), weights(), inputs_for(CASES))
    errors = {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    # the failing tails (limit 5 and 0) and the range past the arrays (6 positions)
    assert errors == {3, 4, 6}, errors


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_equals_the_simulator(team_warps):
    agrees(load_text(PASS, "passes.xl"), weights(), inputs_for(CASES * 3), team_warps)


def test_tiles_of_36_sums_cpu_equals_the_simulator():
    compiled = load_text(PASS9, "passes9.xl")
    assert re.search(r"xl_lanes_grouped<true, 8, 9, true(, false, 0x\w+, 0x\w+)?>\(", kernel(compiled))
    want = agrees(compiled, weights(), inputs_for(CASES9, 9))
    errors = {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    assert errors == {1, 5, 6, 8}, errors  # the failing tails (limit 3, 6 and 4) and 10 positions


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_tiles_of_36_sums_equal_the_simulator(team_warps):
    agrees(load_text(PASS9, "passes9.xl"), weights(), inputs_for(CASES9 * 3, 9), team_warps)


# Tiles whose sums stop each on their own or whose elements may fail are grouped on the GPU with
# -DXL_GROUP_CHECKED=1 (by default they take the rows path there: xl_runtime.cuh, the real pair's
# measurement); the CPU build groups them.
GROUP_CHECKED = "-DXL_GROUP_CHECKED=1"

# A sum whose stop reads the row (`0..40 - i`): each sum of a tile stops on its own (xl_hi(xl_ri,
# xl_g)); the grouped path once did not compile it (the row is not known for the whole tile).
ROW_STOP = PASS9.replace("let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])",
                         "let a = sum(j in 0..40 - i * 3: w[i, j] * x[t * 40 + j])")


def test_a_stop_reading_the_row_cpu_equals_the_simulator():
    compiled = load_text(ROW_STOP, "row_stop.xl")
    assert "const auto xl_hi = [&](int32_t xl_ri, int32_t xl_g) -> int32_t {" in kernel(compiled)
    want = agrees(compiled, weights(), inputs_for(CASES9, 9))
    assert {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {1, 5, 6, 8}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps,options", [(1, GROUP_CHECKED), (4, GROUP_CHECKED), ((4, 2), GROUP_CHECKED), (4, "")])
def test_gpu_a_stop_reading_the_row_equals_the_simulator(team_warps, options, monkeypatch):
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)
    agrees(load_text(ROW_STOP, "row_stop.xl"), weights(), inputs_for(CASES9 * 3, 9), team_warps)


# Attention's weighted sum of V over a pass of several positions, in miniature: each position's
# sum stops at its own causal bound (lo + t + 1), reads V rows from the pool through a page
# table (the page checked once per element for the tile: xl_c; the V element once for the tile's
# positions: xl_w) and the attention weight att[row * CTX + s] once for the tile's rows (row = t *
# 2 + i / HEAD: xl_a). From position `bad` on a request reads page `other` instead: another's
# (NOT_OWNER) or past the pool (INDEX); the tile then runs an iteration at a time.
CAUSAL = """pipeline causal
const PAGE_T: i32 = 4
const D: i32 = 64
const HEAD: i32 = 32
const P: i32 = 9
const CTX: i32 = 12
pool kv: f32[24, D, PAGE_T] owned by page_owner
shared {
    page_owner: i32[24] = -1
}
request {
    table: i32[3] = -1
    other: i32
    bad: i32
    lo: i32
    n: i32
    att: f32[P * 2 * CTX]
    y: f32[P * D]
    done_: bool
}
arbiter grant when table[0] == -1 {
    for k in 0..3 {
        page_owner[req_id * 3 + k] = req_id
        table[k] = req_id * 3 + k
    }
}
stage fill when table[0] >= 0 && !done_ {
    lanes for i in 0..D {
        for s in 0..CTX {
            kv[table[s / PAGE_T], i, s % PAGE_T] = (s as f32) * 0.25 - (i as f32) * 0.125
        }
    }
    lanes for e in 0..n * D {
        let t = e / D
        let i = e % D
        let row = t * 2 + i / HEAD
        let acc = sum(s in 0..lo + t + 1: att[row * CTX + s] * kv[s < bad ? table[s / PAGE_T] : other, i, s % PAGE_T])
        y[e] = acc * 0.5
    }
    done_ = true
}
trace fill: y
done when done_
"""


def causal_inputs(seed: int):
    """(other, bad, lo, n): requests 1 (NOT_OWNER from s = 5), 2 (INDEX from s = 7, positions 5 on),
    5 (10 positions: past att and y) and 7 (NOT_OWNER at s = 11, its last position only) fail."""
    rng = np.random.default_rng(seed)
    cases = [(0, 100, 0, 9), (1, 5, 3, 9), (99, 7, 2, 6), (0, 100, 1, 4), (0, 100, 3, 2), (5, 100, 0, 10),
             (0, 100, 2, 7), (3, 11, 3, 9)]
    return [{"other": other, "bad": bad, "lo": lo, "n": n, "att": rng.standard_normal(216).astype(np.float32).tolist()}
            for other, bad, lo, n in cases]


def test_attention_weighted_sum_is_grouped_cpu_equals_the_simulator():
    compiled = load_text(CAUSAL, "causal.xl")
    code = kernel(compiled)
    assert "if (xl_sum_tile<float, xl_R, 9, true>(xl_lo, xl_hi, xl_n, xl_sums0," in code
    assert "return xl_add(xl_add(r.lo, t), 1);" in code  # each position's own stop
    # the page once per element for the tile, the V element once for its positions (the page by
    # name), the attention weight once for its rows (row from the tile's first row)
    assert re.search(r"\[&\]\(int32_t s, XlErr& err\) -> int32_t \{ \(void\)err; return xl_pool_page\(", code)
    assert re.search(r"\[&\]\(int32_t xl_ri, int32_t s, \[\[maybe_unused\]\] int32_t xl_c, XlErr& err\) -> float \{ "
                     r"\[\[maybe_unused\]\] const int32_t i = xl_row0 \+ xl_ri; \(void\)err; return p\.kv\[\(\(xl_c\)", code)
    assert re.search(r"\[&\]\(int32_t xl_g, int32_t s, \[\[maybe_unused\]\] int32_t xl_c, XlErr& err\) -> float \{ "
                     r"\[\[maybe_unused\]\] const int32_t t = xl_t0 \+ xl_g; \[\[maybe_unused\]\] const int32_t i = xl_row0; "
                     r"\[\[maybe_unused\]\] const int32_t row = [^;]*; \(void\)err; return r\.att\[", code)
    want = agrees(compiled, {}, causal_inputs(3))
    assert {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {1, 2, 5, 7}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps,options", [(1, GROUP_CHECKED), (4, GROUP_CHECKED), (16, GROUP_CHECKED),
                                                ((4, 2), GROUP_CHECKED), ((16, 2), GROUP_CHECKED), (4, ""), ((4, 2), "")])
def test_gpu_attention_weighted_sum_grouped_equals_the_simulator(team_warps, options, monkeypatch):
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)
    agrees(load_text(CAUSAL, "causal.xl"), {}, causal_inputs(5), team_warps)


# Attention's softmax where the weighted sum reads it: the row's maximum a prelude that reads the
# head's `row` (the same over a tile's rows: grouping.Rows.per_tile), each weight's exp in the sums'
# elements (a builtin that cannot fail: ir.INFALLIBLE_BUILTINS), the sum of weights beside.
SOFTMAX = CAUSAL.replace("pipeline causal", "pipeline softmax").replace(
    "        let acc = sum(s in 0..lo + t + 1: att[row * CTX + s] * kv[", """\
        let m = max(s in 0..lo + t + 1: att[row * CTX + s])
        let acc = sum(s in 0..lo + t + 1: exp(att[row * CTX + s] - m) * kv[""").replace(
    "        y[e] = acc * 0.5", """\
        let total = sum(s in 0..lo + t + 1: exp(att[row * CTX + s] - m))
        y[e] = acc / total""")


def test_a_rows_softmax_maximum_is_computed_once_per_tile():
    compiled = load_text(SOFTMAX, "softmax.xl")
    loop = next(x for x in lanes_loops(compiled) if x.by_warp)
    for head in (grouping.plan(loop, 9 * 64), grouping.rows_plan(loop)):
        assert [x.name for x in head.preludes] == ["m"] and head.preludes_per_tile(loop.var)
        assert [r.name for r in head.sums] == ["acc", "total"]
    code = kernel(compiled)
    # kept over a warp's tiles of the same positions and the same first row only
    assert "int32_t xl_prelude_t0 = -1, xl_prelude_n = 0, xl_prelude_r0 = -1;" in code
    assert "if (xl_prelude_t0 != xl_t0 || xl_prelude_n != xl_n || xl_prelude_r0 != xl_row0) {" in code
    assert re.search(r"const int32_t i = xl_row0;\s*\[\[maybe_unused\]\] const int32_t row = [^;]*;\s*"
                     r"\[\[maybe_unused\]\] XlErr err = \{0, 0, 0\};\s*\[\[maybe_unused\]\] float m = \{\};", code)
    # a tile of rows: each weight's exp once per element for its rows, for both sums
    assert re.search(r"struct XlParts \{ float p0; int32_t p1; \}; return XlParts\{xl_b_exp\(", code)
    want = agrees(compiled, {}, causal_inputs(3))
    assert {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {1, 2, 5, 7}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps,options", [(1, GROUP_CHECKED), (4, GROUP_CHECKED), (16, GROUP_CHECKED),
                                                ((4, 2), GROUP_CHECKED), ((16, 2), GROUP_CHECKED), (4, ""), ((16, 2), "")])
def test_gpu_a_rows_softmax_maximum_once_per_tile_equals_the_simulator(team_warps, options, monkeypatch):
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)
    agrees(load_text(SOFTMAX, "softmax.xl"), {}, causal_inputs(5) * 3, team_warps)


def test_a_gain_is_read_once_per_tile():
    compiled = load_text(GAIN, "gain.xl")
    code = kernel(compiled)
    assert "[&](int32_t j) -> float { return p.g[(int32_t)(j)]; }," in code
    assert re.search(r"\[&\]\(int32_t xl_g, int32_t j, \[\[maybe_unused\]\] float xl_c\) -> float \{ .*"
                     r"return xl_fmul\(r\.x\[[^;]*\], xl_c\); \},", code)
    assert "return xl_fmul(xl_w, xl_a);" in code
    agrees(compiled, gain_weights(), inputs_for(CASES9, 9))


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_a_gain_read_once_per_tile_equals_the_simulator(team_warps):
    agrees(load_text(GAIN, "gain.xl"), gain_weights(), inputs_for(CASES9 * 3, 9), team_warps)


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16])
def test_gpu_a_let_the_same_over_a_tile_equals_the_simulator(team_warps):
    agrees(load_text(HEAD_ROWS, "head_rows.xl"), {}, head_rows_inputs(4), team_warps)


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16])
def test_gpu_lets_between_the_split_and_the_sums(team_warps):
    agrees(load_text(HEAD_LETS, "head_lets.xl"), *head_lets_launch(), team_warps)


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_rows_reading_a_pool_equal_the_simulator(team_warps):
    agrees(load_text(ROWS_POOL, "rows_pool.xl"), {}, rows_pool_inputs(12), team_warps)


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 2, 16, (2, 4)])
def test_gpu_rows_without_a_split_equal_the_simulator(team_warps):
    """Tiles of 16, 8 and 2 rows (40 rows at most; 16 per tile at most): partial tiles, a range
    starting mid-tile, failing tails, every row's sum from the transposed butterfly."""
    agrees(load_text(ROWS, "rows.xl"), *rows_launch(5, (ROWS_CASES + [(1, 33, 100), (0, 17, 100)]) * 3), team_warps)


# An RMS norm where the sums read it, as the real pair's passes write it: before the sums, lets
# and reductions that read the position but not the row (grouping.Rows.preludes), which a tile
# computes once per position -- a sum of squares, a maximum up to a causal bound, and a scale
# that fails (a division by zero) at position `bad` (the tile then runs an iteration at a time;
# the lowest failing iteration reports it).
NORM = PASS9.replace("pipeline passes", "pipeline norms").replace(
    "tensor w: f32[K, 40]", "tensor w: f32[K, 40]\ntensor g: f32[40]").replace("    limit: i32 = 100", "    bad: i32 = -1").replace(
    PASS9[PASS9.index("        let a = sum"):PASS9.index("    }\n    done_ = true")], """\
        let ss = sum(j in 0..40: x[t * 40 + j] * x[t * 40 + j])
        let m = max(j in 0..t + 1: x[t * 40 + j])
        let nr = rsqrt(ss / 40.0 + 0.00001) * (10 / (t - bad)) as f32
        let a = sum(j in 0..40: w[i, j] * (x[t * 40 + j] * nr * g[j]))
        let b = sum(j in 0..40: w[i, j] - m)
        y[e] = a + b
        z[e] = nr + ss
""")
# (first position, end position, the failing position, iterations skipped at the start)
NORM_CASES = [(0, 9, -1, 0), (0, 9, 3, 0), (1, 9, -1, 0), (0, 5, -1, 0), (0, 9, -1, 3), (2, 7, 6, 0),
              (0, 10, -1, 0), (0, 2, 1, 0), (4, 7, 100, 0), (0, 1, -1, 0), (0, 9, 8, 5)]


def norm_inputs(cases):
    rng = np.random.default_rng(11)
    return [{"first": first, "n": n, "bad": bad, "skip": skip,
             "x": rng.standard_normal(9 * 40).astype(np.float32).tolist()} for first, n, bad, skip in cases]


def test_a_positions_norm_is_computed_once_per_tile():
    compiled = load_text(NORM, "norms.xl")
    loop = lanes_loops(compiled)[0]
    for head in (grouping.plan(loop, 72), grouping.rows_plan(loop)):
        assert [x.name for x in head.preludes] == ["ss", "m", "nr"]
        assert [r.name for r in head.sums] == ["a", "b"]
    code = kernel(compiled)
    # the weight-once tile: each position's values first, in registers, read by name where the
    # activation is read (xl_a) and in the iterations' tails; a failure fails the tile
    assert "float xl_pre_nr[9] = {};" in code and "xl_pre_nr[xl_g] = nr;" in code
    assert re.search(r"\[&\]\(int32_t xl_g, int32_t j, \[\[maybe_unused\]\] float xl_c\) -> float \{ "
                     r"\[\[maybe_unused\]\] const int32_t t = xl_t0 \+ xl_g; \[\[maybe_unused\]\] const float ss = "
                     r"xl_pre_ss\[xl_g\];.*return xl_fmul\(xl_fmul\(r\.x\[[^;]*\], nr\), xl_c\); \},", code)
    # the sum of squares: a tile of its own, every position's in one pass; the maximum and the
    # scale an iteration's way, the positions side by side; the division fails the tile (on the
    # rows path at once, on the weight-once path once every position has run it)
    assert "xl_sum_tile<float, 1, 9>(xl_lo, xl_hi, xl_n, xl_pre_ss, " in code
    assert code.count("xl_pre_m[xl_g] = m;") == 1
    assert code.count("if (xl_failed(err)) return false;") == 1
    assert code.count("if (xl_failed(err)) { xl_prelude_failed = true; continue; }") == 1
    want = agrees(compiled, {**weights(), "g": gain_weights()["g"]}, norm_inputs(NORM_CASES))
    errors = {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    assert errors == {1, 5, 6, 7, 10}, errors  # the failing positions (3, 6, 1, 8) and 10 positions


# 20 positions: groups of 16 and 4 (MAX_GROUP). A range starting mid-position runs a row at a time,
# each row's groups in turn, so a warp takes the first group again after the second; where the
# second's preludes failed (position `bad`), its values must not pass for the first's.
NORM20 = NORM.replace("const P: i32 = 9", "const P: i32 = 20")
NORM20_CASES = [(0, 20, 18, 3), (0, 20, -1, 3), (0, 20, 17, 0), (1, 19, 16, 5), (0, 20, 19, 1)]


def test_preludes_kept_over_tiles_not_after_a_failure():
    compiled = load_text(NORM20, "norms20.xl")
    assert grouping.plan(next(x for x in lanes_loops(compiled) if x.by_warp), 160).size == 16
    inputs = [{**x, "x": np.random.default_rng(k).standard_normal(20 * 40).astype(np.float32).tolist()}
              for k, x in enumerate(norm_inputs(NORM20_CASES))]
    want = agrees(compiled, {**weights(), "g": gain_weights()["g"]}, inputs)
    assert {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR} == {0, 2, 3, 4}


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2)])
def test_gpu_preludes_kept_over_tiles_not_after_a_failure(team_warps):
    inputs = [{**x, "x": np.random.default_rng(k).standard_normal(20 * 40).astype(np.float32).tolist()}
              for k, x in enumerate(norm_inputs(NORM20_CASES * 2))]
    agrees(load_text(NORM20, "norms20.xl"), {**weights(), "g": gain_weights()["g"]}, inputs, team_warps)


def test_preludes_named_as_the_tiles_own_names():
    """A prelude's values are kept in xl_pre_<name>: names the tile's own bookkeeping could take
    (fuzz seed 2257: a prelude `failed`) do not clash with it."""
    source = NORM.replace("ss", "failed").replace("let m = ", "let t0 = ").replace("- m)", "- t0)")
    assert "let t0 = max(" in source and "xl_pre_failed" in kernel(load_text(source, "names.xl"))
    agrees(load_text(source, "names.xl"), {**weights(), "g": gain_weights()["g"]}, norm_inputs(NORM_CASES))


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16, (4, 2), (16, 2)])
def test_gpu_a_positions_norm_once_per_tile_equals_the_simulator(team_warps):
    agrees(load_text(NORM, "norms.xl"), {**weights(), "g": gain_weights()["g"]}, norm_inputs(NORM_CASES * 3),
           team_warps)


def test_pass_cost_script_runs_on_the_cpu_build(tmp_path):
    """scripts/pass_cost.py end to end on the CPU build (its GPU numbers are in docs/benchmarks.md):
    launches of the real pair with prompts of 9 * m and 9 * m + 1 bytes for m = m1..m2 (here 1, 2)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "pass_cost.py"), "-o", str(tmp_path),
                           "--backend", "cpu", "--repeats", "0", "--chunks", "1,2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / "pass_cost.json").read_text())
    assert sorted(int(n) for n in got["kernel_ms_by_prompt_bytes"]) == [9, 10, 18, 19]
    assert all(t > 0 for t in got["kernel_ms_by_prompt_bytes"].values())
    assert got["backend"] == "cpu" and "pass9_us" in got and "pass1_us" in got
    assert len(got["pass1_us_each"]) == 2  # one difference a context; pass1_us is their median
    assert got["pass1_us"] == pytest.approx(sum(got["pass1_us_each"]) / 2)
