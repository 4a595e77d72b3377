"""The exact semantics of docs/semantics.md, in Python.

Used by the checker's constant folder and by every generated simulator, so a
folded constant and a simulated value can never disagree. The C++ twin of
this file is xlgen/runtime/xl_runtime.cuh; keep the two in step.
"""

from __future__ import annotations

import math
import struct

from ..core.subjects import SITE_SHIFT, site

# Runtime error codes, shared with xl_runtime.cuh (XL_ERR_*).
ERR_DIV_ZERO = 1
ERR_INDEX = 2
ERR_SHIFT = 3
ERR_CAST = 4
ERR_BUILTIN = 5
ERR_WATCHDOG = 6
ERR_CONFLICT = 7
ERR_NOT_OWNER = 8
ERROR_NAMES = {
    ERR_DIV_ZERO: "division by zero",
    ERR_INDEX: "index out of range",
    ERR_SHIFT: "shift amount out of range",
    ERR_CAST: "float to integer conversion out of range",
    ERR_BUILTIN: "builtin argument out of range",
    ERR_WATCHDOG: "max_iterations watchdog",
    ERR_CONFLICT: "two requests wrote the same shared element in one collective stage",
    ERR_NOT_OWNER: "pool page not owned by the request",
}


# What an error record says besides its code and line (docs/semantics.md §12). A check's
# `site` packs its subject (an id of xlgen/core/subjects.py: the array, tensor, pool, shared
# field or builtin) and a position (the dimension, the builtin's parameter, the operator);
# `value` is the value out of range and `bound` what it broke. `word` says how the value's
# 32 bits read: WORD_I a negative integer, WORD_U one at or above zero, WORD_F an f32 (the
# value alone decides, so every backend writes the same word whatever the operand's type).
# An error record's words after its header: code, line, subject, position, value, bound, word.
ERROR_WORDS = 7
WORD_I, WORD_U, WORD_F = 0, 1, 2  # as XL_WORD_* in xl_runtime.cuh
# The builtins that check an argument, by subject id: builtins come first among the subjects,
# in prelude order (core/subjects.py; tests/test_runtime_errors.py checks it).
SUBJECT_VERIFY_PREFIX = 2
SUBJECT_TARGET_TOKEN = 3
SUBJECT_DRAFT_TOKEN = 4
# Positions of DIV_ZERO (the operator), SHIFT (the operator) and CAST (the target type).
OP_DIV, OP_REM = 0, 1
OP_SHL, OP_SHR = 0, 1
TO_I32, TO_U32 = 0, 1


def value_word(value) -> int:
    """WORD_F for a float, else WORD_I for a negative integer and WORD_U for the others."""
    if isinstance(value, float):
        return WORD_F
    return WORD_I if value < 0 else WORD_U


class XlRuntimeError(Exception):
    """A runtime error inside generated code; `line` is the .xl source line, the rest what
    failed (above): `value` an int or, for a cast, the float (or, with `word`, its bits)."""

    def __init__(self, code: int, line: int = 0, site: int = 0, value=0, bound: int = 0, word: int | None = None):
        super().__init__(ERROR_NAMES.get(code, f"error {code}"))
        self.code = code
        self.line = line
        self.site = site
        self.value = value
        self.bound = bound
        self.word = value_word(value) if word is None else word

    def detail_words(self) -> tuple[int, int, int, int, int]:
        """The record's words after the code and line: subject, position, value, bound, word."""
        value = self.value
        bits = f32_bits(value) if isinstance(value, float) else int(value) & 0xFFFFFFFF
        return (self.site >> SITE_SHIFT, self.site & ((1 << SITE_SHIFT) - 1), bits, int(self.bound) & 0xFFFFFFFF,
                self.word)


_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
CANONICAL_NAN_BITS = 0x7FC00000
# Non-finite f32 constants (a folded `1.0 / 0.0`), by the names py_ops.literal
# writes into generated simulators, which star-import this module.
INF = math.inf
NAN = math.nan


def f32(x: float) -> float:
    """Round a binary64 value to the nearest binary32 (ties to even)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_bits(x: float) -> int:
    """The binary32 bit pattern of x (NaNs canonicalised, as traces store them)."""
    if x != x:
        return CANONICAL_NAN_BITS
    return _U32.unpack(_F32.pack(x))[0]


def bits_f32(bits: int) -> float:
    return _F32.unpack(_U32.pack(bits & 0xFFFFFFFF))[0]


def wrap_i32(x: int) -> int:
    return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def wrap_u32(x: int) -> int:
    return x & 0xFFFFFFFF


def div_i32(a: int, b: int) -> int:
    if b == 0:
        raise XlRuntimeError(ERR_DIV_ZERO, site=site(0, OP_DIV), value=a)
    q = abs(a) // abs(b)
    return wrap_i32(q if (a < 0) == (b < 0) else -q)


def rem_i32(a: int, b: int) -> int:
    if b == 0:
        raise XlRuntimeError(ERR_DIV_ZERO, site=site(0, OP_REM), value=a)
    r = abs(a) % abs(b)
    return wrap_i32(-r if a < 0 else r)


def div_u32(a: int, b: int) -> int:
    if b == 0:
        raise XlRuntimeError(ERR_DIV_ZERO, site=site(0, OP_DIV), value=a)
    return a // b


def rem_u32(a: int, b: int) -> int:
    if b == 0:
        raise XlRuntimeError(ERR_DIV_ZERO, site=site(0, OP_REM), value=a)
    return a % b


def div_f32(a: float, b: float) -> float:
    if b == 0.0:
        if a != a or a == 0.0:
            return math.nan
        negative = (math.copysign(1.0, a) < 0) != (math.copysign(1.0, b) < 0)
        return -math.inf if negative else math.inf
    return f32(a / b)


def _shift_amount(n: int, op: int) -> int:
    if n < 0 or n > 31:
        raise XlRuntimeError(ERR_SHIFT, site=site(0, op), value=n)
    return n


def shl_i32(a: int, n: int) -> int:
    return wrap_i32(a << _shift_amount(n, OP_SHL))


def shl_u32(a: int, n: int) -> int:
    return wrap_u32(a << _shift_amount(n, OP_SHL))


def shr_i32(a: int, n: int) -> int:
    return a >> _shift_amount(n, OP_SHR)  # arithmetic: Python's >> on negative ints floors, as sign fill does


def shr_u32(a: int, n: int) -> int:
    return a >> _shift_amount(n, OP_SHR)


def f32_to_i32(x: float) -> int:
    if x != x or not (-2147483649.0 < x < 2147483648.0):
        raise XlRuntimeError(ERR_CAST, site=site(0, TO_I32), value=float(x))
    return int(x)


def f32_to_u32(x: float) -> int:
    if x != x or not (-1.0 < x < 4294967296.0):
        raise XlRuntimeError(ERR_CAST, site=site(0, TO_U32), value=float(x))
    return int(x)


def sqrt_f32(x: float) -> float:
    if x != x or x < 0.0:
        return math.nan
    return f32(math.sqrt(x))


def min_(a, b):
    return b if b < a else a


def max_(a, b):
    return b if b > a else a


def clamp(x, lo, hi):
    return min_(max_(x, lo), hi)


def abs_i32(x: int) -> int:
    return wrap_i32(abs(x))


def abs_f32(x: float) -> float:
    return abs(x)


def check_index(i: int, n: int, where: int = 0) -> int:
    """`i` if in 0..n-1; `where` is the check's site (its array and dimension)."""
    if i < 0 or i >= n:
        raise XlRuntimeError(ERR_INDEX, site=where, value=i, bound=n)
    return i


# ---- pools (docs/semantics.md §13.3): flat numpy arrays of the element type, zero at launch.
# The generated code checks each index (check_index) before the call, left to right.

POOL_DTYPES = {"i": "<i4", "u": "<u4", "f": "<f4"}  # by storage word (ir.storage_word)


def new_pool(size: int, word: str):
    import numpy as np

    return np.zeros(size, dtype=POOL_DTYPES[word])


def pool_element(owner, req_id: int, dims: tuple, where: int, indices: tuple) -> int:
    """The flat (row-major) position of an element whose indices are in range, once the owner
    check passed: page indices[0] must belong to the request (`where`: the pool's site)."""
    if owner[indices[0]] != req_id:
        raise XlRuntimeError(ERR_NOT_OWNER, site=where, value=indices[0], bound=owner[indices[0]])
    flat = 0
    for i, d in zip(indices, dims):
        flat = flat * d + i
    return flat


def pool_read(data, owner, req_id: int, dims: tuple, where: int, *indices):
    return data[pool_element(owner, req_id, dims, where, indices)].item()  # a Python float or int


def pool_write(data, owner, req_id: int, dims: tuple, where: int, value, *indices) -> None:
    """`value` was evaluated before the indices (§8)."""
    data[pool_element(owner, req_id, dims, where, indices)] = value


def decimal_to_f32(text: str) -> float:
    """A decimal literal rounded once, to the nearest binary32 (ties to even).

    Going through binary64 first (float(text), then f32) can round twice and
    land one unit off; compare the two binary32 neighbours against the exact value.
    """
    from fractions import Fraction

    exact = Fraction(text)
    guess = f32(float(exact))
    if math.isinf(guess):
        return guess
    bits = f32_bits(guess)
    below = bits_f32(bits - 1) if guess > 0 else bits_f32(bits + 1) if guess < 0 else -bits_f32(1)
    above = bits_f32(bits + 1) if guess >= 0 else bits_f32(bits - 1)
    best = guess
    for candidate in (below, above):
        if math.isinf(candidate):
            continue
        d_best, d_cand = abs(exact - Fraction(best)), abs(exact - Fraction(candidate))
        if d_cand < d_best or (d_cand == d_best and f32_bits(candidate) % 2 == 0 and f32_bits(best) % 2 == 1):
            best = candidate
    return best


# ---- collective stages (docs/semantics.md §13.1) ----------------------------------------


def total_order_key(value, word: str) -> int:
    """An unsigned key that orders values as min_of/max_of/argmin/argmax do: integers by
    value; f32 by IEEE totalOrder (-inf < ... < -0.0 < +0.0 < ... < +inf < NaN, every NaN
    the canonical one)."""
    if word == "i":
        return value + 0x80000000
    if word == "u":
        return value
    bits = f32_bits(value)
    return bits ^ 0xFFFFFFFF if bits & 0x80000000 else bits | 0x80000000


def collective(op: str, word: str, contributions: list[tuple[int, object]]) -> list:
    """The results of collective `op` for its participants, given (req_id, contribution)
    in ascending request id. `word` is the contribution's storage word ('i', 'u', 'f'; bool
    is 'u'). Integer sums wrap, so every backend's order of additions gives this result."""
    wrap = wrap_i32 if word == "i" else wrap_u32
    values = [v for _, v in contributions]
    n = len(values)
    if op == "scan":
        out, running = [], 0
        for v in values:
            out.append(wrap(running))
            running += v
        return out
    if op == "sum":
        return [wrap(sum(values))] * n
    if op == "count":
        return [sum(1 for v in values if v)] * n
    keys = [total_order_key(v, word) for v in values]
    if op in ("min_of", "argmin"):
        best = min(range(n), key=lambda i: (keys[i], i))
    else:
        best = min(range(n), key=lambda i: (-keys[i], i))  # the greatest; ties to the lowest id
    if op.startswith("arg"):
        return [contributions[best][0]] * n
    return [values[best]] * n


class SharedWrites:
    """A collective stage's writes to shared state. Reads during the stage see the state
    from before it; the writes take effect together when it ends (`apply`)."""

    def __init__(self):
        self.claims: dict[tuple[str, int | None], list] = {}  # element -> [writer, value, conflicted]
        self.sums: dict[tuple[str, int | None], list] = {}  # element -> [total, wrap]

    def writer(self, req_id: int) -> "_Writer":
        return _Writer(self, req_id)

    def apply(self, sh) -> set[int]:
        """Store every write; return the requests that wrote an element another request
        also wrote (such an element keeps its value from before the stage)."""
        conflicted = set()
        for (attr, index), (writer, value, clash) in self.claims.items():
            if clash:
                conflicted |= clash | {writer}
                continue
            _store(sh, attr, index, value)
        for (attr, index), (total, wrap) in self.sums.items():
            current = getattr(sh, attr) if index is None else getattr(sh, attr)[index]
            _store(sh, attr, index, wrap(current + total))
        return conflicted


def _store(sh, attr: str, index, value) -> None:
    if index is None:
        setattr(sh, attr, value)
    else:
        getattr(sh, attr)[index] = value


class _Writer:
    """One request's side of SharedWrites (what generated collective stages call)."""

    __slots__ = ("writes", "req_id")

    def __init__(self, writes: SharedWrites, req_id: int):
        self.writes, self.req_id = writes, req_id

    def put(self, attr: str, value, index=None) -> None:  # value first: it is evaluated first (§8)
        claim = self.writes.claims.get((attr, index))
        if claim is None:
            self.writes.claims[(attr, index)] = [self.req_id, value, set()]
        elif claim[0] == self.req_id:
            claim[1] = value  # this request's own earlier write: the last one counts
        else:
            claim[2].add(self.req_id)

    def add(self, attr: str, value, wrap, index=None) -> None:
        entry = self.writes.sums.setdefault((attr, index), [0, wrap])
        entry[0] += value
