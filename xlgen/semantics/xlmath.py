"""Exact math builtins in the simulator: exp, log, tanh, rsqrt (docs/semantics.md §16.1).

The same sequence of correctly rounded binary32 operations as xl_exp, xl_log, xl_tanh and
xl_rsqrt in xl_runtime.cuh, on numpy float32 arrays (numpy never fuses a multiply-add), so
the simulator, the CPU build and the GPU give the same bits; tests/test_xlmath.py checks it
against the compiled C++ on a million inputs, scripts/math_ulp.py on all 2^32. Branches
are computed for every element and selected with np.where. Each function takes a numpy
float32 array (lanes loops) or a Python float (scalar code) and returns the same kind.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _c(bits: int) -> np.float32:
    return np.uint32(bits).view(np.float32)


_EXP_MAX = _c(0x42B17217)  # the largest x with exp(x) < FLT_MAX
_LOG2E, _LN2_HI, _LN2_LO = _c(0x3FB8AA3B), _c(0x3F317200), _c(0x35BFBE8E)
_EXP_POLY = [_c(b) for b in (0x39500D01, 0x3AB60B61, 0x3C088889, 0x3D2AAAAB, 0x3E2AAAAB, 0x3F000000, 0x3F800000,
                             0x3F800000)]
_SQRT2_DOWN, _MIN_NORMAL, _TWO23 = _c(0x3FB504F3), _c(0x00800000), _c(0x4B000000)
_LG1, _LG2, _LG3, _LG4 = _c(0x3F2AAAAA), _c(0x3ECCCE13), _c(0x3E91E9EE), _c(0x3E789E26)
_LOG_LN2_HI, _LOG_LN2_LO = _c(0x3F317180), _c(0x3717F7D1)
_TANH_POLY = [_c(b) for b in (0xB97ABEBC, 0x3A1AAC12, 0xBABED1B2, 0x3B6B69E8, 0xBC11371B, 0x3CB327A4, 0xBD5D0DD1,
                              0x3E088889, 0xBEAAAAAB, 0x3F800000)]
_TANH_TINY = _c(0x39800000)  # 2^-12


def _array(x):
    """(float32 array, was it a scalar)."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float32, copy=False), False
    return np.array([x], dtype=np.float32), True


def _result(values: np.ndarray, scalar: bool):
    return float(values[0]) if scalar else values


def _pow2(k: np.ndarray) -> np.ndarray:
    """2^k for -126 <= k <= 127 (other k: any value; the caller selects it away)."""
    k = np.clip(k, -126, 127).astype(np.int64)
    return ((k + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)


def _horner(x: np.ndarray, coefficients) -> np.ndarray:
    p = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        p = p * x + c
    return p


def _exp(x: np.ndarray) -> np.ndarray:
    t = x * _LOG2E
    k = (t + np.where(t >= 0, F32(0.5), F32(-0.5))).astype(np.float64)
    k = np.where(np.isfinite(k), k, 0).astype(np.int64).astype(np.int32)  # trunc, as (int32_t) does
    kf = k.astype(np.float32)
    r = x - kf * _LN2_HI
    r = r - kf * _LN2_LO
    p = _horner(r, _EXP_POLY)
    high = (p * _pow2(np.full_like(k, 127))) * _pow2(k - 127)
    low = (p * _pow2(k + 64)) * _pow2(np.full_like(k, -64))
    out = np.where(k > 127, high, np.where(k < -126, low, p * _pow2(k)))
    out = np.where(x < F32(-104.0), F32(0.0), out)
    out = np.where(x > _EXP_MAX, F32(np.inf), out)
    return np.where(np.isnan(x), F32(np.nan), out)


def _log(x: np.ndarray) -> np.ndarray:
    sub = x < _MIN_NORMAL
    y = np.where(sub, x * _TWO23, x)
    bits = y.view(np.uint32)
    e = (bits >> np.uint32(23)).astype(np.int32) - 127 - np.where(sub, 23, 0).astype(np.int32)
    m = ((bits & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(np.float32)
    big = m > _SQRT2_DOWN
    m = np.where(big, m * F32(0.5), m)
    e = e + big.astype(np.int32)
    f = m - F32(1.0)
    s = f / (F32(2.0) + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * _LG4)
    t2 = z * (_LG1 + w * _LG3)
    R = t2 + t1
    hfsq = (F32(0.5) * f) * f
    dk = e.astype(np.float32)
    lo = s * (hfsq + R) + dk * _LOG_LN2_LO
    out = dk * _LOG_LN2_HI - ((hfsq - lo) - f)
    out = np.where(x == F32(np.inf), F32(np.inf), out)
    out = np.where(x == 0, F32(-np.inf), out)
    return np.where(np.isnan(x) | (x < 0), F32(np.nan), out)


def _tanh(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    series = a * _horner(a * a, _TANH_POLY)
    via_exp = F32(1.0) - F32(2.0) / (_exp(F32(2.0) * a) + F32(1.0))
    t = np.where(a > F32(9.0), F32(1.0), np.where(a < F32(0.55), series, via_exp))
    out = np.where(x < 0, -t, t)
    out = np.where(a < _TANH_TINY, x, out)
    return np.where(np.isnan(x), F32(np.nan), out)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return F32(1.0) / np.sqrt(x)


def _public(fn):
    def apply(x):
        values, scalar = _array(x)
        with np.errstate(all="ignore"):  # overflow to inf, NaN from inf - inf: meant
            return _result(fn(values), scalar)

    apply.__name__ = fn.__name__.lstrip("_")
    apply.__doc__ = f"{apply.__name__} of a float32 array or a Python float (docs/semantics.md §16.1)."
    return apply


exp = _public(_exp)
log = _public(_log)
tanh = _public(_tanh)
rsqrt = _public(_rsqrt)
