"""Lane-parallel code in the simulator: lanes loops and reductions as numpy arrays.

A lanes loop's iterations (a reduction's elements) are evaluated together, one numpy
array per value, rounding every f32 operation to binary32 as the scalar simulator does
(numpy's float32 `+ - * /` and sqrt are correctly rounded and never fused); a reduction in
an iteration, over the (iteration, element) pairs of all iterations (`Elements`). Runtime errors
follow docs/semantics.md §13.2: each iteration stops at its first failing statement (which
has no effect), the others go on, and the statement then fails with the error of the
lowest failing index. The generated simulator star-imports this module; the C++ twin is
the lane-parallel section of xl_runtime.cuh.
"""

from __future__ import annotations

import os

import click
import numpy as np

from . import xlmath
from .ops import (CANONICAL_NAN_BITS, ERR_BUILTIN, ERR_CAST, ERR_DIV_ZERO, ERR_INDEX, ERR_NOT_OWNER, ERR_SHIFT, OP_DIV, OP_REM,
                  OP_SHL, OP_SHR, SUBJECT_DRAFT_TOKEN, SUBJECT_TARGET_TOKEN, TO_I32, TO_U32, WORD_F, WORD_I, WORD_U,
                  XlRuntimeError, site, wrap_i32)
from .builtins import VOCAB_MIN

F32, I32, U32, BOOL = np.float32, np.int32, np.uint32, np.bool_
REDUCE_LANES = 32
# Ranges up to this long run as a Python loop over the iterations (numpy's per-call cost
# dominates there); longer ones as numpy arrays. Both compute §13.2's result.
SCALAR_MAX = 32


def use_scalar(n: int) -> bool:
    return n <= SCALAR_MAX


# The numpy path holds a lanes loop's (a reduction's) iterations at once, about 40 bytes each and
# a few more per value: past this many the simulator stops with SimulatorLimit (a clear error,
# not numpy's MemoryError after minutes of swapping). XLGEN_SIM_LANES_MAX raises it.
LANES_MAX = int(os.environ.get("XLGEN_SIM_LANES_MAX", "0") or 0) or (1 << 25)


class SimulatorLimit(click.ClickException):
    """A legal lanes loop or reduction too long for the simulator's memory (the message says what to do)."""


def _where() -> str:
    """`FILE.xl:LINE: ` of the generated statement that is running (its `# @xl:N` mark), or ''."""
    import linecache
    import re
    import sys

    frame = sys._getframe(2)
    while frame is not None and "SOURCE" not in frame.f_globals:
        frame = frame.f_back
    if frame is None or frame.f_lineno is None:
        return ""
    for lineno in range(frame.f_lineno, max(frame.f_lineno - 8, 0), -1):  # the mark is on the range's line
        match = re.search(r"# @xl:(\d+)", linecache.getline(frame.f_code.co_filename, lineno))
        if match:
            return f"{frame.f_globals['SOURCE']}:{match.group(1)}: "
    return ""


def _check_length(n: int, what: str) -> None:
    if n > LANES_MAX:
        raise SimulatorLimit(f"{_where()}the simulator stopped: a {what} of {n} iterations needs about "
                             f"{n * 48 >> 30} GiB "
                             f"here (it evaluates them at once; the limit is {LANES_MAX}); shorten the range, or "
                             "set XLGEN_SIM_LANES_MAX to a larger count if the memory is there")
_BUTTERFLY = [np.arange(REDUCE_LANES) ^ k for k in (16, 8, 4, 2, 1)]
# An error's parts, one array of each per iteration (ops.XlRuntimeError: value and bound as int64,
# an f32 value as its bits with word WORD_F).
ERROR_PARTS = ("code", "line", "site", "value", "bound", "word")


class Lanes:
    """One lanes loop or reduction being evaluated: the indices, which iterations are still
    running (`live`), which the current `if` arm covers (`mask`), the current statement's
    errors, and each iteration's error."""

    def __init__(self, start: int, stop: int):
        n = max(0, int(stop) - int(start))
        _check_length(n, "lanes loop or reduction")
        self._begin(np.arange(int(start), int(start) + n, dtype=np.int64).astype(np.int32))

    def _begin(self, index: np.ndarray) -> None:
        self.index = index
        self.n = n = len(index)
        self.live = np.ones(n, dtype=bool)
        self.mask = self.live.copy()
        self.arms: list[np.ndarray] = []
        self.loops: list[tuple[np.ndarray, list[np.ndarray], np.ndarray]] = []
        self.err = {part: np.zeros(n, dtype=np.int64) for part in ERROR_PARTS}  # the current statement's
        self.fail = {part: np.zeros(n, dtype=np.int64) for part in ERROR_PARTS}  # each iteration's error

    @property
    def code(self) -> np.ndarray:
        """The current statement's error code per iteration (0: none)."""
        return self.err["code"]

    # ---- errors
    def check(self, bad, code: int, line: int, where: int = 0, value=0, bound=0, word=None) -> None:
        """Iterations where `bad` holds fail with `code` unless this statement failed already;
        `where`, `value`, `bound` and `word` say what failed (ops.XlRuntimeError), `value` and
        `bound` per iteration or one for all (word None: by the value's sign)."""
        if not np.any(bad):  # the usual case, cheaply
            return
        new = self.mask & bad & (self.code == 0)
        if new.any():
            value = np.broadcast_to(np.asarray(value, dtype=np.int64), (self.n,))[new]
            parts = {"code": code, "line": line, "site": where, "value": value,
                     "bound": np.broadcast_to(np.asarray(bound, dtype=np.int64), (self.n,))[new],
                     "word": np.where(value < 0, WORD_I, WORD_U) if word is None else word}
            for part, v in parts.items():
                self.err[part][new] = v

    def ok(self) -> np.ndarray:
        """Iterations on which the current statement takes effect."""
        return self.mask & (self.code == 0)

    def end(self) -> None:
        """The end of a statement: iterations it failed on stop."""
        failed = self.code != 0
        if failed.any():
            for part in ERROR_PARTS:
                self.fail[part][failed] = self.err[part][failed]
                self.err[part][:] = 0
            self.live &= ~failed
            self.mask &= ~failed
            self.arms = [m & ~failed for m in self.arms]

    def raise_first(self) -> None:
        failed = np.flatnonzero(self.fail["code"])
        if failed.size:
            f = {part: int(v[failed[0]]) for part, v in self.fail.items()}
            raise XlRuntimeError(f["code"], f["line"], f["site"], f["value"], f["bound"], f["word"])

    # ---- `if` arms and conditional operands
    def push(self, cond) -> None:
        self.arms.append(self.mask)
        self.mask = self.mask & cond

    def pop(self) -> None:
        self.mask = self.arms.pop()

    # ---- `for` loops inside an iteration: each iteration leaves them (`break`) or skips to
    # the next pass (`continue`) at its own time, so those are masks too
    def loop_enter(self) -> None:
        """Remember who runs the loop (the mask and enclosing arms) and who has broken out."""
        self.loops.append((self.mask, list(self.arms), np.zeros(self.n, dtype=bool)))

    def loop_next(self) -> bool:
        """The start of a pass: every iteration that entered, has not failed and has not broken
        out runs it (a `continue` lasts one pass). False when none does: the loop is over."""
        mask, arms, broken = self.loops[-1]
        self.mask = mask & self.live & ~broken
        self.arms = [a & self.live for a in arms]
        return bool(self.mask.any())

    def loop_exit(self) -> None:
        mask, arms, _ = self.loops.pop()
        self.mask = mask & self.live
        self.arms = [a & self.live for a in arms]

    def leave(self, for_good: bool) -> None:
        """`break` (for_good) or `continue` on the iterations running this statement: they skip
        the rest of the pass, and with `break` the rest of the loop."""
        stop = self.mask
        if for_good:
            self.loops[-1][2][stop] = True
        self.mask = self.mask & ~stop
        self.arms = [a & ~stop for a in self.arms]


def v_store(L: Lanes, array: np.ndarray, index, value) -> None:
    """`array[index] = value` on the iterations the statement takes effect on."""
    ok = L.ok()
    index = np.broadcast_to(index, (L.n,))
    value = np.broadcast_to(value, (L.n,))
    array[index[ok]] = value[ok]


def v_assign(L: Lanes, old, new):
    """A lane local assigned inside an `if` arm: the new value where the statement runs."""
    return np.where(L.ok(), new, old)


# ---- pools (docs/semantics.md §13.3) ----------------------------------------------------


def _pool_element(L: Lanes, owner, req_id, dims, line: int, where: int, indices):
    """The flat positions of the elements (indices already checked, left to right), after
    the owner check of their pages."""
    page = np.asarray(indices[0], dtype=np.int64)
    L.check(owner[page] != req_id, ERR_NOT_OWNER, line, where, page, owner[page])
    flat = np.int64(0)
    for i, d in zip(indices, dims):
        flat = flat * d + np.asarray(i, dtype=np.int64)
    return flat


def v_pool_get(L: Lanes, data, owner, req_id, dims, line: int, where: int, *indices):
    return data[_pool_element(L, owner, req_id, dims, line, where, indices)]


def v_pool_set(L: Lanes, value, data, owner, req_id, dims, line: int, where: int, *indices) -> None:
    v_store(L, data, _pool_element(L, owner, req_id, dims, line, where, indices), value)


# ---- checked operations ---------------------------------------------------------------


def v_idx(L: Lanes, i, n: int, line: int, where: int = 0):
    i = np.asarray(i)
    bad = (i < 0) | (i >= n) if i.dtype.kind == "i" else (i >= n)
    if not bad.any():  # the usual case: no copy (an index in range keeps flat indices < 2^31)
        return i
    L.check(bad, ERR_INDEX, line, where, i, n)
    return np.where(bad, 0, i).astype(np.int64)


def _divisor(L: Lanes, a, b, line: int, op: int):
    bad = b == 0
    L.check(bad, ERR_DIV_ZERO, line, site(0, op), a)
    return np.where(bad, 1, b)


def _positive_divisor(a, b) -> bool:
    """The common case of a division's operands: a uniform divisor above zero and dividends
    at or above zero, where truncation is numpy's floor division (nothing can fail)."""
    return np.ndim(b) == 0 and b > 0 and np.asarray(a).min(initial=0) >= 0


def v_div_i32(L: Lanes, a, b, line: int):
    if _positive_divisor(a, b):
        return np.asarray(a // I32(b), dtype=np.int32)
    b = _divisor(L, a, b, line, OP_DIV).astype(np.int64)
    a = np.asarray(a).astype(np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) == (b < 0), q, -q).astype(np.int32)


def v_rem_i32(L: Lanes, a, b, line: int):
    if _positive_divisor(a, b):
        return np.asarray(a % I32(b), dtype=np.int32)
    b = _divisor(L, a, b, line, OP_REM).astype(np.int64)
    a = np.asarray(a).astype(np.int64)
    r = np.abs(a) % np.abs(b)
    return np.where(a < 0, -r, r).astype(np.int32)


def v_div_u32(L: Lanes, a, b, line: int):
    return (np.asarray(a) // _divisor(L, a, b, line, OP_DIV)).astype(np.uint32)


def v_rem_u32(L: Lanes, a, b, line: int):
    return (np.asarray(a) % _divisor(L, a, b, line, OP_REM)).astype(np.uint32)


def _shift(L: Lanes, n, line: int, op: int):
    n = np.asarray(n)
    bad = (n < 0) | (n > 31) if n.dtype.kind == "i" else (n > 31)
    L.check(bad, ERR_SHIFT, line, site(0, op), n)
    return np.where(bad, 0, n).astype(np.uint32)


def v_shl_i32(L: Lanes, a, n, line: int):
    return (np.asarray(a).astype(np.uint32) << _shift(L, n, line, OP_SHL)).astype(np.int32)


def v_shl_u32(L: Lanes, a, n, line: int):
    return (np.asarray(a).astype(np.uint32) << _shift(L, n, line, OP_SHL)).astype(np.uint32)


def v_shr_i32(L: Lanes, a, n, line: int):
    return (np.asarray(a).astype(np.int32) >> _shift(L, n, line, OP_SHR).astype(np.int32)).astype(np.int32)


def v_shr_u32(L: Lanes, a, n, line: int):
    return (np.asarray(a).astype(np.uint32) >> _shift(L, n, line, OP_SHR)).astype(np.uint32)


def _f32_words(x: np.ndarray) -> np.ndarray:
    """f32 values as the words an error record holds (every NaN the canonical one)."""
    return np.where(np.isnan(x), CANONICAL_NAN_BITS, x.view(np.uint32)).astype(np.int64)


def v_f2i(L: Lanes, x, line: int):
    x = np.asarray(x, dtype=np.float32)
    bad = ~((x >= np.float32(-2147483648.0)) & (x < np.float32(2147483648.0)))
    if bad.any():
        L.check(bad, ERR_CAST, line, site(0, TO_I32), _f32_words(x), word=WORD_F)
    return np.where(bad, np.float32(0), x).astype(np.int32)


def v_f2u(L: Lanes, x, line: int):
    x = np.asarray(x, dtype=np.float32)
    bad = ~((x > np.float32(-1.0)) & (x < np.float32(4294967296.0)))
    if bad.any():
        L.check(bad, ERR_CAST, line, site(0, TO_U32), _f32_words(x), word=WORD_F)
    return np.where(bad, np.float32(0), x).astype(np.int64).astype(np.uint32)


def v_and(L: Lanes, a, b):
    """`a && b`: b is evaluated (its errors count) only where a holds."""
    L.push(a)
    right = b()
    L.pop()
    return a & right


def v_or(L: Lanes, a, b):
    L.push(~a)
    right = b()
    L.pop()
    return a | right


def v_select(L: Lanes, c, then, otherwise):
    L.push(c)
    t = then()
    L.pop()
    L.push(~c)
    f = otherwise()
    L.pop()
    return np.where(c, t, f)


def v_min(a, b):
    return np.where(b < a, b, a)


def v_max(a, b):
    return np.where(b > a, b, a)


def v_clamp(x, lo, hi):
    return v_min(v_max(x, lo), hi)


def v_abs_i32(a):
    a = np.asarray(a, dtype=np.int32)
    return np.where(a < 0, -a, a)


# ---- builtins (the scalar twins are in builtins.py) -------------------------------------


def v_hash_u32(x):
    x = np.asarray(x).astype(np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def _v_mix(seed, pos, prev, salt: int):
    h = v_hash_u32(np.asarray(seed).astype(np.uint32) ^ np.uint32(salt))
    h = v_hash_u32(h ^ np.asarray(pos).astype(np.uint32))
    return v_hash_u32(h ^ (np.asarray(prev).astype(np.uint32) * np.uint32(0x9E3779B1)))


def _v_vocab(L: Lanes, vocab, line: int, subject: int):
    bad = np.asarray(vocab) < VOCAB_MIN
    L.check(bad, ERR_BUILTIN, line, site(subject, 3), vocab, VOCAB_MIN)
    return np.where(bad, VOCAB_MIN, vocab).astype(np.uint32)


def vb_hash_u32(L: Lanes, line: int, x):
    return v_hash_u32(x)


def vb_target_token(L: Lanes, line: int, seed, pos, prev, vocab):
    v = _v_vocab(L, vocab, line, SUBJECT_TARGET_TOKEN)
    return (_v_mix(seed, pos, prev, 0x7A3C5E11) % v).astype(np.int32)


def vb_draft_token(L: Lanes, line: int, seed, pos, prev, vocab, agree):
    v = _v_vocab(L, vocab, line, SUBJECT_DRAFT_TOKEN)
    target = (_v_mix(seed, pos, prev, 0x7A3C5E11) % v).astype(np.int64)
    h = _v_mix(seed, pos, prev, 0x2C1B3C6D)
    u = (h >> np.uint32(8)).astype(np.float64) * (1.0 / 16777216.0)  # exact, as in b_draft_token
    other = (target + 1 + (h.astype(np.int64) % (v.astype(np.int64) - 1))) % v.astype(np.int64)
    return np.where(u < np.asarray(agree, dtype=np.float64), target, other).astype(np.int32)


def vb_exp(L: Lanes, line: int, x):  # the exact math functions: elementwise on arrays (xlmath.py)
    return xlmath.exp(x)


def vb_log(L: Lanes, line: int, x):
    return xlmath.log(x)


def vb_tanh(L: Lanes, line: int, x):
    return xlmath.tanh(x)


def vb_sigmoid(L: Lanes, line: int, x):
    return xlmath.sigmoid(x)


def vb_rsqrt(L: Lanes, line: int, x):
    return xlmath.rsqrt(x)


# ---- reductions --------------------------------------------------------------------------


def _elements(L: Lanes, values, dtype) -> np.ndarray:
    L.end()
    L.raise_first()
    return np.asarray(np.broadcast_to(values, (L.n,)), dtype=dtype)


def reduce_sum(L: Lanes, values, dtype):
    return sum_values(_elements(L, values, dtype), dtype)


def reduce_best(L: Lanes, values, dtype, op: str):
    return best_values(_elements(L, values, dtype), L.index, dtype, op)


# ---- long ranges in pieces ------------------------------------------------------------------
# The generated code of a lanes loop or reduction (emit_vec.py):
#
#     pieces = Pieces(op, dtype)                 # or Pieces("loop", None) for a lanes loop
#     for xl_L in lane_chunks(lo, hi):           # bounded memory; --timeout fires between pieces
#         ... the body on xl_L, as today ...
#         pieces.add(xl_L, xl_v)                 # a reduction's values (a loop: pieces.add(xl_L))
#     xl_r = pieces.result()                     # the bits reduce_sum/reduce_best give on the whole range
#
# Pieces are whole rows of REDUCE_LANES, so lane l still adds elements l, l + 32, ... in order.

CHUNK = 1 << 20  # iterations per piece (a multiple of REDUCE_LANES)


def lane_chunks(start: int, stop: int, chunk: int | None = None):
    """Lanes for start..stop in pieces of at most `chunk` (default CHUNK) iterations, in order
    (one empty piece for an empty range)."""
    chunk = chunk or CHUNK
    assert chunk > 0 and chunk % REDUCE_LANES == 0
    start, stop = int(start), int(stop)
    if stop <= start:
        yield Lanes(start, start)
        return
    for lo in range(start, stop, chunk):
        yield Lanes(lo, min(lo + chunk, stop))


class Pieces:
    """A reduction (op: sum, max, min, argmax, argmin) or a lanes loop (op "loop") over the pieces
    of its range, in order: the same result and the same error (the lowest failing index) as the
    whole range at once. A reduction stops at its first failing piece (raises); a loop runs every
    piece and raises the first failing piece's lowest error at `result()`."""

    def __init__(self, op: str, dtype=None):
        self.op, self.dtype = op, dtype
        self.acc = None  # f32 sums: the 32 lanes' running sums
        self.total = 0  # integer sums
        self.best = None  # (key, index, value) of max/min/arg*
        self.error = None  # a loop's first error

    def add(self, L: Lanes, values=None) -> None:
        if self.op == "loop":
            if self.error is None:
                try:
                    L.raise_first()
                except XlRuntimeError as exc:
                    self.error = exc
            return
        v = _elements(L, values, self.dtype)  # raises the piece's lowest error: the range's, pieces in order
        if self.op == "sum":
            if self.dtype is not np.float32:
                self.total += int(v.astype(np.int64).sum())
                return
            if len(v) == 0:
                return
            rows = -(-len(v) // REDUCE_LANES)
            table = np.full(rows * REDUCE_LANES, -0.0, dtype=np.float32)
            table[: len(v)] = v
            table = table.reshape(rows, REDUCE_LANES)
            if self.acc is not None:
                table = np.vstack([self.acc[None, :], table])
            with np.errstate(all="ignore"):
                self.acc = np.add.accumulate(table, axis=0)[-1]
            return
        if len(v) == 0:
            return
        keys = _order_keys(v)
        k = int(np.argmax(keys) if self.op in ("max", "argmax") else np.argmin(keys))
        if self.best is None or (keys[k] > self.best[0] if self.op in ("max", "argmax") else keys[k] < self.best[0]):
            self.best = (keys[k], int(L.index[k]), v[k:k + 1])  # ties keep the earlier piece: the lower index

    def result(self):
        if self.op == "loop":
            if self.error is not None:
                raise self.error
            return None
        if self.op == "sum":
            if self.dtype is not np.float32:
                return wrap_i32(self.total) if self.dtype is np.int32 else self.total & 0xFFFFFFFF
            if self.acc is None:
                return sum_values(np.zeros(0, dtype=np.float32), np.float32)
            acc = self.acc
            with np.errstate(all="ignore"):
                for perm in _BUTTERFLY:
                    acc = acc + acc[perm]
            return float(acc[0])
        if self.best is None:
            return best_values(np.zeros(0, dtype=self.dtype), np.zeros(0, dtype=np.int64), self.dtype, self.op)
        _key, index, value = self.best
        return best_values(value, np.array([index], dtype=np.int64), self.dtype, self.op)


def reduce_list(values: list, start: int, dtype, op: str):
    """A reduction whose elements the scalar path computed (in order, so its first error
    was the lowest index's)."""
    v = np.array(values, dtype=dtype) if values else np.zeros(0, dtype=dtype)
    if op == "sum":
        return sum_values(v, dtype)
    return best_values(v, np.arange(start, start + len(v), dtype=np.int64), dtype, op)


def sum_values(v: np.ndarray, dtype):
    """lane l adds elements l, l + 32, ... in order; then lane l adds lane l ^ k's partial
    for k = 16, 8, 4, 2, 1 (xl_reduce_sum)."""
    if dtype is not np.float32:  # integer sums wrap: every order gives the same result
        total = int(v.astype(np.int64).sum())
        return wrap_i32(total) if dtype is np.int32 else total & 0xFFFFFFFF
    rows = max(1, -(-len(v) // REDUCE_LANES))
    table = np.full(rows * REDUCE_LANES, -0.0, dtype=np.float32)  # x + -0.0 == x for every x
    table[: len(v)] = v
    with np.errstate(all="ignore"):
        acc = np.add.accumulate(table.reshape(rows, REDUCE_LANES), axis=0)[-1]  # in order, row by row
    with np.errstate(all="ignore"):  # inf + -inf is NaN here as on the GPU
        for perm in _BUTTERFLY:
            acc = acc + acc[perm]
    return float(acc[0])


def _order_keys(v: np.ndarray) -> np.ndarray:
    """Keys ordering values as xl_reduce_key: integers by value, f32 by IEEE totalOrder with
    every NaN the canonical one (above +inf)."""
    if v.dtype == np.float32:
        bits = v.view(np.uint32).astype(np.int64)
        bits = np.where(np.isnan(v), 0x7FC00000, bits)
        return np.where(bits & 0x80000000, bits ^ 0xFFFFFFFF, bits | 0x80000000)
    return v.astype(np.int64)


def best_values(v: np.ndarray, index: np.ndarray, dtype, op: str):
    """max/min/argmax/argmin: the greatest (least) key, ties to the lowest index."""
    greatest = op in ("max", "argmax")
    if len(v) == 0:
        if op in ("argmax", "argmin"):
            return -1
        if dtype is np.float32:
            return -np.inf if greatest else np.inf
        info = np.iinfo(dtype)
        return int(info.min if greatest else info.max)
    keys = _order_keys(v)
    k = int(np.argmax(keys) if greatest else np.argmin(keys))  # the first of equal keys
    if op in ("argmax", "argmin"):
        return int(index[k])
    best = v[k].item()
    return float("nan") if best != best else best


# ---- reductions in the iterations of a lanes loop ------------------------------------------


class Elements(Lanes):
    """A reduction in a lanes loop's iterations, evaluated in all of them at once. Its
    elements are the (iteration, j) pairs, iteration by iteration and j increasing within
    each: a ragged range, since the bounds may differ per iteration. Only the iterations the
    `let` runs on (`outer.ok()`) have elements. Expression code runs on it as on any Lanes
    (errors are recorded per element); iteration values reach it through `gather`."""

    def __init__(self, outer: Lanes, start, stop):
        self.outer = outer
        start = np.broadcast_to(np.asarray(start, dtype=np.int64), (outer.n,))
        stop = np.broadcast_to(np.asarray(stop, dtype=np.int64), (outer.n,))
        self.length = np.where(outer.ok(), np.maximum(stop - start, 0), 0)
        self.first = np.cumsum(self.length) - self.length  # each iteration's first element
        _check_length(int(self.length.sum()), "reduction in a lanes loop (elements of all its iterations)")
        # j = start + (element - first), in wrapping int32 arithmetic: j itself fits
        shift = self.gather((start - self.first).astype(np.int32))
        self._begin(np.arange(int(self.length.sum()), dtype=np.int32) + shift)

    def gather(self, value):
        """An iteration's value at each of its elements."""
        return np.repeat(value, self.length) if np.ndim(value) else value

    def iteration_of(self, elements: np.ndarray) -> np.ndarray:
        """The iteration of each of these elements (positions, increasing)."""
        return np.searchsorted(self.first + self.length, elements, side="right")

    def reduce(self, values, dtype, op: str) -> np.ndarray:
        """Each iteration's result. An iteration with a failing element fails with the
        error of its lowest one (in order, so the first per iteration) and stops there."""
        failed = np.flatnonzero(self.code)
        if failed.size:
            iteration = self.iteration_of(failed)
            first_failure = np.r_[True, iteration[1:] != iteration[:-1]]
            for part in ERROR_PARTS:
                self.outer.err[part][iteration[first_failure]] = self.err[part][failed[first_failure]]
        v = np.asarray(np.broadcast_to(values, (self.n,)), dtype=dtype)
        return self._sum(v, dtype) if op == "sum" else self._best(v, dtype, op)

    def _sum(self, v: np.ndarray, dtype) -> np.ndarray:
        if dtype is not np.float32:  # integer sums wrap: every order gives the same result
            totals = np.concatenate(([0], np.cumsum(v.astype(np.int64))))
            words = (totals[self.first + self.length] - totals[self.first]).astype(np.uint32)
            return words.view(np.int32) if dtype is np.int32 else words
        # sum_values per iteration: each padded with -0.0 (x + -0.0 == x) to whole rows of 32
        longest = int(self.length.max(initial=0))
        rows = max(1, -(-longest // REDUCE_LANES))
        table = np.full((self.outer.n, rows * REDUCE_LANES), -0.0, dtype=np.float32)
        if self.n == self.outer.n * longest:  # every iteration has as many elements: a block copy
            table[:, :longest] = v.reshape(self.outer.n, longest)
        else:
            elements = np.arange(self.n)
            table[self.iteration_of(elements), elements - self.gather(self.first)] = v
        table = table.reshape(self.outer.n, rows, REDUCE_LANES)
        with np.errstate(all="ignore"):  # lane by lane, row after row, as sum_values
            acc = F32(-0.0) + table[:, 0]  # from -0.0, as every backend starts (a signalling NaN quietens)
            for row in range(1, rows):
                acc = acc + table[:, row]
            for perm in _BUTTERFLY:
                acc = acc + acc[:, perm]
        return acc[:, 0]

    def _best(self, v: np.ndarray, dtype, op: str) -> np.ndarray:
        """best_values per iteration: the greatest (least) key, the lowest j among equal ones."""
        greatest = op in ("max", "argmax")
        if op in ("argmax", "argmin"):
            result = np.full(self.outer.n, -1, dtype=np.int32)
        elif dtype is np.float32:
            result = np.full(self.outer.n, -np.inf if greatest else np.inf, dtype=np.float32)
        else:
            info = np.iinfo(dtype)
            result = np.full(self.outer.n, info.min if greatest else info.max, dtype=dtype)
        filled = np.flatnonzero(self.length)
        if filled.size == 0:
            return result
        starts = self.first[filled]  # only filled iterations: each slice is one iteration's elements
        keys = _order_keys(v)
        best = (np.maximum if greatest else np.minimum).reduceat(keys, starts)
        hits = keys == np.repeat(best, self.length[filled])
        chosen = np.minimum.reduceat(np.where(hits, np.arange(self.n), self.n), starts)
        if op in ("argmax", "argmin"):
            result[filled] = self.index[chosen]
        elif dtype is np.float32:
            result[filled] = np.where(np.isnan(v[chosen]), np.float32(np.nan), v[chosen])  # the canonical NaN
        else:
            result[filled] = v[chosen]
        return result
