"""Targeted differential tests of the semantics (docs/semantics.md) on every backend.

Each operator and cast is applied at its boundary values, read from request
fields so that nothing is constant-folded: the backends compute every value.
The simulator's result is checked against the value the C semantics give,
written out below (so these tests check the semantics, not only agreement),
and every other backend must agree with the simulator bit for bit.

Then runtime errors: the same code, line and stage everywhere, the first error
in left-to-right evaluation order wins, and a failing statement has no effect.
"""

from __future__ import annotations

import math
import re
import struct

import pytest

from xlgen.backends.build import load_text
from xlgen.tools.check.diff import compare
from xlgen.tools.check.fuzzgen import backends, run_backend
from xlgen.runtime import sim
from xlgen.semantics.builtins import b_target_token
from xlgen.semantics.ops import ERR_BUILTIN, ERR_CAST, ERR_DIV_ZERO, ERR_INDEX, ERR_SHIFT, ERR_WATCHDOG
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, NO_STAGE, REC_HEADER

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
NAN, INF = math.nan, math.inf

BACKENDS = [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in backends()]


class Err:
    """An expected runtime error (its line is that of the expression's statement)."""

    def __init__(self, code: int):
        self.code = code

    def __repr__(self):
        return f"Err({self.code})"


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x: float) -> int:
    """The binary32 word of a float (NaN canonical), as traces store it."""
    if x != x:
        return 0x7FC00000
    return struct.unpack("<I", struct.pack("<f", x))[0]


class Bits:
    """An expected f32 result given as its bit pattern."""

    def __init__(self, word: int):
        self.word = word

    def __repr__(self):
        return f"Bits(0x{self.word:08x})"


def word(value, t: str) -> int:
    if isinstance(value, Bits):
        return value.word
    if t == "f32":
        return bits(value)
    return int(value) & 0xFFFFFFFF


def run_on(backend: str, src: str, inputs: list[dict], params=None, max_rounds: int = 4, max_active=None):
    """Run src on the simulator and on `backend`; they must agree. Returns (compiled, simulator result)."""
    compiled = load_text(src, name="sem.xl")
    cfg = sim.LaunchConfig(max_active=max_active or max(1, len(inputs)), max_rounds=max_rounds)
    expected = sim.run(compiled.sim_module(), params or {}, inputs, cfg)
    got = run_backend(backend, compiled, params or {}, inputs, cfg)
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, f"{backend} differs from the simulator:\n{divergence.render()}\n{src}"
    return compiled, expected


def line_of(src: str, text: str, exact: bool = False) -> int:
    """The 1-based line of the only line containing (or, exact, being) `text`."""
    hits = [i for i, line in enumerate(src.splitlines(), 1) if (line.strip() == text if exact else text in line)]
    assert len(hits) == 1, (text, hits)
    return hits[0]


# ---- operators and casts at their boundaries ---------------------------------------------------

# (a type, b type, result type, {expression over a, b, c: [(a, b, c, expected), ...]})
# Operands missing from a case are 0; `extra` declarations may define enums and flag sets.
GROUPS = {
    "i32 arithmetic": ("i32", "i32", "i32", {
        "a + b": [(INT_MAX, 1, 0, INT_MIN), (INT_MIN, -1, 0, INT_MAX), (-5, 3, 0, -2)],
        "a - b": [(INT_MIN, 1, 0, INT_MAX), (0, INT_MIN, 0, INT_MIN)],
        "a * b": [(65536, 65536, 0, 0), (46341, 46341, 0, -2147479015), (INT_MIN, -1, 0, INT_MIN), (-3, 7, 0, -21)],
        "a / b": [(INT_MIN, -1, 0, INT_MIN), (-7, 2, 0, -3), (7, -2, 0, -3), (-7, -2, 0, 3), (INT_MIN, 2, 0, -1073741824),
                  (5, 0, 0, Err(ERR_DIV_ZERO)), (0, 0, 0, Err(ERR_DIV_ZERO))],
        "a % b": [(INT_MIN, -1, 0, 0), (-7, 2, 0, -1), (7, -2, 0, 1), (-7, -2, 0, -1), (INT_MIN, 3, 0, -2),
                  (5, 0, 0, Err(ERR_DIV_ZERO))],
        "-a": [(INT_MIN, 0, 0, INT_MIN), (5, 0, 0, -5)],
        "~a": [(0, 0, 0, -1), (INT_MIN, 0, 0, INT_MAX)],
        "a << b": [(1, 31, 0, INT_MIN), (3, 31, 0, INT_MIN), (-1, 31, 0, INT_MIN), (0x40000000, 1, 0, INT_MIN),
                   (5, 0, 0, 5), (1, 32, 0, Err(ERR_SHIFT)), (1, -1, 0, Err(ERR_SHIFT)), (0, INT_MIN, 0, Err(ERR_SHIFT))],
        "a >> b": [(-8, 1, 0, -4), (-7, 1, 0, -4), (INT_MIN, 31, 0, -1), (-1, 31, 0, -1), (INT_MAX, 31, 0, 0),
                   (1, 32, 0, Err(ERR_SHIFT)), (1, -1, 0, Err(ERR_SHIFT))],
        "a & b": [(-16, 255, 0, 240)],
        "a | b": [(INT_MIN, 1, 0, INT_MIN + 1)],
        "a ^ b": [(-1, INT_MAX, 0, INT_MIN)],
        "abs(a)": [(INT_MIN, 0, 0, INT_MIN), (-5, 0, 0, 5), (7, 0, 0, 7)],
        "min(a, b)": [(-1, 1, 0, -1), (INT_MIN, INT_MAX, 0, INT_MIN)],
        "max(a, b)": [(-1, 1, 0, 1)],
        "clamp(a, b, c)": [(5, 10, 0, 0), (-5, 0, 10, 0), (50, 0, 10, 10), (5, 0, 10, 5)],
        "(a / b) * b + a % b": [(-7, 2, 0, -7), (INT_MIN, -1, 0, INT_MIN), (13, -4, 0, 13)],
    }),
    "u32 arithmetic": ("u32", "u32", "u32", {
        "a + b": [(0xFFFFFFFF, 1, 0, 0)],
        "a - b": [(0, 1, 0, 0xFFFFFFFF)],
        "a * b": [(65536, 65536, 0, 0), (0xFFFFFFFF, 0xFFFFFFFF, 0, 1)],
        "a / b": [(0xFFFFFFFF, 2, 0, 0x7FFFFFFF), (7, 2, 0, 3), (7, 0, 0, Err(ERR_DIV_ZERO))],
        "a % b": [(0xFFFFFFFF, 10, 0, 5), (7, 2, 0, 1), (7, 0, 0, Err(ERR_DIV_ZERO))],
        "-a": [(1, 0, 0, 0xFFFFFFFF), (0, 0, 0, 0)],
        "~a": [(0, 0, 0, 0xFFFFFFFF), (0xF0F0F0F0, 0, 0, 0x0F0F0F0F)],
        "a >> b": [(0xFFFFFFF8, 1, 0, 0x7FFFFFFC), (0x80000000, 31, 0, 1), (1, 32, 0, Err(ERR_SHIFT)),
                   (1, 0xFFFFFFFF, 0, Err(ERR_SHIFT))],
        "a << b": [(1, 31, 0, 0x80000000), (3, 31, 0, 0x80000000), (1, 32, 0, Err(ERR_SHIFT))],
        "clamp(a, b, c)": [(5, 10, 0, 0), (0xFFFFFFFF, 0, 10, 10)],
        "min(a, b)": [(0xFFFFFFFF, 0, 0, 0)],
    }),
    "shift amounts of the other type": ("i32", "u32", "i32", {
        "a << b": [(1, 31, 0, INT_MIN), (1, 32, 0, Err(ERR_SHIFT)), (1, 0xFFFFFFFF, 0, Err(ERR_SHIFT))],
        "a >> b": [(-1, 4, 0, -1), (-1, 0x80000000, 0, Err(ERR_SHIFT))],
    }),
    "u32 shifted by i32": ("u32", "i32", "u32", {
        "a >> b": [(0x80000000, 31, 0, 1), (0xFFFFFFFF, -1, 0, Err(ERR_SHIFT))],
        "a << b": [(0xFFFFFFFF, 4, 0, 0xFFFFFFF0), (1, INT_MIN, 0, Err(ERR_SHIFT))],
    }),
    "f32 arithmetic": ("f32", "f32", "f32", {
        "a + b": [(0.1, 0.2, 0, Bits(0x3E99999A)), (16777216.0, 1.0, 0, 16777216.0), (3e38, 3e38, 0, INF),
                  (-0.0, -0.0, 0, -0.0), (0.0, -0.0, 0, 0.0), (INF, -INF, 0, NAN), (1e-45, 1e-45, 0, Bits(0x2))],
        "a - b": [(0.0, 0.0, 0, 0.0), (-0.0, 0.0, 0, -0.0), (1.0, 1e-8, 0, 1.0)],
        "a * b": [(1e-38, 0.5, 0, Bits(0x003671F7)), (1.17549435e-38, 0.5, 0, Bits(0x00400000)),
                  (1e-45, 0.5, 0, 0.0), (3e-45, 0.5, 0, Bits(0x1)), (-1.0, 0.0, 0, -0.0), (INF, 0.0, 0, NAN),
                  (3e38, 10.0, 0, INF), (-3e38, 10.0, 0, -INF)],
        "a / b": [(1.0, 0.0, 0, INF), (1.0, -0.0, 0, -INF), (-1.0, 0.0, 0, -INF), (0.0, 0.0, 0, NAN),
                  (NAN, 0.0, 0, NAN), (1.0, 3.0, 0, Bits(0x3EAAAAAB)), (1e-45, 2.0, 0, 0.0), (3e-45, 2.0, 0, Bits(0x1))],
        # one rounding per operation: a fused multiply-add would give 2^-24 here
        "a * b - c": [(1.000244140625, 1.000244140625, 1.00048828125, 0.0)],
        # evaluated as written, never reassociated
        "(a + b) + c": [(1e8, -1e8, 1.0, 1.0)],
        "a + (b + c)": [(1e8, -1e8, 1.0, 0.0)],
        "-a": [(0.0, 0, 0, -0.0), (-0.0, 0, 0, 0.0), (NAN, 0, 0, NAN)],
        "sqrt(a)": [(-1.0, 0, 0, NAN), (-0.0, 0, 0, -0.0), (2.0, 0, 0, Bits(0x3FB504F3)), (INF, 0, 0, INF),
                    (1e-45, 0, 0, Bits(0x1A3504F3)), (NAN, 0, 0, NAN)],
        "min(a, b)": [(NAN, 1.0, 0, NAN), (1.0, NAN, 0, 1.0), (-0.0, 0.0, 0, -0.0), (0.0, -0.0, 0, 0.0)],
        "max(a, b)": [(NAN, 1.0, 0, NAN), (1.0, NAN, 0, 1.0), (-0.0, 0.0, 0, -0.0), (0.0, -0.0, 0, 0.0)],
        "clamp(a, b, c)": [(NAN, 0.0, 1.0, NAN), (5.0, 10.0, 0.0, 0.0), (-0.0, 0.0, 1.0, -0.0)],
        # a literal operand: nvcc compiled `(b < a) ? b : a` to the hardware's min, which orders
        # -0.0 below +0.0 (fuzz seed 6390043, the GPU's xl_min)
        "min(0.0, b)": [(0, -0.0, 0, 0.0), (0, NAN, 0, 0.0)],
        "max(0.0, b)": [(0, -0.0, 0, 0.0)],
        "min(-0.0, b)": [(0, 0.0, 0, -0.0)],
        "max(-0.0, b)": [(0, 0.0, 0, -0.0)],
        "clamp(b, 0.0, 1.0)": [(0, -0.0, 0, -0.0)],
        "1.0 / min(0.0, b)": [(0, -0.0, 0, INF)],
        "abs(a)": [(-0.0, 0, 0, 0.0), (-INF, 0, 0, INF), (-1e-45, 0, 0, 1e-45)],
        # constants folded to infinity and NaN (the simulator once had no name for them)
        "a * (1.0 / 0.0)": [(2.0, 0, 0, INF), (-2.0, 0, 0, -INF), (0.0, 0, 0, NAN)],
        "a + 0.0 / 0.0": [(1.0, 0, 0, NAN)],
        "a - 3.0e38 * 10.0": [(1.0, 0, 0, -INF)],
    }),
    "f32 comparisons": ("f32", "f32", "bool", {
        "a == b": [(NAN, NAN, 0, False), (-0.0, 0.0, 0, True), (1.0, 1.0, 0, True)],
        "a != b": [(NAN, NAN, 0, True), (-0.0, 0.0, 0, False)],
        "a < b": [(NAN, 1.0, 0, False), (-0.0, 0.0, 0, False), (-INF, 1.0, 0, True)],
        "a >= b": [(NAN, 1.0, 0, False), (1.0, NAN, 0, False), (0.0, -0.0, 0, True)],
        "a == a": [(NAN, 0, 0, False), (1.0, 0, 0, True)],  # a self-comparison (C++ warns about it)
    }),
    "f32 to i32": ("f32", "f32", "i32", {
        "a as i32": [(2147483520.0, 0, 0, 2147483520), (2147483648.0, 0, 0, Err(ERR_CAST)),
                     (-2147483648.0, 0, 0, INT_MIN), (-2147483904.0, 0, 0, Err(ERR_CAST)), (3.9, 0, 0, 3),
                     (-3.9, 0, 0, -3), (-0.5, 0, 0, 0), (-0.0, 0, 0, 0), (1e-45, 0, 0, 0), (NAN, 0, 0, Err(ERR_CAST)),
                     (INF, 0, 0, Err(ERR_CAST)), (-INF, 0, 0, Err(ERR_CAST))],
    }),
    "f32 to u32": ("f32", "f32", "u32", {
        "a as u32": [(-0.5, 0, 0, 0), (-0.99, 0, 0, 0), (-1.0, 0, 0, Err(ERR_CAST)), (4294967040.0, 0, 0, 4294967040),
                     (4294967296.0, 0, 0, Err(ERR_CAST)), (2147483648.0, 0, 0, 2147483648), (3.9, 0, 0, 3),
                     (NAN, 0, 0, Err(ERR_CAST)), (INF, 0, 0, Err(ERR_CAST))],
    }),
    "i32 to f32 and u32": ("i32", "i32", "f32", {
        "a as f32": [(16777217, 0, 0, 16777216.0), (16777219, 0, 0, 16777220.0), (INT_MAX, 0, 0, 2147483648.0),
                     (-16777217, 0, 0, -16777216.0), (INT_MIN, 0, 0, -2147483648.0)],
        "(a as u32) as f32": [(-1, 0, 0, 4294967296.0)],
    }),
    "u32 to f32": ("u32", "u32", "f32", {
        "a as f32": [(0xFFFFFFFF, 0, 0, 4294967296.0), (16777217, 0, 0, 16777216.0), (4294967040, 0, 0, 4294967040.0),
                     (4294967168, 0, 0, 4294967296.0)],  # halfway: ties to even
    }),
    "i32 and u32 keep the bits": ("i32", "u32", "u32", {
        "a as u32": [(-1, 0, 0, 0xFFFFFFFF), (INT_MIN, 0, 0, 0x80000000)],
        "((b as i32) + 1) as u32": [(0, 0xFFFFFFFF, 0, 0), (0, 0x7FFFFFFF, 0, 0x80000000)],
    }),
    "bool casts": ("bool", "bool", "f32", {
        "a as f32": [(True, False, 0, 1.0), (False, False, 0, 0.0)],
        "(a as i32) as f32 - (b as u32) as f32": [(False, True, 0, -1.0)],
    }),
    "flag sets": ("Wide", "Wide", "Wide", {
        "~a": [(0, 0, 0, 0xFFFFFFFF), (0x80000001, 0, 0, 0x7FFFFFFE)],
        "a ^ b": [(0x80000000, 0xFFFFFFFF, 0, 0x7FFFFFFF)],
        "(((a as i32) < 0) ? W31 : W0) | b": [(0x80000000, 2, 0, 0x80000002), (1, 0, 0, 1)],
    }),
    "small flag set": ("Few", "Few", "Few", {
        "~a": [(0, 0, 0, 7), (1, 0, 0, 6)],  # only the declared members
        "a & ~b": [(7, 2, 0, 5)],
    }),
    "has": ("Few", "Few", "bool", {
        "a has b": [(3, 1, 0, True), (1, 0, 0, True), (1, 2, 0, False), (0, 0, 0, True)],
        "(a | B) has (B | C)": [(4, 0, 0, True), (1, 0, 0, False)],
    }),
    "enums": ("Color", "Color", "i32", {
        "(a as i32) * 10 + (b as i32)": [(2, 1, 0, 21)],
        "(a == b) ? 1 : ((a == Color.BLUE) ? 2 : 3)": [(1, 1, 0, 1), (2, 0, 0, 2), (0, 1, 0, 3)],
    }),
}

EXTRA_DECLS = """
flags Wide { W0, W1, W2, W3, W4, W5, W6, W7, W8, W9, W10, W11, W12, W13, W14, W15,
             W16, W17, W18, W19, W20, W21, W22, W23, W24, W25, W26, W27, W28, W29, W30, W31 }
flags Few { A, B, C }
enum Color { RED, GREEN, BLUE }
"""


def group_program(ta: str, tb: str, tr: str, exprs: list[str]) -> str:
    lines = ["pipeline sem", EXTRA_DECLS, "request {", "    op: i32", f"    a: {ta}", f"    b: {tb}", f"    c: {ta}",
             f"    out: {tr}", "}", "", "stage s {"]
    for i, e in enumerate(exprs):
        lines.append(f"    {'if' if i == 0 else '} elif'} op == {i} {{")
        lines.append(f"        out = {e}")
    lines += ["    }", "}", "", "trace s: out", "done when true", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group", list(GROUPS))
def test_operators_at_boundaries(group, backend):
    ta, tb, tr, table = GROUPS[group]
    exprs = list(table)
    src = group_program(ta, tb, tr, exprs)
    inputs, expected = [], []
    for op, e in enumerate(exprs):
        for a, b, c, want in table[e]:
            inputs.append({"op": op, "a": a, "b": b, "c": c})
            expected.append((e, a, b, c, want, line_of(src, f"out = {e}", exact=True)))
    _, result = run_on(backend, src, inputs)
    for req_id, (e, a, b, c, want, line) in enumerate(expected):
        recs = result.per_request(req_id)
        case = f"{e} with a={a!r} b={b!r} c={c!r}"
        if isinstance(want, Err):
            assert len(recs) == 1 and recs[0][2] == KIND_ERROR, f"{case}: expected an error, got {recs.tolist()}"
            assert (int(recs[0][3]), int(recs[0][REC_HEADER]), int(recs[0][REC_HEADER + 1])) == (0, want.code, line), case
        else:
            assert len(recs) == 2 and recs[1][2] == KIND_DONE, f"{case}: {recs.tolist()}"
            got = int(recs[0][REC_HEADER])
            assert got == word(want, tr), f"{case}: got 0x{got:08x}, want 0x{word(want, tr):08x} ({want!r})"


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtins(backend):
    src = """pipeline sem
request {
    seed: u32
    vocab: i32
    agree: f32
    h: u32
    t: i32
    d: i32
    d_nan: i32
    n: i32
    x: i32[4]
    y: i32[4]
    v: i32
}
stage s {
    h = hash_u32(seed)
    t = target_token(seed, 3, 5, vocab)
    d = draft_token(seed, 3, 5, vocab, agree)
    d_nan = draft_token(seed, 3, 5, vocab, 0.0 / 0.0)
    v = verify_prefix(x, y, n)
}
trace s: h, t, d, d_nan, v
done when true
"""
    def lowbias32(x):
        m = 0xFFFFFFFF
        x ^= x >> 16
        x = (x * 0x7FEB352D) & m
        x ^= x >> 15
        x = (x * 0x846CA68B) & m
        return x ^ (x >> 16)

    inputs = [
        {"seed": 0, "vocab": 2, "agree": 1.0, "n": 4, "x": [1, 2, 3, 4], "y": [1, 2, 9, 4]},
        {"seed": 0xFFFFFFFF, "vocab": 1000, "agree": 2.0, "n": 0, "x": [1], "y": [2]},
        {"seed": 12345, "vocab": 1, "agree": 1.0, "n": 1},  # vocab < 2: BUILTIN (from target_token's line)
        {"seed": 7, "vocab": 2, "agree": 1.0, "n": 5},  # n > len: BUILTIN
        {"seed": 7, "vocab": 2, "agree": 1.0, "n": -1},  # n < 0: BUILTIN
        {"seed": 7, "vocab": INT_MAX, "agree": 1.0, "n": 4, "x": [5, 6, 7, 8], "y": [5, 6, 7, 8]},
    ]
    _, result = run_on(backend, src, inputs)
    for req_id in (0, 1, 5):
        rec = result.per_request(req_id)[0]
        h, t, d, d_nan, v = (int(w) for w in rec[REC_HEADER:REC_HEADER + 5])
        inp = inputs[req_id]
        assert h == lowbias32(inp["seed"])
        assert 0 <= t < inp["vocab"] and d == t  # agree >= 1.0: the draft always agrees
        assert d_nan != t and 0 <= d_nan < inp["vocab"]  # agree NaN: never
    assert [int(result.per_request(i)[0][REC_HEADER + 4]) for i in (0, 1, 5)] == [2, 0, 4]
    t_line, v_line = line_of(src, "t = target_token"), line_of(src, "v = verify_prefix")
    for req_id, line in ((2, t_line), (3, v_line), (4, v_line)):
        rec = result.per_request(req_id)[0]
        assert rec[2] == KIND_ERROR and (int(rec[REC_HEADER]), int(rec[REC_HEADER + 1])) == (ERR_BUILTIN, line)


# ---- runtime errors: which one, where, and what survives ---------------------------------------

ERRORS_SRC = """pipeline errs
param zero: i32 = 0
param huge: f32 = 3.0e38
request {
    case_: i32
    big: i32 = 99
    a: i32 = 7
    b: i32[4]
    x: i32 = 100
    y: i32
    yes: bool = true
}
shared {
    total: i32
    seen: i32
}
fn div(v: i32, w: i32) -> i32 {
    let t = v + 1
    return t / w  # @helper_div
}
fn pick(arr: i32[4], i: i32) -> i32 {
    return arr[i]  # @helper_index
}
stage s {
    y = 1
    b[1] = 5
    if case_ == 0 {
        x = a / zero + b[big]  # @c0
    } elif case_ == 1 {
        x = b[big] + a / zero  # @c1
    } elif case_ == 2 {
        x = div(a, zero) + b[big]  # @c2
    } elif case_ == 3 {
        x = b[big] + div(a, zero)  # @c3
    } elif case_ == 4 {
        b[big] = a / zero  # @c4
    } elif case_ == 5 {
        b[big] += a / zero  # @c5
    } elif case_ == 6 {
        x = (yes || a / zero == 1) ? 5 : b[big]
        y = (!yes && b[big] == 0) ? b[big] : 6
    } elif case_ == 7 {
        x = (a << big) + a / zero  # @c7
    } elif case_ == 8 {
        x = (huge as i32) + b[big]  # @c8
    } elif case_ == 9 {
        x = target_token(1u, 0, 0, zero) + a / zero  # @c9
    } elif case_ == 10 {
        x = verify_prefix(b, b, big) + (a << 32)  # @c10
    } elif case_ == 11 && b[big] == 0 {  # @c11
        x = 1
    } elif case_ == 12 {
        x = pick(b, big) * div(a, zero)  # @c12
    } elif case_ == 13 {
        for i in 0..6 {
            x += b[i]  # @c13
        }
    } elif case_ == 14 {
        x = 55
        x -= b[big]  # @c14
    } elif case_ == 15 {
        x = a / zero * 0 + b[big]  # @c15
    } elif case_ == 16 {
        x = (zero == 0 ? b[1] : a / zero) + (zero != 0 ? a / zero : b[2])
    } elif case_ == 17 {
        x = (a / zero == 0 || b[big] == 0) ? 1 : 2  # @c17
    } elif case_ == 18 {
        x = (b[big] == 0 && a / zero == 0) ? 1 : 2  # @c18
    } elif case_ == 19 {
        x = min(b[big], a / zero)  # @c19
    } elif case_ == 20 {
        x = draft_token(hash_u32(5u), b[big], 0, zero, 1.0)  # @c20
    } elif case_ == 26 {
        x = (a % draft_token(5u, 0, 0, 1000, 1.0)) * b[big]  # @c26
    }
}
stage guarded when case_ == 21 && b[big] != 0 {  # @guard
    x = 999
}
stage guarded_call when case_ == 22 && div(a, zero) == 0 {
    x = 998
}
arbiter count_up when case_ >= 23 && case_ <= 25 {
    total += 1
    seen = seen * 10 + case_ - 20
    x = total
    if case_ == 24 {
        total += 100
        x = a / zero  # @arbiter
    }
}
trace s: x, y, b
trace count_up: x
done when case_ != 25 || b[big] == 0  # @done
"""


def _errors_expectations(src: str):
    L = {m.group(1): i for i, line in enumerate(src.splitlines(), 1) for m in [re.search(r"# @(\w+)", line)] if m}
    return {  # case: (stage name or None for 'done when', code, line)
        0: ("s", ERR_DIV_ZERO, L["c0"]),
        1: ("s", ERR_INDEX, L["c1"]),
        2: ("s", ERR_DIV_ZERO, L["helper_div"]),  # the line inside the helper
        3: ("s", ERR_INDEX, L["c3"]),
        4: ("s", ERR_DIV_ZERO, L["c4"]),  # the value is evaluated before the target's index
        5: ("s", ERR_INDEX, L["c5"]),  # a compound assignment reads its target first
        7: ("s", ERR_SHIFT, L["c7"]),
        8: ("s", ERR_CAST, L["c8"]),
        9: ("s", ERR_BUILTIN, L["c9"]),
        10: ("s", ERR_BUILTIN, L["c10"]),
        11: ("s", ERR_INDEX, L["c11"]),  # an elif condition
        12: ("s", ERR_INDEX, L["helper_index"]),
        13: ("s", ERR_INDEX, L["c13"]),
        14: ("s", ERR_INDEX, L["c14"]),
        15: ("s", ERR_DIV_ZERO, L["c15"]),
        17: ("s", ERR_DIV_ZERO, L["c17"]),
        18: ("s", ERR_INDEX, L["c18"]),
        19: ("s", ERR_INDEX, L["c19"]),
        20: ("s", ERR_INDEX, L["c20"]),
        21: ("guarded", ERR_INDEX, L["guard"]),
        22: ("guarded_call", ERR_DIV_ZERO, L["helper_div"]),
        24: ("count_up", ERR_DIV_ZERO, L["arbiter"]),
        25: (None, ERR_INDEX, L["done"]),
        # the draft agrees (agree 1.0) on a token that is not 0: no DIV_ZERO, whatever the C++
        # compiler evaluates first (draft_token once returned 0 when `b[big]` had failed before it)
        26: ("s", ERR_INDEX, L["c26"]),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_active", [1, 3, 27])
def test_runtime_errors_are_reported_identically(backend, max_active):
    src = ERRORS_SRC
    assert b_target_token(5, 0, 0, 1000) != 0  # case 26 needs it
    inputs = [{"case_": i, "b": [10, 20, 30, 40]} for i in range(27)]
    compiled, result = run_on(backend, src, inputs, max_rounds=40, max_active=max_active)
    program = compiled.program
    stage_index = {s.name: s.index for s in program.stages}
    expectations = _errors_expectations(src)
    for case in range(27):
        recs = result.per_request(case)
        errors = recs[recs[:, 2] == KIND_ERROR]
        if case not in expectations:
            assert len(errors) == 0, f"case {case}: unexpected error {errors.tolist()}"
            assert recs[-1][2] == KIND_DONE
            continue
        stage, code, line = expectations[case]
        assert len(errors) == 1 and recs[-1][2] == KIND_ERROR, f"case {case}: {recs.tolist()}"
        want_stage = NO_STAGE if stage is None else stage_index[stage]
        got = (int(errors[0][3]), int(errors[0][REC_HEADER]), int(errors[0][REC_HEADER + 1]))
        assert got == (want_stage, code, line), f"case {case}: (stage, code, line) {got} != {(want_stage, code, line)}"

    state = result.requests
    # a failing statement has no effect; the statements before it keep theirs
    for case in (0, 1, 2, 3, 7, 8, 9, 10, 11, 12, 15, 17, 18, 19, 20, 26):
        assert state["x"][case] == 100 and state["y"][case] == 1, case
        assert list(state["b"][case]) == [10, 5, 30, 40], case
    assert list(state["b"][4]) == [10, 5, 30, 40] and list(state["b"][5]) == [10, 5, 30, 40]
    assert state["x"][13] == 100 + 10 + 5 + 30 + 40  # iterations before the failing one count
    assert state["x"][14] == 55
    assert state["x"][6] == 5 and state["y"][6] == 6  # short-circuited operands raise nothing
    assert state["x"][16] == 5 + 30  # only the chosen branch of ?: runs
    # a failing guard does not run its stage (even where its substitute value would be true)
    assert state["x"][21] == 100 and state["x"][22] == 100
    # arbiters run in request-id order and see each other's writes; the failing one keeps
    # the effects of its completed statements (x = total, total += 100), not x = a / zero
    assert (state["x"][23], state["x"][24], state["x"][25]) == (1, 2, 103)
    assert int(result.shared["total"][0]) == 1 + 1 + 100 + 1  # every request lives one round
    assert int(result.shared["seen"][0]) == 345


@pytest.mark.parametrize("backend", BACKENDS)
def test_watchdog_and_params(backend):
    """Requests that never finish get WATCHDOG records; params (a flag set's member 31 included) reach every backend."""
    src = """pipeline wd
flags Wide { W0, W1, W2, W3, W4, W5, W6, W7, W8, W9, W10, W11, W12, W13, W14, W15,
             W16, W17, W18, W19, W20, W21, W22, W23, W24, W25, W26, W27, W28, W29, W30, W31 }
param mask: Wide = W0
param limit: i32 = 2
param scale: f32 = 0.5
param on: bool = false
request {
    n: i32
    m: Wide
    f: f32
}
stage s {
    n += 1
    m = mask
    f = n as f32 * scale
}
trace s: n, m, f
done when on && n >= limit
"""
    params = {"mask": 0x80000001, "limit": 3, "scale": 0.1, "on": True}
    _, result = run_on(backend, src, [{}, {"n": -100}, {}], params=params, max_rounds=5, max_active=2)
    first = result.per_request(0)
    assert [int(r[REC_HEADER + 1]) for r in first[:-1]] == [0x80000001] * 3
    assert first[-1][2] == KIND_DONE and int(first[-1][1]) == 2
    assert int(first[2][REC_HEADER + 2]) == bits(f32(3.0 * f32(0.1)))
    stuck = result.per_request(1)
    assert stuck[-1][2] == KIND_ERROR and int(stuck[-1][REC_HEADER]) == ERR_WATCHDOG
    late = result.per_request(2)  # admitted in round 3 (after request 0 retired): 2 rounds, then the watchdog
    assert late[-1][2] == KIND_ERROR and int(late[-1][REC_HEADER]) == ERR_WATCHDOG and int(late[-1][1]) == 5


@pytest.mark.parametrize("backend", BACKENDS)
def test_names_that_collide_with_generated_code(backend):
    """xl names that are keywords, macros or helpers of the generated Python and C++ (fuzzer findings)."""
    src = """pipeline Request
const NAN: f32 = 2.5
const M_PI: i32 = 3
const INT32_MAX: u32 = 7u
const check_index: i32 = 1
const stage_go: i32 = 4
enum Shared { None, pass, int }
flags XL_INF { errno, float }
param yield: i32 = 2
param is: i32 = 5
request {
    Params: i32
    wrap_i32: Shared = pass
    f32_to_i32: XL_INF
    fn_h: f32
    xs: i32[4]
}
fn h(range: i32, INF: i32[4]) -> i32 {
    let check_index_ = INF[range]
    return check_index_ + M_PI
}
stage go {
    let fn_h_local = check_index
    let b_hash_u32 = hash_u32(INT32_MAX)
    let Request = h(fn_h_local, xs)
    Params += Request + is + stage_go + (b_hash_u32 & 0u) as i32
    wrap_i32 = wrap_i32 == Shared.pass ? int : None
    f32_to_i32 = f32_to_i32 | float
    fn_h = NAN * 2.0
}
trace go: Params, wrap_i32, f32_to_i32, fn_h
done when Params > 40
"""
    _, result = run_on(backend, src, [{"xs": [1, 2, 3, 4]}], params={"is": 10})
    rec = result.per_request(0)[0]
    assert [int(w) for w in rec[REC_HEADER:REC_HEADER + 3]] == [2 + 3 + 10 + 4, 2, 2]
    assert int(rec[REC_HEADER + 3]) == bits(5.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_valid_programs_that_cxx_warns_about(backend):
    """The CPU build compiles with -Wall -Werror; valid xl must not fail it (fuzzer findings)."""
    src = """pipeline warns
request {
    n: i32
    x: i32
    xs: i32[3]
}
fn first(v: i32[3]) -> i32 {
    return v[0]
}
stage s {
    let never_read = 5
    let only_set = 1
    only_set = 2
    x = (n == n) ? first(xs) : 0
    n += 1
}
trace s: n, x
done when n >= 2
"""
    _, result = run_on(backend, src, [{"xs": [7, 8, 9]}])
    assert [int(r[REC_HEADER + 1]) for r in result.per_request(0)[:2]] == [7, 7]
