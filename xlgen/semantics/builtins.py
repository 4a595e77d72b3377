"""The prelude's builtins for the simulator. The C++/CUDA twins are in xl_runtime.cuh.

Each must compute exactly what its C++ version computes; the diff tests check it.
"""

from __future__ import annotations

from . import xlmath
from .ops import ERR_BUILTIN, SUBJECT_DRAFT_TOKEN, SUBJECT_TARGET_TOKEN, SUBJECT_VERIFY_PREFIX, XlRuntimeError, site

_M32 = 0xFFFFFFFF


def b_hash_u32(x: int) -> int:
    """lowbias32 (Chris Wellons): a fast, well-mixed 32-bit hash."""
    x &= _M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _M32
    x ^= x >> 16
    return x


# An argument out of range names the builtin and the parameter (its position), with the value
# and the bound it broke: verify_prefix's n must be in 0..min(len(a), len(b)), a vocab at least 2.
VOCAB_MIN = 2


def b_verify_prefix(a: list, b: list, n: int) -> int:
    if n < 0 or n > len(a) or n > len(b):
        raise XlRuntimeError(ERR_BUILTIN, site=site(SUBJECT_VERIFY_PREFIX, 2), value=n, bound=min(len(a), len(b)))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _mix(seed: int, pos: int, prev: int, salt: int) -> int:
    h = b_hash_u32((seed ^ salt) & _M32)
    h = b_hash_u32(h ^ (pos & _M32))
    return b_hash_u32(h ^ ((prev * 0x9E3779B1) & _M32))


def _check_vocab(vocab: int, subject: int) -> None:
    if vocab < VOCAB_MIN:
        raise XlRuntimeError(ERR_BUILTIN, site=site(subject, 3), value=vocab, bound=VOCAB_MIN)


def b_target_token(seed: int, pos: int, prev: int, vocab: int) -> int:
    _check_vocab(vocab, SUBJECT_TARGET_TOKEN)
    return _mix(seed, pos, prev, 0x7A3C5E11) % vocab


def b_draft_token(seed: int, pos: int, prev: int, vocab: int, agree: float) -> int:
    """The target's token with probability `agree`, otherwise a different token."""
    _check_vocab(vocab, SUBJECT_DRAFT_TOKEN)  # (its own: the error names draft_token)
    target = b_target_token(seed, pos, prev, vocab)
    h = _mix(seed, pos, prev, 0x2C1B3C6D)
    u = (h >> 8) * (1.0 / 16777216.0)  # exact: 24-bit integer times a power of two, in [0, 1)
    if u < agree:
        return target
    return (target + 1 + (h % (vocab - 1))) % vocab


# The exact math functions (docs/semantics.md §16.1): defined, for floats and numpy arrays alike,
# in xlmath.py; the simulator's scalars are floats.
b_exp = xlmath.exp
b_log = xlmath.log
b_tanh = xlmath.tanh
b_sigmoid = xlmath.sigmoid
b_rsqrt = xlmath.rsqrt
