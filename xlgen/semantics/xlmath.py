"""The exact math functions of docs/semantics.md §16.1, in Python.

exp, log, tanh, sigmoid, sqrt, rsqrt: each is one fixed sequence of correctly rounded binary32
`+ - * /` (and sqrt), exact bit manipulation, compares and selects, so every backend gets the
same bits. The C++/CUDA twin is the "exact math functions" section of xl_runtime.cuh; the
functions below follow it line for line (scripts/math_ulp.py and tests/test_xlmath.py check it).

Each function takes
  - a Python float holding a binary32 value (the simulator's scalars): returns a Python float,
    computed in binary64 and rounded to binary32 after every operation (a binary64 + - * / or
    sqrt of binary32 operands, rounded once to binary32, is the correctly rounded binary32 result);
  - a numpy float32 array or scalar (lane-parallel code): returns the same shape, elementwise,
    with no Python loop over elements (numpy's float32 operations are correctly rounded binary32
    and never fused; every branch is computed and selected with masks).
A NaN result is the canonical NaN (0x7FC00000 in binary32).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from .ops import CANONICAL_NAN_BITS, f32_bits

__all__ = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "bits", "f32_bits_array"]

F = np.float32
_F32 = struct.Struct("<f")
_pack, _unpack = _F32.pack, _F32.unpack
_U32 = struct.Struct("<I")

# ---- constants: binary32 values, written as exact hex floats (docs/semantics.md §16.1) --------

EXP_MAX = float.fromhex("0x1.62e42ep+6")  # 88.72283: above, e^x rounds to infinity
EXP_MIN = -float.fromhex("0x1.9fe368p+6")  # -103.97208: below, e^x rounds to 0
LOG2E = float.fromhex("0x1.715476p+0")
ROUNDER = float.fromhex("0x1.8p+23")  # (t + 1.5*2^23) - 1.5*2^23: t rounded to an integer
LN2_HI = float.fromhex("0x1.62e4p-1")  # 15 significant bits: k * LN2_HI is exact for |k| <= 511
LN2_LO = float.fromhex("0x1.7f7d1cp-20")  # ln 2 - LN2_HI, rounded
EXP_Q = [float.fromhex(h) for h in ("0x1.6a1a5ap-10", "0x1.123fd2p-7", "0x1.555916p-5", "0x1.55548ap-3",
                                    "0x1.fffffcp-2")]  # q(r) = c6 r^4 + ... + c2, highest first
LOG_R = [float.fromhex(h) for h in ("0x1.31e67ap-2", "0x1.995e9cp-2", "0x1.55557ap-1")]  # L3, L2, L1
SQRT2_BITS = 0x3FB504F3  # the binary32 just below sqrt(2)
TANH_SMALL = 0.75
TANH_ONE = 10.0
TANH_P = [float.fromhex(h) for h in ("-0x1.4d2a1cp-11", "0x1.85ec5ap-9", "-0x1.19d308p-7", "0x1.65444ep-6",
                                     "-0x1.ba0a08p-5", "0x1.1110cap-3", "-0x1.555554p-2")]  # P(z), highest first

# numpy twins of the constants
_C = {name: F(value) for name, value in dict(
    EXP_MAX=EXP_MAX, EXP_MIN=EXP_MIN, LOG2E=LOG2E, ROUNDER=ROUNDER, LN2_HI=LN2_HI, LN2_LO=LN2_LO,
    TANH_SMALL=TANH_SMALL, TANH_ONE=TANH_ONE).items()}
_EXP_Q = [F(c) for c in EXP_Q]
_LOG_R = [F(c) for c in LOG_R]
_TANH_P = [F(c) for c in TANH_P]
_ONE, _TWO, _HALF, _ZERO = F(1.0), F(2.0), F(0.5), F(0.0)
_NAN = np.array(CANONICAL_NAN_BITS, dtype=np.uint32).view(np.float32)[()]


def _r(v: float) -> float:
    """Round a binary64 value to binary32 (to nearest, ties to even)."""
    try:
        return _unpack(_pack(v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _float_bits(x: float) -> int:
    return _U32.unpack(_pack(x))[0]


def _bits_float(b: int) -> float:
    return _unpack(_U32.pack(b))[0]


def bits(x: float) -> int:
    """A scalar result's binary32 bits (NaN canonical)."""
    return f32_bits(x)


def f32_bits_array(a) -> np.ndarray:
    """An array result's binary32 bits (NaN canonical)."""
    a = np.asarray(a, dtype=np.float32)
    return np.where(np.isnan(a), np.uint32(CANONICAL_NAN_BITS), a.view(np.uint32))


def _pow2(k) -> np.ndarray:
    """2^k as binary32, for integer arrays -126 <= k <= 127 (built from its bits)."""
    return ((k + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)


def _vectorised(fn, x):
    a = np.asarray(x, dtype=np.float32)
    with np.errstate(all="ignore"):
        y = fn(a.reshape(-1)).reshape(a.shape)
    return y[()] if a.ndim == 0 else y


def _dispatch(scalar, vector, x):
    if isinstance(x, (float, int)) and not isinstance(x, (bool, np.generic)):
        return scalar(float(x))
    return _vectorised(vector, x)


# ---- exp --------------------------------------------------------------------------------------


def _exp_s(x: float) -> float:
    if x != x:
        return math.nan
    if x > EXP_MAX:
        return math.inf
    if x < EXP_MIN:
        return 0.0
    t = _r(x * LOG2E)
    kf = _r(_r(t + ROUNDER) - ROUNDER)
    rh = _r(x - _r(kf * LN2_HI))  # exact
    m = _r(kf * LN2_LO)
    r = _r(rh - m)
    c = _r(_r(rh - r) - m)  # what rounding r lost
    q = EXP_Q[0]
    for coef in EXP_Q[1:]:
        q = _r(coef + _r(r * q))
    h = _r(1.0 + r)
    l = _r(_r(1.0 - h) + r)  # 1 + r = h + l exactly
    p = _r(h + _r(l + _r(_r(_r(r * r) * q) + c)))
    k = int(kf)
    if k > 127:
        return _r(_r(p * 2.0 ** 127) * 2.0)
    if k < -126:
        return _r(_r(p * 2.0 ** (k + 64)) * 2.0 ** -64)
    return _r(p * 2.0 ** k)


def _exp_v(x: np.ndarray) -> np.ndarray:
    nan, big, small = x != x, x > _C["EXP_MAX"], x < _C["EXP_MIN"]
    x = np.where(nan | big | small, _ZERO, x)
    t = x * _C["LOG2E"]
    kf = (t + _C["ROUNDER"]) - _C["ROUNDER"]
    rh = x - kf * _C["LN2_HI"]
    m = kf * _C["LN2_LO"]
    r = rh - m
    c = (rh - r) - m
    q = np.full_like(r, _EXP_Q[0])
    for coef in _EXP_Q[1:]:
        q = coef + r * q
    h = _ONE + r
    l = (_ONE - h) + r
    p = h + (l + ((r * r) * q + c))
    k = kf.astype(np.int32)
    high, low = k > 127, k < -126
    y = p * _pow2(np.where(high, 127, np.where(low, k + 64, k)))
    y = np.where(high, y * _TWO, np.where(low, y * F(2.0 ** -64), y))
    return np.where(nan, _NAN, np.where(big, F(np.inf), np.where(small, _ZERO, y)))


def exp(x):
    """e^x (docs/semantics.md §16.1)."""
    return _dispatch(_exp_s, _exp_v, x)


# ---- log --------------------------------------------------------------------------------------


def _log_s(x: float) -> float:
    if not x >= 0.0:
        return math.nan
    if x == 0.0:
        return -math.inf
    if x == math.inf:
        return math.inf
    e = 0
    if x < 2.0 ** -126:
        x = _r(x * 2.0 ** 23)
        e = -23
    b = _float_bits(x)
    e += (b >> 23) - 127
    b = (b & 0x7FFFFF) | 0x3F800000
    if b > SQRT2_BITS:
        b -= 0x800000
        e += 1
    f = _r(_bits_float(b) - 1.0)
    s = _r(f / _r(2.0 + f))
    z = _r(s * s)
    R = LOG_R[0]
    for c in LOG_R[1:]:
        R = _r(c + _r(z * R))
    R = _r(z * R)
    hfsq = _r(_r(0.5 * f) * f)
    ef = float(e)
    lo = _r(_r(s * _r(hfsq + R)) + _r(ef * LN2_LO))
    return _r(_r(ef * LN2_HI) - _r(_r(hfsq - lo) - f))


def _log_v(x: np.ndarray) -> np.ndarray:
    nan, zero, inf = ~(x >= _ZERO), x == _ZERO, x == F(np.inf)
    x = np.where(nan | zero | inf, _ONE, x)
    sub = x < F(2.0 ** -126)
    x = np.where(sub, x * F(2.0 ** 23), x)
    e = np.where(sub, -23, 0).astype(np.int32)
    b = x.view(np.uint32)
    e = e + (b >> np.uint32(23)).astype(np.int32) - 127
    b = (b & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    above = b > np.uint32(SQRT2_BITS)
    b = np.where(above, b - np.uint32(0x800000), b)
    e = e + above
    f = b.view(np.float32) - _ONE
    s = f / (_TWO + f)
    z = s * s
    R = np.full_like(z, _LOG_R[0])
    for c in _LOG_R[1:]:
        R = c + z * R
    R = z * R
    hfsq = (_HALF * f) * f
    ef = e.astype(np.float32)
    lo = s * (hfsq + R) + ef * _C["LN2_LO"]
    y = ef * _C["LN2_HI"] - ((hfsq - lo) - f)
    return np.where(nan, _NAN, np.where(zero, F(-np.inf), np.where(inf, F(np.inf), y)))


def log(x):
    """The natural logarithm (docs/semantics.md §16.1)."""
    return _dispatch(_log_s, _log_v, x)


# ---- tanh -------------------------------------------------------------------------------------


def _tanh_s(x: float) -> float:
    if x != x:
        return math.nan
    a = abs(x)
    if a < TANH_SMALL:
        z = _r(a * a)
        P = TANH_P[0]
        for c in TANH_P[1:]:
            P = _r(c + _r(z * P))
        y = _r(a + _r(a * _r(z * P)))
    elif a < TANH_ONE:
        y = _r(1.0 - _r(2.0 / _r(_exp_s(_r(a + a)) + 1.0)))
    else:
        y = 1.0
    return math.copysign(y, x)


def _tanh_v(x: np.ndarray) -> np.ndarray:
    nan = x != x
    a = np.abs(x)
    small, mid = a < _C["TANH_SMALL"], (a >= _C["TANH_SMALL"]) & (a < _C["TANH_ONE"])
    z = a * a
    P = np.full_like(z, _TANH_P[0])
    for c in _TANH_P[1:]:
        P = c + z * P
    y_small = a + a * (z * P)
    y_mid = _ONE - _TWO / (_exp_v(np.where(mid, a + a, _ZERO)) + _ONE)
    y = np.where(small, y_small, np.where(mid, y_mid, _ONE))
    return np.where(nan, _NAN, np.copysign(y, x))


def tanh(x):
    """The hyperbolic tangent (docs/semantics.md §16.1)."""
    return _dispatch(_tanh_s, _tanh_v, x)


# ---- sigmoid ----------------------------------------------------------------------------------


def _sigmoid_s(x: float) -> float:
    if x != x:
        return math.nan
    pos = x >= 0.0
    e = _exp_s(_r(0.0 - x) if pos else x)
    d = _r(1.0 + e)
    dl = _r(_r(1.0 - d) + e)  # d + dl = 1 + e exactly
    q = _r((1.0 if pos else e) / d)
    return _r(q - _r(_r(q * dl) / d))


def _sigmoid_v(x: np.ndarray) -> np.ndarray:
    nan, pos = x != x, x >= _ZERO
    e = _exp_v(np.where(pos, _ZERO - x, x))
    d = _ONE + e
    dl = (_ONE - d) + e
    q = np.where(pos, _ONE, e) / d
    return np.where(nan, _NAN, q - (q * dl) / d)


def sigmoid(x):
    """1 / (1 + e^-x) (docs/semantics.md §16.1)."""
    return _dispatch(_sigmoid_s, _sigmoid_v, x)


# ---- sqrt, rsqrt ------------------------------------------------------------------------------


def _sqrt_s(x: float) -> float:
    if not x >= 0.0:
        return math.nan
    return _r(math.sqrt(x))  # sqrt(-0.0) is -0.0


def _sqrt_v(x: np.ndarray) -> np.ndarray:
    return np.where(x >= _ZERO, np.sqrt(x), _NAN)


def sqrt(x):
    """The correctly rounded square root; sqrt(-0) = -0, sqrt(x < 0) = NaN."""
    return _dispatch(_sqrt_s, _sqrt_v, x)


def _rsqrt_s(x: float) -> float:
    if not x >= 0.0:
        return math.nan
    s = _r(math.sqrt(x))
    if s == 0.0:
        return math.copysign(math.inf, s)
    return _r(1.0 / s)


def _rsqrt_v(x: np.ndarray) -> np.ndarray:
    return np.where(x >= _ZERO, _ONE / np.sqrt(x), _NAN)


def rsqrt(x):
    """1 / sqrt(x), rounded twice (after the square root, after the division)."""
    return _dispatch(_rsqrt_s, _rsqrt_v, x)
