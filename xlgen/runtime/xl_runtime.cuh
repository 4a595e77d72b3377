// xlgen runtime: the exact semantics of docs/semantics.md for C++ and CUDA.
// The Python twin is xlgen/semantics/ops.py (+ builtins.py); keep them in step.
// Compiles three ways: nvcc/NVRTC for the GPU, and the system C++ compiler for
// the CPU build, where the __device__ decorations are mapped away below.
#pragma once

#if defined(__CUDACC_RTC__)
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
#else
#include <stdint.h>
#include <math.h>
#include <string.h>
#endif

#if defined(__CUDACC__)
#define XL_HD __device__ __forceinline__  // the GPU build calls these from device code only
#define XL_DEVICE __device__ __forceinline__
// Code that rarely runs (a failure's merge), out of line: one copy for the kernel, where a copy
// inlined at every loop and reduction made its code larger (docs/benchmarks.md, seventeenth session).
#define XL_COLD __device__ __noinline__
#define XL_ON_GPU 1
#else
#define XL_HD inline
#define XL_DEVICE inline
#define XL_COLD inline
#define XL_ON_GPU 0
#endif
// A per-request stage's function: inlined into the kernel, or with -DXL_STAGE_CALLS=1 a function
// of its own, whose registers are allocated apart from the other stages' within the kernel's
// budget (an A/B switch: docs/benchmarks.md, twenty-first session).
#if XL_ON_GPU && defined(XL_STAGE_CALLS) && XL_STAGE_CALLS
#define XL_STAGE __device__ __noinline__
#else
#define XL_STAGE XL_DEVICE
#endif

#if XL_ON_GPU  // NVRTC has no __builtin_huge_valf / __builtin_nanf
#define XL_INF (__int_as_float(0x7F800000))
#define XL_NAN (__int_as_float(0x7FC00000))
#else
#define XL_INF (__builtin_huge_valf())
#define XL_NAN (__builtin_nanf(""))
#endif

// Runtime error codes (ops.py ERR_*).
enum { XL_ERR_DIV_ZERO = 1, XL_ERR_INDEX = 2, XL_ERR_SHIFT = 3, XL_ERR_CAST = 4, XL_ERR_BUILTIN = 5, XL_ERR_WATCHDOG = 6,
       XL_ERR_CONFLICT = 7, XL_ERR_NOT_OWNER = 8 };

// How a 32-bit word reads: collectives' contributions, and an error's value (below).
enum { XL_WORD_I = 0, XL_WORD_U = 1, XL_WORD_F = 2 };
// Subject ids of the builtins that check an argument (ops.py SUBJECT_*, core/subjects.py).
enum { XL_SUBJECT_VERIFY_PREFIX = 2, XL_SUBJECT_TARGET_TOKEN = 3, XL_SUBJECT_DRAFT_TOKEN = 4 };
constexpr int32_t XL_SITE_SHIFT = 16;  // a site: subject << XL_SITE_SHIFT | position
// Here a site also holds the value's type (bits 14-15), so that the record's word (how the value
// reads) is worked out when the record is written (xl_error_word) and no register carries it.
constexpr int32_t XL_SITE_TYPE_SHIFT = 14;
constexpr int32_t XL_SITE_POSITION = (1 << XL_SITE_TYPE_SHIFT) - 1;
enum { XL_SITE_I32 = 0, XL_SITE_U32 = 1 << XL_SITE_TYPE_SHIFT, XL_SITE_F32 = 2 << XL_SITE_TYPE_SHIFT };
// Positions of DIV_ZERO and SHIFT (the operator) and CAST (the target type).
enum { XL_OP_DIV = 0, XL_OP_REM = 1, XL_OP_SHL = 0, XL_OP_SHR = 1, XL_TO_I32 = 0, XL_TO_U32 = 1 };

// A statement's first runtime error. `key` is the failing operation's position
// in left-to-right evaluation order, so the earliest error wins whatever order
// the compiler evaluated the operands in (see xlgen/backends/emit_cpp.py).
// What failed (docs/semantics.md §12, ops.XlRuntimeError): `site` (the subject: array, tensor,
// pool, builtin; the position: dimension, parameter, operator; the value's type), the value
// out of range and the bound it broke. Set only on the failing branch of a check: the checks
// themselves are what they were, and these fields are dead unless `code` is set.
struct XlErr {
    int32_t code;
    int32_t line;
    int32_t key;
    int32_t site;
    uint32_t value;
    uint32_t bound;
};

XL_HD void xl_err_set(XlErr& e, int32_t key, int32_t code, int32_t line, int32_t site = 0, uint32_t value = 0u,
                      uint32_t bound = 0u) {
    if (e.code == 0 || key < e.key) {
        e.code = code;
        e.line = line;
        e.key = key;
        e.site = site;
        e.value = value;
        e.bound = bound;
    }
}
// An integer value out of range, of the value's type.
XL_HD void xl_err_int(XlErr& e, int32_t key, int32_t code, int32_t line, int32_t site, int32_t value, int32_t bound) {
    xl_err_set(e, key, code, line, site | XL_SITE_I32, (uint32_t)value, (uint32_t)bound);
}
XL_HD void xl_err_int(XlErr& e, int32_t key, int32_t code, int32_t line, int32_t site, uint32_t value, int32_t bound) {
    xl_err_set(e, key, code, line, site | XL_SITE_U32, value, (uint32_t)bound);
}

// The test after a statement that may fail (emit_cpp.py): true when it did. Otherwise `code` is
// 0 and the rest is reset to constants, which tells the compiler that what a check records is
// dead on the way on (else a loop around the statement would carry it in registers).
XL_HD bool xl_failed(XlErr& e) {
    if (e.code) return true;
    e = XlErr{0, 0, 0};
    return false;
}

// How an error record's value reads (ops.value_word): XL_WORD_I a negative integer, XL_WORD_U
// one at or above zero, XL_WORD_F an f32.
XL_HD uint32_t xl_error_word(const XlErr& e) {
    const int32_t type = e.site & (3 << XL_SITE_TYPE_SHIFT);
    if (type == XL_SITE_F32) return XL_WORD_F;
    return type == XL_SITE_I32 && (int32_t)e.value < 0 ? XL_WORD_I : XL_WORD_U;
}

// A helper function failed: report its error to the caller's statement under the call's key.
template <typename T>
XL_HD T xl_raise(XlErr& caller, int32_t key, const XlErr& inner) {
    xl_err_set(caller, key, inner.code, inner.line, inner.site, inner.value, inner.bound);
    return T();
}

// ---- integers: two's complement wrap-around, C-style truncating division ----------------

XL_HD int32_t xl_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
XL_HD int32_t xl_sub(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
XL_HD int32_t xl_mul(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
XL_HD int32_t xl_neg(int32_t a) { return (int32_t)(0u - (uint32_t)a); }
XL_HD uint32_t xl_add(uint32_t a, uint32_t b) { return a + b; }
XL_HD uint32_t xl_sub(uint32_t a, uint32_t b) { return a - b; }
XL_HD uint32_t xl_mul(uint32_t a, uint32_t b) { return a * b; }

// `&` and `has` through calls: g++ folds `x == C1 && (x & M) == C2` and, when the two tests
// cannot both hold, stops on an unconditional "mutually exclusive equal-tests" warning (an
// error under -Werror) though the program is valid. A call hides the pattern and inlines away.
XL_HD int32_t xl_band(int32_t a, int32_t b) { return a & b; }
XL_HD uint32_t xl_band(uint32_t a, uint32_t b) { return a & b; }
XL_HD bool xl_has(uint32_t a, uint32_t b) { return (a & b) == b; }
// `==` and `!=` too: `(x ^ x) != (c && x == C ? x : 1u)` folds to `x != C || x != 0` (fuzz seed 6541).
XL_HD bool xl_eq(int32_t a, int32_t b) { return a == b; }
XL_HD bool xl_eq(uint32_t a, uint32_t b) { return a == b; }
XL_HD bool xl_ne(int32_t a, int32_t b) { return a != b; }
XL_HD bool xl_ne(uint32_t a, uint32_t b) { return a != b; }
// bool too: `p || (C != p)` with a constant C is a warning (-Werror) as operators (fuzz seed 956325).
// (bool fields are stored as uint32_t, so these take bool by name, not by overload)
XL_HD bool xl_beq(bool a, bool b) { return a == b; }
XL_HD bool xl_bne(bool a, bool b) { return a != b; }

// Division by zero records the operator (the position) and the dividend (the value).
XL_HD int32_t xl_div(XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if (b == 0) { xl_err_int(e, k, XL_ERR_DIV_ZERO, line, XL_OP_DIV, a, 0); return 0; }
    if (b == -1) return xl_neg(a);  // INT_MIN / -1 wraps instead of trapping
    return a / b;
}
XL_HD int32_t xl_rem(XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if (b == 0) { xl_err_int(e, k, XL_ERR_DIV_ZERO, line, XL_OP_REM, a, 0); return 0; }
    if (b == -1) return 0;
    return a % b;
}
XL_HD uint32_t xl_div(XlErr& e, int32_t k, int32_t line, uint32_t a, uint32_t b) {
    if (b == 0) { xl_err_int(e, k, XL_ERR_DIV_ZERO, line, XL_OP_DIV, a, 0); return 0; }
    return a / b;
}
XL_HD uint32_t xl_rem(XlErr& e, int32_t k, int32_t line, uint32_t a, uint32_t b) {
    if (b == 0) { xl_err_int(e, k, XL_ERR_DIV_ZERO, line, XL_OP_REM, a, 0); return 0; }
    return a % b;
}

// Shift amounts may be i32 or u32; outside 0..31 is a runtime error (the amount is its value).
XL_HD bool xl_shift_ok(XlErr& e, int32_t k, int32_t line, int32_t op, int32_t n) {
    if (n < 0 || n > 31) { xl_err_int(e, k, XL_ERR_SHIFT, line, op, n, 0); return false; }
    return true;
}
XL_HD bool xl_shift_ok(XlErr& e, int32_t k, int32_t line, int32_t op, uint32_t n) {
    if (n > 31u) { xl_err_int(e, k, XL_ERR_SHIFT, line, op, n, 0); return false; }
    return true;
}
template <typename N>
XL_HD int32_t xl_shl(XlErr& e, int32_t k, int32_t line, int32_t a, N n) {
    return xl_shift_ok(e, k, line, XL_OP_SHL, n) ? (int32_t)((uint32_t)a << (uint32_t)n) : 0;
}
template <typename N>
XL_HD uint32_t xl_shl(XlErr& e, int32_t k, int32_t line, uint32_t a, N n) {
    return xl_shift_ok(e, k, line, XL_OP_SHL, n) ? a << (uint32_t)n : 0u;
}
template <typename N>
XL_HD int32_t xl_shr(XlErr& e, int32_t k, int32_t line, int32_t a, N n) {
    return xl_shift_ok(e, k, line, XL_OP_SHR, n) ? a >> (uint32_t)n : 0;  // arithmetic on every supported compiler
}
template <typename N>
XL_HD uint32_t xl_shr(XlErr& e, int32_t k, int32_t line, uint32_t a, N n) {
    return xl_shift_ok(e, k, line, XL_OP_SHR, n) ? a >> (uint32_t)n : 0u;
}

XL_HD int32_t xl_abs(int32_t a) { return a < 0 ? xl_neg(a) : a; }

template <typename T>
XL_HD T xl_min(T a, T b) { return (b < a) ? b : a; }
template <typename T>
XL_HD T xl_max(T a, T b) { return (b > a) ? b : a; }
#if XL_ON_GPU
// f32: the comparison and the select spelled out in PTX. With a literal operand nvcc compiled
// `(b < a) ? b : a` into the hardware's FMNMX, which orders -0.0 below +0.0: min(0.0, -0.0) gave
// -0.0 on the GPU where the language (and the simulator, the CPU build) give the first operand,
// +0.0 (fuzz seed 6390043: a quotient's infinity of the wrong sign; tests/test_semantics_backends.py).
// ptxas still takes FMNMX where the bits are the same (max(0.0, x), min(x, 1.0)).
template <>
XL_HD float xl_min(float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %2, %1;\n\tselp.f32 %0, %2, %1, p;\n\t}" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
template <>
XL_HD float xl_max(float a, float b) {
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.gt.f32 p, %2, %1;\n\tselp.f32 %0, %2, %1, p;\n\t}" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
#endif
template <typename T>
XL_HD T xl_clamp(T x, T lo, T hi) { return xl_min(xl_max(x, lo), hi); }

// Checked array index: out of range records INDEX (the site: the array and the dimension; the
// index; the length) and yields 0, a safe index.
XL_HD int32_t xl_idx(XlErr& e, int32_t k, int32_t line, int32_t i, int32_t n, int32_t site) {
    if (i < 0 || i >= n) { xl_err_int(e, k, XL_ERR_INDEX, line, site, i, n); return 0; }
    return i;
}
XL_HD int32_t xl_idx(XlErr& e, int32_t k, int32_t line, uint32_t i, int32_t n, int32_t site) {  // a u32 index is never negative
    if (i >= (uint32_t)n) { xl_err_int(e, k, XL_ERR_INDEX, line, site, i, n); return 0; }
    return (int32_t)i;
}

// A shared-state element read ahead of the code that uses it (emit_cpp._reads_ahead): a[i], or
// T() where i is out of range (the use then raises the index's error and drops the value).
template <typename T, int N>
XL_HD T xl_peek(const T (&a)[N], int64_t i) { return (uint64_t)i < (uint64_t)N ? a[i] : T(); }
// Such a read's use: its index's check (for the error it may raise), then the value read ahead.
template <typename T>
XL_HD T xl_then(int32_t, T v) { return v; }

// Checks proved unable to fail (xlgen/backends/ranges.py) are not emitted. Those proved only on
// a lanes loop's fast path (its range within the bound it was proved for) take the body's
// XlCheck: the loop runs the body with XlCheck<false> when the bound holds, else XlCheck<true>.
template <bool On> struct XlCheck { static constexpr bool on = On; };
#define XL_CHECKS(c) decltype(c)::on
template <bool On>
XL_HD int32_t xl_idx_v(XlCheck<On>, XlErr& e, int32_t k, int32_t line, int32_t i, int32_t n, int32_t site) {
    if constexpr (On) return xl_idx(e, k, line, i, n, site);
    return i;
}
template <bool On>
XL_HD int32_t xl_idx_v(XlCheck<On>, XlErr& e, int32_t k, int32_t line, uint32_t i, int32_t n, int32_t site) {
    if constexpr (On) return xl_idx(e, k, line, i, n, site);
    return (int32_t)i;
}
// Integer division by a divisor proved non-zero (INT_MIN / -1 still wraps).
XL_HD int32_t xl_div_nz(int32_t a, int32_t b) { return b == -1 ? xl_neg(a) : a / b; }
XL_HD int32_t xl_rem_nz(int32_t a, int32_t b) { return b == -1 ? 0 : a % b; }
template <bool On>
XL_HD int32_t xl_div_v(XlCheck<On>, XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if constexpr (On) return xl_div(e, k, line, a, b);
    return xl_div_nz(a, b);
}
template <bool On>
XL_HD int32_t xl_rem_v(XlCheck<On>, XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if constexpr (On) return xl_rem(e, k, line, a, b);
    return xl_rem_nz(a, b);
}

// A pool access's owner check (docs/semantics.md §13.3), after its indices' checks: `page` (in
// range: checked, or 0 after a failed check) must belong to the request. Yields the page. The
// error names the pool (`site`), the page and its owner.
XL_HD int32_t xl_pool_page(XlErr& e, int32_t k, int32_t line, int32_t site, const int32_t* owner, int32_t req_id,
                           int32_t page) {
    const int32_t holder = owner[page];
    if (holder != req_id) xl_err_int(e, k, XL_ERR_NOT_OWNER, line, site, page, holder);
    return page;
}

// ---- binary32: one rounding per operation, never a fused multiply-add ------------------

#if XL_ON_GPU
XL_DEVICE float xl_fadd(float a, float b) { return __fadd_rn(a, b); }
XL_DEVICE float xl_fsub(float a, float b) { return __fsub_rn(a, b); }
XL_DEVICE float xl_fmul(float a, float b) { return __fmul_rn(a, b); }
XL_DEVICE float xl_fdiv(float a, float b) { return __fdiv_rn(a, b); }
XL_DEVICE float xl_fsqrt(float a) { return __fsqrt_rn(a); }
XL_DEVICE float xl_i2f(int32_t a) { return __int2float_rn(a); }
XL_DEVICE float xl_u2f(uint32_t a) { return __uint2float_rn(a); }
XL_DEVICE uint32_t xl_float_bits(float x) { return __float_as_uint(x); }
#else
// The CPU build is compiled with -ffp-contract=off, so these are single IEEE operations.
inline float xl_fadd(float a, float b) { return a + b; }
inline float xl_fsub(float a, float b) { return a - b; }
inline float xl_fmul(float a, float b) { return a * b; }
inline float xl_fdiv(float a, float b) { return a / b; }
inline float xl_fsqrt(float a) { return sqrtf(a); }
inline float xl_i2f(int32_t a) { return (float)a; }
inline float xl_u2f(uint32_t a) { return (float)a; }
inline uint32_t xl_float_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
#endif

XL_HD float xl_fabs(float a) { return fabsf(a); }

XL_HD float xl_bits_float(uint32_t w) {
#if XL_ON_GPU
    return __uint_as_float(w);
#else
    float f;
    memcpy(&f, &w, 4);
    return f;
#endif
}

// -a: the sign bit flipped, always. (Found by fuzzing on the GPU: NVRTC compiled
// `-(c ? 1.0f : 0.0f)` to +0.0 for a false c, where IEEE negation gives -0.0.)
#if XL_ON_GPU
XL_DEVICE float xl_fneg(float a) { return __uint_as_float(__float_as_uint(a) ^ 0x80000000u); }
#else
inline float xl_fneg(float a) { return -a; }
#endif

// Traces store the canonical NaN so that every backend writes the same bits.
XL_HD uint32_t xl_f32_bits(float x) { return x != x ? 0x7FC00000u : xl_float_bits(x); }

XL_HD int32_t xl_f2i(XlErr& e, int32_t k, int32_t line, float x) {
    // No binary32 lies strictly between -2^31 - 1 and -2^31, so `>=` admits exactly INT_MIN.
    if (!(x >= -2147483648.0f && x < 2147483648.0f)) {
        xl_err_set(e, k, XL_ERR_CAST, line, XL_TO_I32 | XL_SITE_F32, xl_f32_bits(x));
        return 0;
    }
    return (int32_t)x;
}
XL_HD uint32_t xl_f2u(XlErr& e, int32_t k, int32_t line, float x) {
    if (!(x > -1.0f && x < 4294967296.0f)) {
        xl_err_set(e, k, XL_ERR_CAST, line, XL_TO_U32 | XL_SITE_F32, xl_f32_bits(x));
        return 0u;
    }
    return (uint32_t)x;
}

// ---- exact math functions (docs/semantics.md §16.1; Python: xlmath.py) --------------------
//
// Each is a fixed sequence of correctly rounded binary32 + - * / (xl_fadd ...: never fused,
// subnormals kept), exact bit manipulation, compares and selects: no libm, no binary64. Every
// backend running the same sequence gets the same bits. A NaN result is always 0x7FC00000.
// xlmath.py follows these lines step for step; tests/test_xlmath.py and scripts/math_ulp.py
// check that it does, and measure the error.

// exp(x) = 2^k * p: k = round(x / ln 2), r = x - k*LN2_HI - k*LN2_LO (k*LN2_HI and the first
// subtraction are exact; c is the second's rounding error), p = e^(r + c) = h + (l + (r^2*q(r) + c))
// with h + l = 1 + r exactly, q of degree 4; |r| <= 0.3466.
XL_HD float xl_math_exp(float x) {
    if (x != x) return XL_NAN;
    if (x > 0x1.62e42ep+6f) return XL_INF;      // 88.72283: above, e^x rounds to infinity
    if (x < -0x1.9fe368p+6f) return 0.0f;       // -103.97208: below, e^x rounds to 0 (and -inf)
    const float t = xl_fmul(x, 0x1.715476p+0f);  // x * log2(e)
    const float kf = xl_fsub(xl_fadd(t, 0x1.8p+23f), 0x1.8p+23f);  // t rounded to an integer (ties to even)
    const float rh = xl_fsub(x, xl_fmul(kf, 0x1.62e4p-1f));  // exact
    const float m = xl_fmul(kf, 0x1.7f7d1cp-20f);
    const float r = xl_fsub(rh, m);
    const float c = xl_fsub(xl_fsub(rh, r), m);  // what rounding r lost
    float q = 0x1.6a1a5ap-10f;
    q = xl_fadd(0x1.123fd2p-7f, xl_fmul(r, q));
    q = xl_fadd(0x1.555916p-5f, xl_fmul(r, q));
    q = xl_fadd(0x1.55548ap-3f, xl_fmul(r, q));
    q = xl_fadd(0x1.fffffcp-2f, xl_fmul(r, q));
    const float h = xl_fadd(1.0f, r);
    const float l = xl_fadd(xl_fsub(1.0f, h), r);  // 1 + r = h + l exactly
    const float p = xl_fadd(h, xl_fadd(l, xl_fadd(xl_fmul(xl_fmul(r, r), q), c)));
    const int32_t k = (int32_t)kf;  // -150 <= k <= 128
    if (k > 127) return xl_fmul(xl_fmul(p, 0x1p127f), 2.0f);
    if (k < -126) return xl_fmul(xl_fmul(p, xl_bits_float((uint32_t)(k + 64 + 127) << 23)), 0x1p-64f);  // one rounding, to a subnormal
    return xl_fmul(p, xl_bits_float((uint32_t)(k + 127) << 23));
}

// log(x) = e*ln 2 + log1p(f): x = 2^e * (1 + f), 1 + f in (sqrt(1/2), sqrt(2)] (subnormal x scaled by
// 2^23 first); s = f / (2 + f), z = s^2, R = z*(L1 + z*(L2 + z*L3)) ~ 2*atanh(s)/s - 2,
// log1p(f) = f - (f^2/2 - s*(f^2/2 + R)); e*LN2_HI is exact.
XL_HD float xl_math_log(float x) {
    if (!(x >= 0.0f)) return XL_NAN;  // NaN or negative (not -0)
    if (x == 0.0f) return xl_bits_float(0xFF800000u);  // -inf, built from its bits
    if (x == XL_INF) return XL_INF;
    int32_t e = 0;
    if (x < 0x1p-126f) {
        x = xl_fmul(x, 0x1p23f);  // exact
        e = -23;
    }
    uint32_t b = xl_float_bits(x);
    e += (int32_t)(b >> 23) - 127;
    b = (b & 0x7FFFFFu) | 0x3F800000u;  // 1 + f in [1, 2)
    if (b > 0x3FB504F3u) {              // above sqrt(2): halve it
        b -= 0x800000u;
        e += 1;
    }
    const float f = xl_fsub(xl_bits_float(b), 1.0f);  // exact
    const float s = xl_fdiv(f, xl_fadd(2.0f, f));
    const float z = xl_fmul(s, s);
    float R = 0x1.31e67ap-2f;
    R = xl_fadd(0x1.995e9cp-2f, xl_fmul(z, R));
    R = xl_fadd(0x1.55557ap-1f, xl_fmul(z, R));
    R = xl_fmul(z, R);
    const float hfsq = xl_fmul(xl_fmul(0.5f, f), f);
    const float ef = (float)e;  // exact
    const float lo = xl_fadd(xl_fmul(s, xl_fadd(hfsq, R)), xl_fmul(ef, 0x1.7f7d1cp-20f));
    return xl_fsub(xl_fmul(ef, 0x1.62e4p-1f), xl_fsub(xl_fsub(hfsq, lo), f));
}

// tanh(x) = sign(x) * y(|x|): a = |x|; a < 0.75: y = a + a*(z*P(z)), z = a^2, P of degree 6;
// a < 10: y = 1 - 2/(exp(2a) + 1) with xl_math_exp; otherwise y = 1.
XL_HD float xl_math_tanh(float x) {
    if (x != x) return XL_NAN;
    const uint32_t sign = xl_float_bits(x) & 0x80000000u;
    const float a = xl_bits_float(xl_float_bits(x) & 0x7FFFFFFFu);
    float y;
    if (a < 0.75f) {
        const float z = xl_fmul(a, a);
        float P = -0x1.4d2a1cp-11f;
        P = xl_fadd(0x1.85ec5ap-9f, xl_fmul(z, P));
        P = xl_fadd(-0x1.19d308p-7f, xl_fmul(z, P));
        P = xl_fadd(0x1.65444ep-6f, xl_fmul(z, P));
        P = xl_fadd(-0x1.ba0a08p-5f, xl_fmul(z, P));
        P = xl_fadd(0x1.1110cap-3f, xl_fmul(z, P));
        P = xl_fadd(-0x1.555554p-2f, xl_fmul(z, P));
        y = xl_fadd(a, xl_fmul(a, xl_fmul(z, P)));
    } else if (a < 10.0f) {
        y = xl_fsub(1.0f, xl_fdiv(2.0f, xl_fadd(xl_math_exp(xl_fadd(a, a)), 1.0f)));
    } else {
        y = 1.0f;
    }
    return xl_bits_float(xl_float_bits(y) | sign);
}

// sigmoid(x) = n / (1 + e) with e = exp(-|x|), n = 1 for x >= 0 and e below (no overflow; tiny results
// keep their precision): d + dl = 1 + e exactly, q = n / d, sigmoid = q - q*dl/d.
XL_HD float xl_math_sigmoid(float x) {
    if (x != x) return XL_NAN;
    const bool pos = x >= 0.0f;
    const float e = xl_math_exp(pos ? xl_fsub(0.0f, x) : x);
    const float d = xl_fadd(1.0f, e);
    const float dl = xl_fadd(xl_fsub(1.0f, d), e);
    const float q = xl_fdiv(pos ? 1.0f : e, d);
    return xl_fsub(q, xl_fdiv(xl_fmul(q, dl), d));
}

// sqrt(x): the correctly rounded IEEE square root; sqrt(-0) = -0, sqrt(x < 0) = NaN.
XL_HD float xl_math_sqrt(float x) {
    if (!(x >= 0.0f)) return XL_NAN;  // NaN or negative (not -0)
    return xl_fsqrt(x);
}

// rsqrt(x) = 1 / sqrt(x), two roundings: rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(+inf) = +0.
XL_HD float xl_math_rsqrt(float x) {
    if (!(x >= 0.0f)) return XL_NAN;
    return xl_fdiv(1.0f, xl_fsqrt(x));
}

XL_HD float xl_b_exp(XlErr&, int32_t, int32_t, float x) { return xl_math_exp(x); }
XL_HD float xl_b_log(XlErr&, int32_t, int32_t, float x) { return xl_math_log(x); }
XL_HD float xl_b_tanh(XlErr&, int32_t, int32_t, float x) { return xl_math_tanh(x); }
XL_HD float xl_b_sigmoid(XlErr&, int32_t, int32_t, float x) { return xl_math_sigmoid(x); }
XL_HD float xl_b_rsqrt(XlErr&, int32_t, int32_t, float x) { return xl_math_rsqrt(x); }

// ---- builtins of the prelude (xlgen/runtime/prelude.xl; Python: builtins.py) ----------

XL_HD uint32_t xl_hash(uint32_t x) {  // lowbias32
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

XL_HD uint32_t xl_b_hash_u32(XlErr&, int32_t, int32_t, uint32_t x) { return xl_hash(x); }

XL_HD uint32_t xl_mix(uint32_t seed, int32_t pos, int32_t prev, uint32_t salt) {
    uint32_t h = xl_hash(seed ^ salt);
    h = xl_hash(h ^ (uint32_t)pos);
    return xl_hash(h ^ ((uint32_t)prev * 0x9E3779B1u));
}

// A vocab below 2: BUILTIN, naming the builtin and its parameter 3 (builtins.py _check_vocab).
XL_HD bool xl_vocab_ok(XlErr& e, int32_t k, int32_t line, int32_t subject, int32_t vocab) {
    if (vocab < 2) { xl_err_int(e, k, XL_ERR_BUILTIN, line, subject << XL_SITE_SHIFT | 3, vocab, 2); return false; }
    return true;
}

XL_HD int32_t xl_b_target_token(XlErr& e, int32_t k, int32_t line, uint32_t seed, int32_t pos, int32_t prev, int32_t vocab) {
    if (!xl_vocab_ok(e, k, line, XL_SUBJECT_TARGET_TOKEN, vocab)) return 0;
    return (int32_t)(xl_mix(seed, pos, prev, 0x7A3C5E11u) % (uint32_t)vocab);
}

XL_HD int32_t xl_b_draft_token(XlErr& e, int32_t k, int32_t line, uint32_t seed, int32_t pos, int32_t prev, int32_t vocab, float agree) {
    // Not `if (e.code)` after a call: `e` is the whole statement's error, and may already hold one
    // from an operand the compiler evaluated first (a later key). This call did not fail, so it must
    // not return a substitute value, which could raise a spurious earlier error (`x % 0`).
    if (!xl_vocab_ok(e, k, line, XL_SUBJECT_DRAFT_TOKEN, vocab)) return 0;
    const int32_t target = (int32_t)(xl_mix(seed, pos, prev, 0x7A3C5E11u) % (uint32_t)vocab);  // target_token's
    const uint32_t h = xl_mix(seed, pos, prev, 0x2C1B3C6Du);
    const float u = (float)(h >> 8) * (1.0f / 16777216.0f);  // exact: a 24-bit integer times 2^-24
    if (u < agree) return target;
    return (int32_t)(((uint32_t)target + 1u + h % (uint32_t)(vocab - 1)) % (uint32_t)vocab);
}

// Longest prefix with a[i] == b[i], i < n. On the GPU all 32 lanes of the
// request's warp call this together: lane j compares position 32*c + j of chunk
// c, one __ballot_sync per chunk, so the cost is ceil(n/32) ballots whatever
// the acceptance rate. The CPU build scans.
XL_DEVICE int32_t xl_b_verify_prefix(XlErr& e, int32_t k, int32_t line, const int32_t* a, int32_t alen,
                                     const int32_t* b, int32_t blen, int32_t n) {
    if (n < 0 || n > alen || n > blen) {  // n (parameter 2) must be in 0..min(alen, blen)
        xl_err_int(e, k, XL_ERR_BUILTIN, line, XL_SUBJECT_VERIFY_PREFIX << XL_SITE_SHIFT | 2, n, alen < blen ? alen : blen);
        return 0;
    }
#if XL_ON_GPU
    // Every chunk is scanned (no early exit), so the cost is ceil(n/32) ballots
    // whatever the acceptance rate; the first mismatching chunk gives the answer.
    const int32_t lane = (int32_t)(threadIdx.x & 31u);
    int32_t first = n;
    for (int32_t base = 0; base < n; base += 32) {
        const int32_t j = base + lane;
        const bool mismatch = j < n && a[j] != b[j];
        const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, mismatch);
        if (ballot != 0u && first == n) first = base + __ffs((int)ballot) - 1;
    }
    return first;
#else
    for (int32_t j = 0; j < n; ++j)
        if (a[j] != b[j]) return j;
    return n;
#endif
}

// ---- collective stages (docs/semantics.md §13.1; Python: ops.collective, ops.SharedWrites) ----
//
// A collective stage runs every participating request "at once": on the GPU one block,
// a thread per request; on the CPU one thread, request after request. Its shared writes
// go to a shadow of the Shared struct's words and take effect together at the stage's
// end, so every read in the stage sees the state from before it, whatever the schedule.
//
// The GPU never waits for an atomic while a stage runs (an atomic that returns a value
// is a round trip to L2, and a thread making a few hundred of them in a row made a
// round of the KV cache 0.28 ms): a claim is a fire-and-forget atomicMax of the
// writer's ~slot and of its slot + 1 on the word (two writers: least != greatest, and
// untouched is 0 in both, so a zeroed buffer is clear) plus a plain store of the
// value, a sum a fire-and-forget atomicAdd, and each writer notes the words it touched
// in its own list. The stage's end checks, applies and clears the noted words. The CPU
// build, one thread, tags each word with its first writer instead.

#if XL_ON_GPU
#define XL_THREAD ((int32_t)threadIdx.x)
#define XL_THREADS ((int32_t)blockDim.x)
#define XL_BLOCK_SYNC() __syncthreads()
#define XL_BLOCK_ANY(x) __syncthreads_or(x)
#else
#define XL_THREAD 0
#define XL_THREADS 1
#define XL_BLOCK_SYNC() do { } while (0)
#define XL_BLOCK_ANY(x) (x)
#endif

#if XL_ON_GPU
// A profile's clock mark: the cycles since `since` into *cycles (and one into *times, if given).
XL_DEVICE void xl_clock_mark(long long& since, unsigned long long* cycles, unsigned long long* times = nullptr) {
    const long long now = clock64();
    atomicAdd(cycles, (unsigned long long)(now - since));
    if (times) atomicAdd(times, 1ull);
    since = now;
}
#endif

// -DXL_PROFILE_PHASE2 (GPU, an experiment: scripts/profile_kv_rounds.py, scripts/real_phase2.py):
// thread 0 adds the clock cycles between marks of phase 2 into xl_prof[mark], read back by the
// host; mark = stage * 32 + part, for stages 0..31.
#if XL_ON_GPU && defined(XL_PROFILE_PHASE2)
__device__ unsigned long long xl_prof[1024];
#define XL_PROF_START() long long xl_prof_t = clock64()
#define XL_PROF_MARK(mark) do { if (threadIdx.x == 0 && blockIdx.x == 0) xl_clock_mark(xl_prof_t, &xl_prof[(mark) & 1023]); } while (0)
#else
#define XL_PROF_START() do { } while (0)
#define XL_PROF_MARK(mark) do { } while (0)
#endif

// -DXL_PROFILE_LINES (GPU, a measurement: scripts/line_profile.py): the team's first thread adds
// the clock cycles since the stage's start or its previous mark into xl_line_prof[site] (cycles,
// times), at the end of each lanes loop and reduction of a per-request stage and at the stage's
// end (emit_cpp.py numbers the sites; the generated code names each site's .xl line). Every
// lanes loop ends with a team barrier, so a site's cycles are the team's time up to it.
#define XL_LINE_SITES 2048
#if XL_ON_GPU && defined(XL_PROFILE_LINES)
__device__ unsigned long long xl_line_prof[XL_LINE_SITES][2];
#define XL_LINE_START() long long xl_line_t = clock64()
#define XL_LINE_MARK(site)                                                                       \
    do {                                                                                         \
        unsigned long long* xl_cell = xl_line_prof[(site) % XL_LINE_SITES];                      \
        if (XL_TEAM_RANK == 0) xl_clock_mark(xl_line_t, xl_cell, xl_cell + 1);                 \
    } while (0)
#else
#define XL_LINE_START() do { } while (0)
#define XL_LINE_MARK(site) do { } while (0)
#endif

enum { XL_SCAN = 0, XL_SUM = 1, XL_COUNT = 2, XL_MIN_OF = 3, XL_MAX_OF = 4, XL_ARGMIN = 5, XL_ARGMAX = 6 };

// CPU: a word's tag is 0 untouched; XL_TAG_SUM summed (`+=`); else the slot + 1 of the
// request that claimed it (`=`), with XL_TAG_CONFLICT once another request wrote it too.
constexpr uint32_t XL_TAG_SUM = 0x80000000u;
constexpr uint32_t XL_TAG_CONFLICT = 0x40000000u;
constexpr uint32_t XL_TAG_WRITER = 0x3FFFFFFFu;
// GPU: a noted word (its index, XL_NOTE_SUM set for a sum); a slot notes up to
// XL_NOTE_CAP words in its own list, the rest (with the slot) in one shared overflow list.
constexpr uint32_t XL_NOTE_SUM = 0x80000000u;
constexpr uint32_t XL_NO_NOTE = 0xFFFFFFFFu;
#ifndef XL_NOTE_CAP
#define XL_NOTE_CAP 256
#endif

struct XlColl {
    uint32_t* header;    // [0] overflow capacity (pairs, set by the host), [1] overflow lost (sticky),
                         // [2] overflow used, [3] CPU dirty count
    uint32_t* val;       // [shared words]: the claimed value, or the running sum
    uint32_t* tag;       // CPU [shared words]; GPU: the greatest ~slot of a writer (~least slot); 0: none
    uint32_t* aux;       // CPU: dirty words; GPU: the greatest slot + 1 of a writer; 0: none
    int32_t* conflict;   // [slots] wrote a word another request wrote
    int32_t* part;       // [slots] takes part (guard held, no error yet)
    uint32_t* contrib;   // [XL_COLL_WIDTH * slots] this group's contributions, collective k's at k * slots
    uint32_t* result;    // [XL_COLL_WIDTH * slots] the last group's results, alike
    uint32_t* noted;     // [slots] GPU: how many words the slot's list holds
    uint32_t* notes;     // [slots * XL_NOTE_CAP] GPU: each slot's noted words
    uint32_t* overflow;  // [2 * capacity] GPU: (word, slot) pairs noted past a slot's list
    uint32_t* grid;      // [XL_GRID_WORDS] GPU: phase 2 over the grid (XlGrid)
    uint32_t* frames;    // [slots * frame words]: a stage's top-level locals across collectives
    uint32_t* few;       // GPU: the block's shared memory for run_collective_few's columns (XlFew),
                         // where the kernel has it to spare; nullptr: contrib, result and part's
    int32_t slots;
};

// Collectives one pass combines at most (xlgen/core/ir.py: COLLECTIVE_GROUP_MAX).
constexpr int XL_COLL_WIDTH = 8;

// Phase 2 spread over the grid (XlSpan): the area of XlColl that combines the blocks' parts.
// [0] the barrier's arrival count; then, for each of two parities, per block two words for
// each collective of a group.
#ifndef XL_GRID_MAX_BLOCKS
#define XL_GRID_MAX_BLOCKS 1024  // a larger grid runs phase 2 in block 0
#endif
constexpr uint32_t XL_GRID_WORDS = 2u + 4u * XL_COLL_WIDTH * XL_GRID_MAX_BLOCKS;

// The layout of the one buffer that holds an XlColl (xlgen/runtime/gpu.py and the CPU
// build size it with xl_coll_words, zeroed); the host sets header[0].
XL_HD XlColl xl_coll_carve(uint32_t* mem, int32_t shared_words, int32_t slots) {
    XlColl c;
    c.header = mem;
    c.val = mem + 4;
    c.tag = c.val + shared_words;
    c.aux = c.tag + shared_words;
    c.conflict = (int32_t*)(c.aux + shared_words);
    c.part = c.conflict + slots;
    c.contrib = (uint32_t*)(c.part + slots);
    c.result = c.contrib + (size_t)slots * XL_COLL_WIDTH;
    c.noted = c.result + (size_t)slots * XL_COLL_WIDTH;
    c.notes = c.noted + slots;
    c.overflow = c.notes + (size_t)slots * XL_NOTE_CAP;
    c.grid = c.overflow + 2ull * c.header[0];
    c.frames = c.grid + XL_GRID_WORDS;
    c.few = nullptr;
    c.slots = slots;
    return c;
}

// Who runs which slots of phase 2 (all the active requests, in request-id order). One block
// all of them (block 0 inside the round's barrier, the CPU build, the step kernels), or every
// block of the grid a contiguous chunk lo..hi-1 (grid != nullptr; docs/gpu.md): then each
// collective combines the blocks' parts through XlColl::grid with a grid barrier, and the
// result is the same bits in any grouping (wrapping sums; the least (key, slot)).
struct XlGrid;
struct XlSpan {
    int32_t lo, hi;  // this block's slots
    int32_t n;       // every slot
    XlGrid* grid;    // nullptr: one block
};
XL_HD XlSpan xl_span_block(int32_t n) { return XlSpan{0, n, n, nullptr}; }

// The round a phase-2 record carries: the round's, or (fast mode's epochs, where each
// request is at its own iteration) each slot's.
struct XlRounds {
    int32_t round;
    const int32_t* of_slot;  // nullptr: `round` for every slot
    XL_HD XlRounds(int32_t r, const int32_t* each = nullptr) : round(r), of_slot(each) {}
    XL_HD int32_t operator[](int32_t slot) const { return of_slot ? of_slot[slot] : round; }
};

#if XL_ON_GPU
// A barrier over every block of phase 2's grid, on its own arrival count (XlColl::grid[0]),
// and the parts each block puts before one. `epoch` counts this block's barriers (the same in
// every block, and on every thread); a barrier that sees an abort clears `ok`, and phase 2
// returns at its next sync (the kernel stops). The grid is blocks 0 .. blocks-1: every block or
// the first ones (XL_PHASE2_BLOCK_SLOTS) in deterministic mode, the serving blocks in fast mode.
struct XlGrid {
    uint32_t* words;  // XlColl::grid
    unsigned int epoch;
    const volatile int32_t* host_flags;
    volatile int32_t* aborted;
    bool ok;
    int32_t blocks;  // phase 2's blocks, this one blockIdx.x among them
};

__device__ __forceinline__ unsigned int xl_load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// How a spin-wait polls a word another block releases: relaxed loads, then once the value
// waited for is seen, a fence (PTX's acquire pattern: a strong read, then a fence). An acquire
// load invalidates the SM's L1 at every poll, slowing the warps beside the poller, and up to
// ~1,000 warps poll at once in fast mode (docs/benchmarks.md: 0.17-0.22 s against 0.2-6.4 s at
// 1,000 requests). -DXL_POLL_ACQUIRE=1: an acquire load each poll (the A/B reference).
#ifndef XL_POLL_ACQUIRE
#define XL_POLL_ACQUIRE 0
#endif
__device__ __forceinline__ unsigned int xl_poll(const unsigned int* p) {
    if (XL_POLL_ACQUIRE) return xl_load_acquire(p);
    unsigned int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// After the poll that saw the value: its acquire.
__device__ __forceinline__ void xl_poll_seen() {
    if (!XL_POLL_ACQUIRE) asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

#ifndef XL_BARRIER_MAX_SLEEP_NS
#define XL_BARRIER_MAX_SLEEP_NS 256
#endif
#ifndef XL_BARRIER_SPIN
#define XL_BARRIER_SPIN 64  // polls without __nanosleep before backing off
#endif
// A spin-wait checks the device's abort flag every 256 polls, and the host's (mapped host
// memory: a read over PCIe) every XL_HOST_POLL_SPINS polls, a few ms with the backoff. Every
// 256, as before, hundreds of waiters' reads queued on the bus: at 1,000 requests with the KV
// cache some rounds took ms, and runs 1.5-4x longer in one process than in the next (22 ms
// every run now; fast mode 74-79 ms, was 0.15-3.1 s; docs/benchmarks.md).
#ifndef XL_HOST_POLL_SPINS
#define XL_HOST_POLL_SPINS 16384u
#endif
__device__ __forceinline__ bool xl_host_poll_due(unsigned int spins) { return (spins & (XL_HOST_POLL_SPINS - 1u)) == 0u; }

// Wait until `*word - target` is no longer negative (wrap-safe), polling the abort flags (the
// host's, and *aborted, which a waiter that sees either sets: false). Short waits (the common
// round) poll back to back; a long one backs off, so a hundred pollers do not flood the L2
// slice that holds `word` (polling every 32 ns made block 0's serial arbiter turns 3x slower),
// sleeping up to `max_sleep_ns` between polls.
__device__ __forceinline__ bool xl_spin_until(const unsigned int* word, unsigned int target, volatile int32_t* aborted,
                                              const volatile int32_t* host_flags,
                                              unsigned int max_sleep_ns = XL_BARRIER_MAX_SLEEP_NS) {
    unsigned int spins = 0, sleep_ns = 32;
    while ((int)(xl_poll(word) - target) < 0) {
        if ((++spins & 255u) == 0u && (*aborted != 0 || xl_host_poll_due(spins) && host_flags[0] != 0)) {
            *aborted = 1;
            return false;
        }
        if (spins > XL_BARRIER_SPIN) {
            __nanosleep(sleep_ns);
            if (sleep_ns < max_sleep_ns) sleep_ns <<= 1;
        }
    }
    xl_poll_seen();
    return true;
}

__device__ bool xl_grid_barrier(XlGrid& g) {
    __shared__ int ok;
    __syncthreads();
    g.epoch += 1u;
    if (threadIdx.x == 0) {
        ok = g.ok;
        if (ok) {  // release: bar.sync made the block's writes this thread's to publish
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(g.words) : "memory");
            ok = xl_spin_until(g.words, g.epoch * (unsigned int)g.blocks, g.aborted, g.host_flags);
        }
    }
    __syncthreads();
    g.ok = ok != 0;
    return g.ok;
}

// Where block `block` puts its parts of the exchange of `parity`, two words each. Two parities:
// a block puts the next exchange's parts only after the barrier that every block passed after
// reading this one's.
__device__ __forceinline__ uint32_t* xl_grid_parts(const XlGrid& g, int parity, int block) {
    return g.words + 2 + 2 * XL_COLL_WIDTH * (parity * XL_GRID_MAX_BLOCKS + block);
}

// Part k of this block in the next exchange (thread 0's value); the exchange is the barrier
// after it, read with the parity it returns.
__device__ __forceinline__ int xl_grid_set(const XlGrid& g, int k, uint64_t v) {
    const int parity = (int)(g.epoch & 1u);
    if (threadIdx.x == 0) {
        uint32_t* part = xl_grid_parts(g, parity, (int)blockIdx.x) + 2 * k;
        part[0] = (uint32_t)(v >> 32);
        part[1] = (uint32_t)v;
    }
    return parity;
}

// Part k of block `block` in the exchange of `parity`.
__device__ __forceinline__ uint64_t xl_grid_part(const XlGrid& g, int parity, int block, int k) {
    const uint32_t* part = xl_grid_parts(g, parity, block) + 2 * k;
    return ((uint64_t)__ldcg(part) << 32) | (uint64_t)__ldcg(part + 1);
}
#endif

// The sync between two steps of phase 2: the block's, or the grid's. False: aborted.
XL_DEVICE bool xl_span_sync(const XlSpan& sp) {
#if XL_ON_GPU
    if (sp.grid) return xl_grid_barrier(*sp.grid);
    __syncthreads();
#else
    (void)sp;
#endif
    return true;
}

// The slot that thread t of nt takes in the chunk of a collective stage's slots that starts at
// `base`: consecutive slots on different warps (lane 0 of each warp, then lane 1, ...), so that
// a few participants run side by side instead of diverging within one warp
// (-DXL_SPREAD_SLOTS=0: slot base + t, for A/B runs). nt: a multiple of 32.
#ifndef XL_SPREAD_SLOTS
#define XL_SPREAD_SLOTS 1
#endif
XL_DEVICE int32_t xl_spread_slot(int32_t base, int32_t t, int32_t nt) {
#if XL_ON_GPU
    if (XL_SPREAD_SLOTS) return base + (t & 31) * (nt >> 5) + (t >> 5);
#else
    (void)nt;
#endif
    return base + t;
}

// Whether phase 2 goes on: false once a grid barrier saw an abort.
XL_DEVICE bool xl_span_ok(const XlSpan& sp) {
#if XL_ON_GPU
    return sp.grid == nullptr || sp.grid->ok;
#else
    (void)sp;
    return true;
#endif
}

// One request's writes in one segment of a collective stage.
struct XlWriter {
    const XlColl* c;
    int32_t slot;
    uint32_t n;     // GPU: words noted in the slot's list so far
    uint32_t last;  // GPU: the last one (a loop summing into one word notes it once)
};

XL_HD uint32_t xl_word_bits(float v) { return xl_float_bits(v); }
XL_HD uint32_t xl_word_bits(int32_t v) { return (uint32_t)v; }
XL_HD uint32_t xl_word_bits(uint32_t v) { return v; }
XL_HD uint32_t xl_word_bits(bool v) { return v ? 1u : 0u; }
template <typename T> XL_HD T xl_from_bits(uint32_t w) { return (T)w; }
template <> XL_HD bool xl_from_bits<bool>(uint32_t w) { return w != 0u; }
template <> XL_HD float xl_from_bits<float>(uint32_t w) { return xl_bits_float(w); }

template <typename T>
XL_HD uint32_t xl_word_of(const void* shared_base, const T* element) {
    return (uint32_t)((const uint32_t*)(const void*)element - (const uint32_t*)shared_base);
}

// A collective stage that writes no shared state skips xl_settle_all at its end (kernel.cuh's
// run_collective): it noted nothing (the real pair's cost_batch: 4,200 cycles a round of
// barriers and loads saved, H200). -DXL_SETTLE_ALWAYS=1 settles anyway, for A/B runs.
#ifndef XL_SETTLE_ALWAYS
#define XL_SETTLE_ALWAYS 0
#endif

#if XL_ON_GPU
__device__ __forceinline__ void xl_note(XlWriter& w, uint32_t note) {
    if (note == w.last) return;
    w.last = note;
    if (w.n < XL_NOTE_CAP) {
        w.c->notes[(size_t)w.slot * XL_NOTE_CAP + w.n++] = note;
        return;
    }
    const uint32_t at = atomicAdd(&w.c->header[2], 1u);  // rare: a slot's list is full
    if (at < w.c->header[0]) {
        w.c->overflow[2 * at] = note;
        w.c->overflow[2 * at + 1] = (uint32_t)w.slot;
    } else {
        w.c->header[1] = 1u;  // lost: the host runs again with a larger overflow list
    }
}

// `sh.f[i] = v` in a collective stage.
__device__ __forceinline__ void xl_shadow_put(XlWriter& w, uint32_t word, uint32_t bits) {
    atomicMax(&w.c->tag[word], ~(uint32_t)w.slot);
    atomicMax(&w.c->aux[word], (uint32_t)w.slot + 1u);
    w.c->val[word] = bits;  // used only when this request is the word's one writer
    xl_note(w, word);
}

// `sh.f[i] += v` in a collective stage (integers: wrapping, so the order does not matter).
__device__ __forceinline__ void xl_shadow_add(XlWriter& w, uint32_t word, uint32_t bits) {
    atomicAdd(&w.c->val[word], bits);
    xl_note(w, word | XL_NOTE_SUM);
}

// What the stage's end does with one noted word, in two passes (with a sync between):
// SETTLE marks the writers of a word claimed by two and stores the words with one writer,
// claims and sums (a sum's first noter takes the whole total, so duplicates add nothing);
// CLEAR resets the shadow for the next stage. (SETTLE only reads the tags: one pass.)
enum { XL_SETTLE = 0, XL_CLEAR = 1 };
__device__ __forceinline__ void xl_settle(const XlColl& c, uint32_t* words, uint32_t note, int32_t slot, int pass) {
    const uint32_t word = note & ~XL_NOTE_SUM;
    if (pass == XL_CLEAR) {
        if (!(note & XL_NOTE_SUM)) {  // (a sum's value was taken in SETTLE; a claim's too: a later
            c.tag[word] = 0u;         // stage's sum into the word starts from 0)
            c.aux[word] = 0u;
            c.val[word] = 0u;
        }
    } else if (note & XL_NOTE_SUM) {
        const uint32_t total = atomicExch(&c.val[word], 0u);
        if (total != 0u) atomicAdd(&words[word], total);
    } else if (~__ldcg(&c.tag[word]) != __ldcg(&c.aux[word]) - 1u) {  // (__ldcg: from L2, where the atomics were done)
        c.conflict[slot] = 1;
    } else {
        words[word] = __ldcg(&c.val[word]);
    }
}

// The stage's end, for the span's slots, after a sync that ended every write: warp w takes
// slots lo + w, lo + w + warps, ...; its lanes take the slot's noted words; the overflow list
// is shared out over the span's threads (the grid's, over the grid). Over the grid, nobody
// writes the shadow again before the next stage's first sync, so CLEAR needs no sync after it.
__device__ bool xl_settle_all(const XlColl& c, void* shared_base, const XlSpan& sp) {
    uint32_t* words = (uint32_t*)shared_base;
    const int32_t lane = (int32_t)(threadIdx.x & 31u), warp = (int32_t)(threadIdx.x >> 5);
    const int32_t warps = (int32_t)((blockDim.x + 31u) >> 5);
    const uint32_t spilled = min(__ldcg(&c.header[2]), c.header[0]);  // read by all before anyone resets it
    const uint32_t first = sp.grid ? blockIdx.x * blockDim.x + threadIdx.x : threadIdx.x;
    const uint32_t stride = sp.grid ? (uint32_t)sp.grid->blocks * blockDim.x : blockDim.x;
    for (int pass = XL_SETTLE; pass <= XL_CLEAR; ++pass) {
        for (int32_t s = sp.lo + warp; s < sp.hi; s += warps) {
            for (uint32_t j = (uint32_t)lane; j < c.noted[s]; j += 32u)
                xl_settle(c, words, c.notes[(size_t)s * XL_NOTE_CAP + j], s, pass);
            if (pass == XL_CLEAR) {
                __syncwarp();  // every lane has read the count
                if (lane == 0) c.noted[s] = 0u;
            }
        }
        for (uint32_t j = first; j < spilled; j += stride)
            xl_settle(c, words, c.overflow[2 * j], (int32_t)c.overflow[2 * j + 1], pass);
        if (pass == XL_SETTLE && !xl_span_sync(sp)) return false;
    }
    if (threadIdx.x == 0 && blockIdx.x == 0) c.header[2] = 0u;  // (every block read it before the sync)
    if (!sp.grid) __syncthreads();
    return true;
}

#else
inline void xl_shadow_put(XlWriter& w, uint32_t word, uint32_t bits) {
    const XlColl& c = *w.c;
    const uint32_t me = (uint32_t)w.slot + 1u;
    const uint32_t old = c.tag[word];
    if (old == 0u) {
        c.tag[word] = me;
        c.aux[c.header[3]++] = word;
        c.val[word] = bits;
    } else if ((old & XL_TAG_WRITER) == me) {
        c.val[word] = bits;  // this request's own earlier write: the last one counts
    } else {
        c.tag[word] |= XL_TAG_CONFLICT;
        c.conflict[w.slot] = 1;
    }
}

inline void xl_shadow_add(XlWriter& w, uint32_t word, uint32_t bits) {
    const XlColl& c = *w.c;
    if (c.tag[word] == 0u) {
        c.tag[word] = XL_TAG_SUM;
        c.aux[c.header[3]++] = word;
    }
    c.val[word] += bits;
}

// The stage's end: store every write into the Shared struct, except words written by
// two requests (their first writer is marked too); clear the shadow.
inline bool xl_settle_all(const XlColl& c, void* shared_base, const XlSpan&) {
    uint32_t* words = (uint32_t*)shared_base;
    for (uint32_t i = 0; i < c.header[3]; ++i) {
        const uint32_t w = c.aux[i];
        const uint32_t tag = c.tag[w];
        if (tag == XL_TAG_SUM) words[w] += c.val[w];
        else if (tag & XL_TAG_CONFLICT) c.conflict[(tag & XL_TAG_WRITER) - 1u] = 1;
        else words[w] = c.val[w];
        c.tag[w] = 0u;
        c.val[w] = 0u;
    }
    c.header[3] = 0u;
    return true;
}

#endif

// Keys that order contributions as min_of/max_of/argmin/argmax do: integers by value,
// f32 by IEEE totalOrder with every NaN the canonical one (ops.total_order_key).
XL_HD uint32_t xl_order_key(uint32_t bits, int word) {
    if (word == XL_WORD_I) return bits ^ 0x80000000u;
    if (word == XL_WORD_U) return bits;
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0u) bits = 0x7FC00000u;
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// ---- lane-parallel code: lanes loops and reductions (docs/semantics.md §13.2) ----------------
//
// The request's warp runs them: on the GPU lane l takes indices lo + l, lo + l + 32, ...; the
// CPU build plays the 32 lanes one after another, so a sum adds in the same order. An
// iteration or element that fails stops there; the statement then fails with the error of
// the lowest failing index (XlLaneErr), in every backend.

constexpr int32_t XL_REDUCE_LANES = 32;

// A request's team on the GPU: one warp (XL_TEAM_WARPS 1, the default), a block of
// XL_TEAM_WARPS warps that serves one request at a time (gpu.py, `team_warps`), or a cluster of
// XL_TEAM_BLOCKS such blocks on as many SMs (`team_blocks`; each block with a copy of the request
// in its shared memory: xl_team_loop says how they stay the same). Ordinary stage code runs
// redundantly on every thread of the team; a lanes loop spreads its iterations over all of them;
// one whose iterations hold reductions, over its warps (XL_TEAM_WARP of XL_TEAM_NWARPS).
#ifndef XL_TEAM_WARPS
#define XL_TEAM_WARPS 1
#endif
#ifndef XL_TEAM_BLOCKS
#define XL_TEAM_BLOCKS 1
#endif
#if XL_TEAM_BLOCKS > 1 && XL_TEAM_WARPS == 1
#error "a cluster team is made of blocks of several warps (XL_TEAM_WARPS > 1)"
#endif
// XL_PHASE2_TEAM 1 (gpu.py: the default for cluster teams): the grid's first team takes no
// request and serves phase 2 alone (its block 0), the host launching one team more. Phase 2 then
// runs on an SM of its own, and no request's team has the round's phase-2 code and data evict
// its own from the caches of its block 0 (H200: plain greedy +5.5% at batch 1, +2.5% at batch 8).
#ifndef XL_PHASE2_TEAM
#define XL_PHASE2_TEAM 0
#endif
#if XL_PHASE2_TEAM && XL_TEAM_WARPS == 1
#error "phase 2's own team is a team of several warps (XL_TEAM_WARPS > 1)"
#endif
#define XL_TEAM_NWARPS (XL_TEAM_WARPS * XL_TEAM_BLOCKS)
// The g-th of a few constants (a collective stage's group tables, kernel.cuh). Phase 2's own team
// (the real pair) takes them as selects: an array indexed at run time is stored to and loaded from
// local memory at every call (twenty-fourth session's SASS; plain greedy +1.4% at batch 8, H200,
// twenty-seventh session). Elsewhere the array: xl_spec's target point was 2-3% slower with selects.
template <typename T, typename... R> XL_HD T xl_pick(int g, T first, R... rest) {
#if XL_PHASE2_TEAM
    if constexpr (sizeof...(R) == 0) {
        return first;
    } else {
        return g == 0 ? first : xl_pick<T>(g - 1, (T)rest...);
    }
#else
    const T table[] = {first, (T)rest...};
    return table[g];
#endif
}
#if XL_ON_GPU
#define XL_BLOCK_THREADS (32 * XL_TEAM_WARPS)  // a team's threads in one block
#define XL_TEAM_THREADS (32 * XL_TEAM_NWARPS)
#if XL_TEAM_BLOCKS > 1
// The block's place in its cluster, and the cluster's barrier: it orders every thread's memory
// operations before it (global and shared, release) before every thread's after it (acquire).
XL_DEVICE uint32_t xl_cluster_rank() {
    uint32_t r;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Per thread, the request fields and pools (emit_cpp.state_mask's bits) the team's code may have
// touched since the cluster's last barrier (XL_TOUCH; xl_team_loop reads it).
__shared__ uint32_t xl_team_touched[32 * XL_TEAM_WARPS];
XL_DEVICE void xl_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    xl_team_touched[threadIdx.x] = 0u;
}
#define XL_TOUCH(mask) (xl_team_touched[threadIdx.x] |= (uint32_t)(mask))
// Block `rank`'s copy of this block's shared variable at `p` (distributed shared memory).
XL_DEVICE uint32_t xl_cluster_addr(const void* p, uint32_t rank) {
    uint32_t out;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"((uint32_t)__cvta_generic_to_shared(p)), "r"(rank));
    return out;
}
XL_DEVICE uint32_t xl_cluster_load(const void* p, uint32_t rank) {
    uint32_t v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(xl_cluster_addr(p, rank)) : "memory");
    return v;
}
XL_DEVICE void xl_cluster_or(const void* p, uint32_t rank, uint32_t v) {
    asm volatile("red.shared::cluster.or.b32 [%0], %1;" ::"r"(xl_cluster_addr(p, rank)), "r"(v) : "memory");
}
// *p = v in block `rank`'s copy, for a value of 1, 2, 4 or 8 bytes.
template <typename T> XL_DEVICE void xl_cluster_put(const T* p, uint32_t rank, const T& v) {
    const uint32_t a = xl_cluster_addr(p, rank);
    if constexpr (sizeof(T) == 1)
        asm volatile("st.shared::cluster.u8 [%0], %1;" ::"r"(a), "r"((uint32_t)*reinterpret_cast<const uint8_t*>(&v)) : "memory");
    else if constexpr (sizeof(T) == 2)
        asm volatile("st.shared::cluster.u16 [%0], %1;" ::"r"(a), "h"(*reinterpret_cast<const uint16_t*>(&v)) : "memory");
    else if constexpr (sizeof(T) == 4)
        asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(a), "r"(*reinterpret_cast<const uint32_t*>(&v)) : "memory");
    else {
        static_assert(sizeof(T) == 8, "a request field of 1, 2, 4 or 8 bytes");
        asm volatile("st.shared::cluster.u64 [%0], %1;" ::"r"(a), "l"(*reinterpret_cast<const uint64_t*>(&v)) : "memory");
    }
}
#define XL_TEAM_RANK ((int64_t)(xl_cluster_rank() * XL_BLOCK_THREADS + threadIdx.x))
#define XL_TEAM_WARP ((int32_t)(xl_cluster_rank() * XL_TEAM_WARPS + (threadIdx.x >> 5)))
#define XL_TEAM_SYNC() xl_cluster_sync()
#elif XL_TEAM_WARPS == 1
#define XL_TEAM_RANK ((int64_t)(threadIdx.x & 31u))
#define XL_TEAM_WARP 0
#define XL_TEAM_SYNC() __syncwarp()
#else
#define XL_TEAM_RANK ((int64_t)threadIdx.x)
#define XL_TEAM_WARP ((int32_t)(threadIdx.x >> 5))
#define XL_TEAM_SYNC() __syncthreads()
#endif
// The team's threads in this block: their barrier (the copies of the request are per block).
#if XL_TEAM_WARPS == 1
#define XL_TEAM_BLOCK_SYNC() __syncwarp()
#else
#define XL_TEAM_BLOCK_SYNC() __syncthreads()
#endif
#endif
#if !(XL_ON_GPU && XL_TEAM_BLOCKS > 1)
#define XL_TOUCH(mask) ((void)0)  // (only a cluster team keeps the record)
#endif
constexpr int64_t XL_NO_INDEX = 0x7FFFFFFFFFFFFFFFll;  // (NVRTC has no INT64_MAX)

struct XlLaneErr {
    int64_t at;  // the lowest failing index seen; XL_NO_INDEX: none
    XlErr e;     // its error (e.code 0: none; the key is unused)
};

XL_HD void xl_lane_err_note(XlLaneErr& first, int64_t at, const XlErr& e) {
    if (e.code && at < first.at) first = {at, e};
}

// The warp's lowest failing index, on every lane (a butterfly of minima).
XL_COLD XlLaneErr xl_warp_err_min(XlLaneErr first) {
#if XL_ON_GPU
    for (int k = 16; k >= 1; k >>= 1) {
        XlLaneErr other;
        other.at = __shfl_xor_sync(0xFFFFFFFFu, (long long)first.at, k);
        other.e.code = __shfl_xor_sync(0xFFFFFFFFu, first.e.code, k);
        other.e.line = __shfl_xor_sync(0xFFFFFFFFu, first.e.line, k);
        other.e.key = 0;
        other.e.site = __shfl_xor_sync(0xFFFFFFFFu, first.e.site, k);
        other.e.value = __shfl_xor_sync(0xFFFFFFFFu, first.e.value, k);
        other.e.bound = __shfl_xor_sync(0xFFFFFFFFu, first.e.bound, k);
        if (other.at < first.at) first = other;
    }
#endif
    return first;
}

// Every lane ends with the warp's lowest failing index.
XL_DEVICE void xl_warp_err_merge(XlLaneErr& first) {
#if XL_ON_GPU
    // Usually nothing failed: one vote instead of the shuffles per reduction.
    if (__any_sync(0xFFFFFFFFu, first.e.code != 0)) first = xl_warp_err_min(first);
#else
    (void)first;
#endif
}

// The statement's error from the lowest failing iteration or element, if any.
XL_HD void xl_lane_err_set(XlErr& err, int32_t key, const XlLaneErr& first) {
    if (first.e.code)
        xl_err_set(err, key, first.e.code, first.e.line, first.e.site, first.e.value, first.e.bound);
}

// The block's lowest failing index, on every thread (its warps' minima through shared memory).
// Called by every thread of the block.
XL_COLD XlLaneErr xl_block_err_min(XlLaneErr first) {
#if XL_ON_GPU
    xl_warp_err_merge(first);
    __shared__ XlLaneErr xl_team_errs[XL_TEAM_WARPS];
    if ((threadIdx.x & 31u) == 0u) xl_team_errs[threadIdx.x >> 5] = first;
    __syncthreads();
    for (int w = 0; w < XL_TEAM_WARPS; ++w)
        if (xl_team_errs[w].at < first.at) first = xl_team_errs[w];
    __syncthreads();
#endif
    return first;
}

#if XL_ON_GPU && XL_TEAM_BLOCKS > 1
// How a cluster team runs a lanes loop (xl_team_loop). Every block keeps its own copy of the
// request, and the copies stay equal: ordinary code computes the same values in every block and
// stores them in its own copy (XL_WARP_STORE), and a loop either
// - runs **spread** over the whole team (iterations holding reductions, at least one per warp of
//   the team: the matrix-vector loops; a loop that writes a pool; any loop of more than
//   XL_SPREAD_TURNS turns of a block: a verify pass's attention), each iteration storing
//   into every block's copy (xl_store_team), with the cluster's barrier on entry (no block may
//   still read what another's iteration overwrites in its copy) and on exit; or
// - runs **in every block alike** (the few-iteration loops: a norm, a softmax's maximum), each
//   block all the iterations into its own copy, with the block's barriers only: no block waits
//   for another.
// A thread's mode (xl_team_mode): whether its loop is spread (its stores go to every copy), and
// whether the team's last barrier was its block's. A spread loop then syncs the cluster on entry
// even where the loop follows another with bounds that read no state (EntrySync false), unless
// nothing the team ran since the cluster's last barrier touched what the loop writes
// (xl_team_touched against its Writes): the blocks run the same code, so no block can still be
// reading or writing what another's iteration stores into its copy (or into a pool).
enum : uint8_t { XL_MODE_SPREAD = 1, XL_MODE_AFTER_BLOCK = 2 };
__shared__ uint8_t xl_team_mode[XL_BLOCK_THREADS];
XL_DEVICE bool xl_spreading() { return (xl_team_mode[threadIdx.x] & XL_MODE_SPREAD) != 0; }
// A request field's store in a lanes loop: into this block's copy, and, where the loop is spread,
// into every other block's.
template <typename T, typename V> XL_DEVICE void xl_store_team(T& lhs, const V& value) {
    lhs = value;
    if (!xl_spreading()) return;
    const T stored = lhs;
    const uint32_t rank = xl_cluster_rank();
    for (uint32_t b = 0; b < XL_TEAM_BLOCKS; ++b)
        if (b != rank) xl_cluster_put(&lhs, b, stored);
}
#endif
struct XlTeamLoop {
    int64_t start, stride;  // this thread's (or warp's) first iteration, and the step to its next
};
// Any loop is spread where running it in every block alike would take more than XL_SPREAD_TURNS
// turns of a block (an iteration on each of its threads; ByWarp: on each of its warps): a verify
// pass's attention scores, exponentials, and its rows' maxima and sums. 0: never for that (an A/B
// switch). On the real pair (docs/benchmarks.md, twentieth session) 2 made ASBS 13-18% faster than
// 0 and plain greedy no slower; 1 made plain greedy 3% slower.
#ifndef XL_SPREAD_TURNS
#define XL_SPREAD_TURNS 2
#endif
// A lanes loop's entry: its barrier, and the iterations this thread (ByWarp: its warp) takes of n.
// Pools: the loop writes a pool (global memory, which the copies of a cluster team do not cover).
// Writes, Touches: the fields and pools the loop may write, and touch (emit_cpp.state_mask).
template <bool ByWarp, bool EntrySync, bool Pools, uint32_t Writes, uint32_t Touches>
XL_DEVICE XlTeamLoop xl_team_loop(int64_t n) {
#if XL_ON_GPU && XL_TEAM_BLOCKS > 1
    uint8_t& mode = xl_team_mode[threadIdx.x];
    const int64_t turn = ByWarp ? XL_TEAM_WARPS : XL_BLOCK_THREADS;  // iterations a block takes at once
    if (Pools || (ByWarp && n >= XL_TEAM_NWARPS) || (XL_SPREAD_TURNS > 0 && n > XL_SPREAD_TURNS * turn)) {
        if (EntrySync || ((mode & XL_MODE_AFTER_BLOCK) && (xl_team_touched[threadIdx.x] & Writes))) xl_cluster_sync();
        mode = XL_MODE_SPREAD;
        return {ByWarp ? XL_TEAM_WARP : XL_TEAM_RANK, ByWarp ? XL_TEAM_NWARPS : XL_TEAM_THREADS};
    }
    if (EntrySync) __syncthreads();
    XL_TOUCH(Touches);
    mode = 0;
    return {ByWarp ? (int64_t)(threadIdx.x >> 5) : (int64_t)threadIdx.x, ByWarp ? XL_TEAM_WARPS : XL_BLOCK_THREADS};
#elif XL_ON_GPU
    (void)n;
    if (EntrySync) XL_TEAM_SYNC();
    return {ByWarp ? (int64_t)XL_TEAM_WARP : XL_TEAM_RANK, ByWarp ? XL_TEAM_NWARPS : XL_TEAM_THREADS};
#else
    (void)n;
    return {0, 1};
#endif
}

#if XL_ON_GPU && XL_TEAM_BLOCKS > 1
// A cluster team's failures: at the team's k-th xl_team_err_finish, a warp that failed sets its
// block's bit b in every block's xl_cluster_failed[k % 3], so that after the cluster barrier every
// block knows from its own shared memory whether any block failed (the usual loop pays one
// cluster barrier and nothing more). Three words in turn: thread 0 clears the word of finish
// k + 1 at finish k: every thread read it last after the barrier of finish k - 2, so before
// arriving at finish k - 1's; no warp sets it before finish k + 1, after finish k's barrier.
// A thread counts its finishes in a word of its own (no barrier between the read and the write).
__shared__ uint32_t xl_cluster_failed[3];
__shared__ uint32_t xl_cluster_finishes[XL_BLOCK_THREADS];
__shared__ XlLaneErr xl_cluster_block_err;  // this block's minimum, for the others to read
XL_DEVICE void xl_team_start() {
    if (threadIdx.x == 0) xl_cluster_failed[0] = xl_cluster_failed[1] = xl_cluster_failed[2] = 0u;
    xl_cluster_finishes[threadIdx.x] = 0u;
    xl_team_mode[threadIdx.x] = 0;
    xl_cluster_sync();  // (before any block sets a bit here)
    XL_TOUCH(~0u);
}
#else
XL_DEVICE void xl_team_start() {}
#endif

#if XL_ON_GPU && XL_TEAM_BLOCKS > 1
// The team's lowest failing index, on every thread, where the blocks in `blocks` failed: each such
// block's minimum through its shared memory, read by every block. Called by the whole team.
XL_COLD XlLaneErr xl_team_err_min(XlLaneErr first, uint32_t blocks) {
    if (blocks >> xl_cluster_rank() & 1u) {
        first = xl_block_err_min(first);
        if (threadIdx.x == 0) xl_cluster_block_err = first;
    }
    xl_cluster_sync();
    for (uint32_t b = 0; b < XL_TEAM_BLOCKS; ++b) {
        if (!(blocks >> b & 1u)) continue;
        XlLaneErr other;
        for (uint32_t w = 0; w < sizeof(XlLaneErr) / 4; ++w)
            reinterpret_cast<uint32_t*>(&other)[w] =
                xl_cluster_load(reinterpret_cast<const uint32_t*>(&xl_cluster_block_err) + w, b);
        if (other.at < first.at) first = other;
    }
    xl_cluster_sync();  // (every block has read the others' minima)
    return first;
}
#endif

// Every thread of the team ends with the team's lowest failing index (its warps' and blocks'
// minima through shared memory), and the statement's error is set from it. Called by the whole
// team, after its lanes loop.
// It is also the team's barrier after the loop: every thread's writes, before the team
// reads them (a barrier that counts failures, so the usual loop without any pays nothing more).
XL_DEVICE void xl_team_err_finish(XlErr& err, int32_t key, XlLaneErr first) {
#if XL_ON_GPU && XL_TEAM_BLOCKS > 1
    if (!xl_spreading()) {  // every block ran every iteration: its minimum is the team's
        xl_team_mode[threadIdx.x] = XL_MODE_AFTER_BLOCK;
        if (__syncthreads_or(first.e.code != 0)) first = xl_block_err_min(first);
        xl_lane_err_set(err, key, first);
        return;
    }
    xl_team_mode[threadIdx.x] = 0;
    const uint32_t k = xl_cluster_finishes[threadIdx.x], rank = xl_cluster_rank();
    xl_cluster_finishes[threadIdx.x] = k + 1u;
    if (threadIdx.x == 0) xl_cluster_failed[(k + 1u) % 3u] = 0u;
    if (__any_sync(0xFFFFFFFFu, first.e.code != 0) && (threadIdx.x & 31u) == 0u)
        for (uint32_t b = 0; b < XL_TEAM_BLOCKS; ++b) xl_cluster_or(&xl_cluster_failed[k % 3u], b, 1u << rank);
    xl_cluster_sync();
    const uint32_t blocks = xl_cluster_failed[k % 3u];  // the same in every block
    if (blocks) first = xl_team_err_min(first, blocks);
#elif XL_ON_GPU && XL_TEAM_WARPS > 1
    if (!__syncthreads_or(first.e.code != 0)) return;
    first = xl_block_err_min(first);
#else
#if XL_ON_GPU
    __syncwarp();
#endif
    xl_warp_err_merge(first);
#endif
    xl_lane_err_set(err, key, first);
}

// A reduction's error: its warp's (every warp of a team computes the reduction).
XL_DEVICE void xl_lane_err_finish(XlErr& err, int32_t key, XlLaneErr first) {
    xl_warp_err_merge(first);
    xl_lane_err_set(err, key, first);
}

#if XL_ON_GPU
#define XL_LANE ((int64_t)(threadIdx.x & 31u))
#define XL_UNROLL _Pragma("unroll")
#define XL_PRAGMA_TEXT(x) _Pragma(#x)
#define XL_PRAGMA(x) XL_PRAGMA_TEXT(x)
#else
#define XL_UNROLL
#endif

// `lanes for i in lo..hi { body }`: body(i, e) per iteration. Iterations are independent (the
// checker proves it), so any order gives the same state; a failed one does not stop the others.
// The team's threads take iterations rank, rank + XL_TEAM_THREADS, ...; with ByWarp (the
// iterations hold reductions) its warps take w, w + XL_TEAM_NWARPS, ..., all lanes together.
//
// Why a team needs no other barrier (docs/gpu.md, "Teams of warps"): every region in which
// the team's threads write state on their own begins and ends with a team barrier. Ordinary
// stores (XL_POOL_STORE / XL_WARP_STORE) sync before and after; a lanes loop syncs on entry
// (here: a thread still reading the state for the code before the loop -- a guard, a `let`,
// thread 0's trace record or retire check -- must finish before any thread's iteration
// writes) and on exit (xl_team_err_finish); the copy back (xl_put_request) syncs first; the
// copy in follows the previous request's broadcast barrier. Single-thread reads (trace
// records, retire checks) therefore never overlap a write by another warp.
// EntrySync false: the loop follows another lanes loop and its bounds read no state
// (emit_cpp.py), so that loop's exit barrier already separates them. Writes, Touches: what the
// loop may write and touch (a cluster team's entry barrier after a loop in every block alike:
// xl_team_loop); by default, anything.
template <bool ByWarp, bool EntrySync = true, bool Pools = false, uint32_t Writes = ~0u, uint32_t Touches = ~0u,
          typename Body>
XL_DEVICE void xl_lanes(XlErr& err, int32_t key, int32_t lo, int32_t hi, Body body) {
    XlLaneErr first = {XL_NO_INDEX, {0, 0, 0}};
    const XlTeamLoop mine = xl_team_loop<ByWarp, EntrySync, Pools, Writes, Touches>((int64_t)hi - lo);
    for (int64_t i = (int64_t)lo + mine.start; i < (int64_t)hi; i += mine.stride) {
        XlErr e = {0, 0, 0};
        body((int32_t)i, e);
        xl_lane_err_note(first, i, e);
    }
    xl_team_err_finish(err, key, first);
}

// A lanes loop versioned on its range (ranges.py): `fast` (the same on every thread of the
// team) picks the body without the checks proved for that range.
template <bool ByWarp, bool EntrySync = true, bool Pools = false, uint32_t Writes = ~0u, uint32_t Touches = ~0u,
          typename Body>
XL_DEVICE void xl_lanes_v(XlErr& err, int32_t key, int32_t lo, int32_t hi, bool fast, Body body) {
    if (fast)
        xl_lanes<ByWarp, EntrySync, Pools, Writes, Touches>(err, key, lo, hi,
                                                            [&](int32_t i, XlErr& e) { body(XlCheck<false>{}, i, e); });
    else
        xl_lanes<ByWarp, EntrySync, Pools, Writes, Touches>(err, key, lo, hi,
                                                            [&](int32_t i, XlErr& e) { body(XlCheck<true>{}, i, e); });
}

template <typename T> XL_HD T xl_sum_add(T a, T b) { return xl_add(a, b); }
template <> XL_HD float xl_sum_add<float>(float a, float b) { return xl_fadd(a, b); }
template <typename T> XL_HD T xl_sum_identity() { return T(0); }
template <> XL_HD float xl_sum_identity<float>() { return -0.0f; }  // x + -0.0 == x for every x

// A loop of matrix-vector iterations (grouping.py): `lanes for e in lo..hi` whose iterations
// e = t * K + row (t the position) begin with sums whose elements read row `row` of a weight.
// Iterations are independent, so the mapping is free; on the fast path (`fast`: the range within
// the proved bound) the team takes them in tiles, each tile's sums together, in the order of
// §13.2 (bits unchanged), and the first failing iteration (by index) is noted:
// - grouped (several positions, weight-once): with more than XL_GROUP_MIN_POSITIONS - 1
//   positions per row, a warp takes R = xl_group_rows_per_tile<K, G>() rows and up to G of their
//   positions (a row at a time where the range starts or ends inside a position):
//   grouped(XlInt<R>, row0, t0, n, first) runs iterations (t0 + g) * K + row0 + r for r < R, g < n
//   <= G, their sums reading each weight once for the positions and each activation once for
//   the rows (xl_sum_tile), then their tails;
// - rows (one position, several rows): otherwise, a warp takes R = xl_rows_per_tile<K>() rows of
//   one position: rows(XlInt<R>, t, row0, rlo, rhi, first) runs iterations t * K + row0 + r for
//   rlo <= r < rhi, their sums with every row's loads in flight together (xl_sum_rows), each
//   row's sum left in its own lanes by a transposed butterfly, then each row's tail on one of
//   those lanes (xl_rows_tails);
// - else (off the fast path, or a loop without that part) the loop runs as xl_lanes_v does.
// `grouped` or `rows` is XlNone where the loop has no such part (emit_cpp.py).
// Grouped only from this many positions per row on average: below it the guards of a group's
// unrolled G positions cost more than the weight reads they save (measured on an H100 with the
// real pair: verify passes of 2 and 3 positions 11-19% slower grouped; docs/benchmarks.md).
#ifndef XL_GROUP_MIN_POSITIONS
#define XL_GROUP_MIN_POSITIONS 4
#endif
// Rows per tile at most (a power of two <= 32): each lane holds a partial per row, and R rows'
// loads are in flight together. -DXL_ROWS_MAX=0 turns the rows path off (an A/B switch).
#ifndef XL_ROWS_MAX
#define XL_ROWS_MAX 16
#endif
struct XlNone {};
template <int N> struct XlInt { static constexpr int value = N; };
template <typename A, typename B> struct XlSame { static constexpr bool value = false; };
template <typename A> struct XlSame<A, A> { static constexpr bool value = true; };

// Rows per tile for K rows: a power of two, as many as give every warp of the team a tile (of a
// cluster team: every warp of every block, so K = 128 rows make tiles of one row in a team of 16
// x 8). -DXL_ROWS_WARPS=N sizes them for N warps instead (an A/B switch).
#ifndef XL_ROWS_WARPS
#define XL_ROWS_WARPS XL_TEAM_NWARPS
#endif
template <int K>
#if XL_ON_GPU
__host__ __device__
#endif
constexpr int xl_rows_per_tile() {
    int r = 1;
    while (2 * r <= XL_ROWS_MAX && 2 * r <= 32 && (K == 0 || 2 * r * XL_ROWS_WARPS <= K)) r *= 2;
    return r;
}

// Rows per weight-once tile for K rows and groups of G positions (xl_lanes_grouped): a power of
// two dividing K, at most XL_GROUP_ROWS, R * G <= 64 sums (XlGroupSum), as many as give every warp
// of the team a tile; 1 in a team of 32 warps (64 registers a thread: R * G accumulators would
// spill). -DXL_GROUP_ROWS=1 takes a row at a time (an A/B switch).
#ifndef XL_GROUP_ROWS
#define XL_GROUP_ROWS 4
#endif
// A loop whose tiles' sums stop each on its own or whose elements may fail (attention's weighted
// sum of V: GroupChecked in xl_lanes_grouped) takes the rows path on the GPU unless
// -DXL_GROUP_CHECKED=1. Measured with the real pair on an H200 (docs/benchmarks.md, twenty-first
// session): grouped, the 16 x 8 team's 9-position weighted sum of V took 14,400 cycles where the
// rows path took 22,100, but the kernel's register allocation around it cost plain greedy 2% and
// ASBS gained nothing; in a team of one block the 9-position pass took 4% longer. The CPU build
// groups them (each sum of a tile computed alone: the same bits), so that its tests and the
// fuzzer check the grouped path.
#ifndef XL_GROUP_CHECKED
#define XL_GROUP_CHECKED (!XL_ON_GPU)
#endif
// How far a lane's elements of a tile of several rows are unrolled: its R * G accumulators take
// the registers (the real pair's 9-position pass, 4 x 9, took 419 us unrolled by 4, spilling; 365
// by 1; 354 by 2, the default).
#ifndef XL_TILE_UNROLL
#define XL_TILE_UNROLL 2
#endif
template <int K, int G>
#if XL_ON_GPU
__host__ __device__
#endif
constexpr int xl_group_rows_per_tile() {
    int r = 1;
    while (XL_TEAM_WARPS <= 16 && 2 * r <= XL_GROUP_ROWS && K % (2 * r) == 0 && 2 * r * G <= 64
           && 2 * r * XL_TEAM_NWARPS <= K)
        r *= 2;
    return r;
}

template <bool EntrySync, int K, int G, bool Split, bool Pools = false, uint32_t Writes = ~0u, uint32_t Touches = ~0u,
          bool GroupChecked = false, typename Checked, typename Grouped, typename Rows>
XL_DEVICE void xl_lanes_grouped(XlErr& err, int32_t key, int32_t lo, int32_t hi, bool fast, Checked checked,
                                Grouped grouped, Rows rows) {
    constexpr bool has_grouped = !XlSame<Grouped, XlNone>::value;
    constexpr bool has_rows = !XlSame<Rows, XlNone>::value && XL_ROWS_MAX > 0;
    const bool many = (!GroupChecked || XL_GROUP_CHECKED)
                      && (int64_t)hi - lo > (int64_t)(XL_GROUP_MIN_POSITIONS - 1) * K;
    if (!fast || (!(has_grouped && many) && !has_rows)) {
        xl_lanes_v<true, EntrySync, Pools, Writes, Touches>(err, key, lo, hi, fast, checked);
        return;
    }
    XlLaneErr first = {XL_NO_INDEX, {0, 0, 0}};
    const XlTeamLoop mine = xl_team_loop<true, EntrySync, Pools, Writes, Touches>((int64_t)hi - lo);
    const int32_t start = (int32_t)mine.start, stride = (int32_t)mine.stride;
    // A tile whose sums' elements failed (grouped(...) or rows(...) false) runs its iterations one
    // at a time, as on the fast path of xl_lanes_v, where they fail as they must.
    auto one_at_a_time = [&](int32_t i) {
        XlErr e = {0, 0, 0};
        checked(XlCheck<false>{}, i, e);
        xl_lane_err_note(first, i, e);
    };
    if constexpr (has_grouped) {
        if (many) {
            constexpr int R = xl_group_rows_per_tile<K, G>();
            auto tile = [&](auto rows, int32_t row0, int32_t t0, int32_t n) {
                if (grouped(rows, row0, t0, n, first)) return;
                for (int32_t g = 0; g < n; ++g)
                    for (int32_t r = 0; r < decltype(rows)::value; ++r) one_at_a_time((t0 + g) * K + row0 + r);
            };
            if (R > 1 && lo % K == 0 && hi % K == 0) {  // whole positions: tiles of R rows x G positions
                constexpr int32_t tiles = K / R;      // per group of positions
                const int32_t t_first = lo / K, t_end = hi / K, groups = (t_end - t_first + G - 1) / G;
                for (int32_t q = start; q < tiles * groups; q += stride) {
                    const int32_t t0 = t_first + (q / tiles) * G;
                    tile(XlInt<R>{}, (q % tiles) * R, t0, t_end - t0 < G ? t_end - t0 : G);
                }
            } else {  // a row at a time, each its own positions (lo >= 0 on the fast path)
                for (int32_t row = start; row < K; row += stride) {
                    const int32_t t_first = lo > row ? (lo - row + K - 1) / K : 0;
                    const int32_t t_end = hi > row ? (hi - row + K - 1) / K : 0;
                    for (int32_t t0 = t_first; t0 < t_end; t0 += G)
                        tile(XlInt<1>{}, row, t0, t_end - t0 < G ? t_end - t0 : G);
                }
            }
            xl_team_err_finish(err, key, first);
            return;
        }
    }
    if constexpr (has_rows) {
        constexpr int R = xl_rows_per_tile<K>();
        auto tile = [&](int32_t t, int32_t row0, int32_t base, int32_t rlo, int32_t rhi) {
            if (rows(XlInt<R>{}, t, row0, rlo, rhi, first)) return;
            for (int32_t i = base + rlo; i < base + rhi; ++i) one_at_a_time(i);
        };
        if constexpr (Split) {  // tiles within a position (lo >= 0 on the fast path)
            constexpr int32_t tiles = (K + R - 1) / R;  // per position
            const int32_t t_first = lo / K, t_end = hi > 0 ? (hi - 1) / K + 1 : 0;
            for (int32_t q = start; q < (t_end - t_first) * tiles; q += stride) {
                const int32_t t = t_first + q / tiles, row0 = (q % tiles) * R;
                const int32_t base = t * K + row0;  // the iteration of the tile's row 0
                const int32_t rlo = lo > base ? lo - base : 0;
                int32_t rhi = hi - base < R ? hi - base : R;
                if (rhi > K - row0) rhi = K - row0;
                if (rlo < rhi) tile(t, row0, base, rlo, rhi);
            }
        } else {  // no positions: tiles of R iterations from lo (K: how many there are at most)
            const int64_t n = (int64_t)hi - lo;
            for (int64_t q = start; q * R < n; q += stride) {
                const int32_t base = (int32_t)(lo + q * R);
                tile(0, base, base, 0, (int32_t)(n - q * R < R ? n - q * R : R));
            }
        }
    }
    xl_team_err_finish(err, key, first);
}

XL_HD uint32_t xl_reduce_key(int32_t v) { return (uint32_t)v ^ 0x80000000u; }
XL_HD uint32_t xl_reduce_key(uint32_t v) { return v; }
XL_HD uint32_t xl_reduce_key(float v) { return xl_order_key(xl_float_bits(v), XL_WORD_F); }

// The elements j of lo..hi as a warp's lanes take them, each(j, lane): on the GPU lane l takes
// l, l + 32, ... (lane 0 of its own accumulators); the CPU build plays the 32 lanes one after
// another. A reduction's accumulator (XlSumPass, XlBestPass) takes each element with add(j,
// lane, elem) and gives the result with finish; several accumulators may share one pass (a run of
// reductions over one range, emit_cpp.py), each with the bits and the error it has alone.
#if XL_ON_GPU
constexpr int32_t XL_PASS_LANES = 1;
#else
constexpr int32_t XL_PASS_LANES = XL_REDUCE_LANES;
#endif
// Unrolled by 4 on the GPU: a lane's next elements' loads in flight while it adds one (a row's
// maximum over attention scores was one load's latency after another). Not in a team of 32
// warps, whose threads get 64 registers: the real pair measured +8-14% with 16 warps and -2%
// with 32 (docs/benchmarks.md). -DXL_REDUCE_UNROLLED=0 leaves it to the compiler (an A/B switch).
#ifndef XL_REDUCE_UNROLLED
#define XL_REDUCE_UNROLLED (XL_TEAM_WARPS <= 16)
#endif
template <typename Each>
XL_DEVICE void xl_reduce_pass(int32_t lo, int32_t hi, Each each) {
#if XL_ON_GPU
#if XL_REDUCE_UNROLLED
#pragma unroll 4
#endif
    for (int64_t j = (int64_t)lo + XL_LANE; j < (int64_t)hi; j += 32) each(j, 0);
#else
    for (int32_t l = 0; l < XL_REDUCE_LANES; ++l)
        for (int64_t j = (int64_t)lo + l; j < (int64_t)hi; j += XL_REDUCE_LANES) each(j, l);
#endif
}

// An element's value, or false where it failed: then its lane takes no more elements (`stopped`)
// and the lowest failing index is noted (the lanes' lowest: the statement's error).
template <bool Check, typename T, typename Elem>
XL_DEVICE bool xl_pass_element(int64_t j, int32_t lane, Elem& elem, XlLaneErr& first, int32_t& stopped, T& v) {
    if (Check && stopped == lane) return false;
    XlErr e = {0, 0, 0};
    v = elem((int32_t)j, e);
    if (Check && e.code) {
        xl_lane_err_note(first, j, e);
        stopped = lane;
        return false;
    }
    return true;
}

#if XL_ON_GPU
// A warp's partial sums added up on every lane: lane l adds lane (l ^ k)'s for k = 16, 8, 4, 2, 1.
// 32-bit integers wrap, so any order gives those bits: one redux.sync instead of five shuffles
// and adds. -DXL_REDUX_SUM=0: the butterfly for them too, for A/B runs.
#ifndef XL_REDUX_SUM
#define XL_REDUX_SUM 1
#endif
template <typename T>
XL_DEVICE T xl_warp_sum(T acc) {
    for (int k = 16; k >= 1; k >>= 1) acc = xl_sum_add(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, k));
    return acc;
}
#if XL_REDUX_SUM
XL_DEVICE uint32_t xl_warp_sum(uint32_t acc) { return __reduce_add_sync(0xFFFFFFFFu, acc); }
XL_DEVICE int32_t xl_warp_sum(int32_t acc) { return (int32_t)__reduce_add_sync(0xFFFFFFFFu, (uint32_t)acc); }
#endif
#endif

// `sum(j in lo..hi: elem)`: lane l adds elements l, l + 32, ... in order (from -0.0 for f32),
// then lane l adds lane (l ^ k)'s partial for k = 16, 8, 4, 2, 1. Check false: no element can
// fail (ranges.py proved it), so no error test per element and no error merge.
template <typename T, bool Check = true>
struct XlSumPass {
    T part[XL_PASS_LANES];
    XlLaneErr first = {XL_NO_INDEX, {0, 0, 0}};
    int32_t stopped = -1;
    XL_DEVICE XlSumPass() {
        for (int l = 0; l < XL_PASS_LANES; ++l) part[l] = xl_sum_identity<T>();
    }
    template <typename Elem>
    XL_DEVICE void add(int64_t j, int32_t lane, Elem&& elem) {
        T v{};
        if (xl_pass_element<Check>(j, lane, elem, first, stopped, v)) part[lane] = xl_sum_add(part[lane], v);
    }
    XL_DEVICE T finish(XlErr& err, int32_t key) {
        if (Check) xl_lane_err_finish(err, key, first);
#if XL_ON_GPU
        const T acc = xl_warp_sum(part[0]);
        return Check && err.code ? T(0) : acc;
#else
        for (int k = 16; k >= 1; k >>= 1) {
            T next[XL_REDUCE_LANES];
            for (int l = 0; l < XL_REDUCE_LANES; ++l) next[l] = xl_sum_add(part[l], part[l ^ k]);
            for (int l = 0; l < XL_REDUCE_LANES; ++l) part[l] = next[l];
        }
        return Check && err.code ? T(0) : part[0];
#endif
    }
};

template <typename T, bool Check = true, typename Elem>
XL_DEVICE T xl_reduce_sum(XlErr& err, int32_t key, int32_t lo, int32_t hi, Elem elem) {
    XlSumPass<T, Check> pass;
    xl_reduce_pass(lo, hi, [&](int64_t j, int32_t lane) { pass.add(j, lane, elem); });
    return pass.finish(err, key);
}

// Sums left in lanes (XlRowSum): after a transposed butterfly over R rows (or positions) each
// lane holds one row's sum; the CPU build keeps all R.
template <typename T, int R>
struct XlRowSum {
#if XL_ON_GPU
    T v;  // this lane's row's sum (xl_row_of_lane)
    XL_DEVICE T of(int32_t) const { return v; }
#else
    T v[R];
    T of(int32_t r) const { return v[r]; }
#endif
};

#if XL_ON_GPU
// The row whose sum lane l holds after xl_transposed_sum over R rows: its top log2(R) bits.
template <int R>
XL_DEVICE int32_t xl_row_of_lane() {
    return R == 1 ? 0 : (int32_t)((threadIdx.x & 31u) / (32u / R));
}

// xl_reduce_sum's butterfly for R rows at once, part[r] this lane's partial of row r. At step k
// while more than one row is left, a lane keeps the half of its rows that its bit k selects (the
// upper half if set) and adds its partner's partial of each (own + other, as there), sending the
// other half: every value it computes is the one the row's own butterfly computes in that lane
// (its partner kept the same rows). Once one row is left, the plain butterfly. 2R - 1 + (5 -
// log2 R) shuffles instead of 5R; lane l ends with row xl_row_of_lane<R>()'s sum.
template <typename T, int R, int N = R, int K = 16>
XL_DEVICE T xl_transposed_sum(T (&part)[R]) {
    static_assert(R >= 1 && R <= 32 && (R & (R - 1)) == 0, "rows per tile: a power of two <= 32");
    if constexpr (K == 0) {
        return part[0];
    } else {
        if constexpr (N > 1) {  // N rows left: keep half, send half
            const bool upper = (threadIdx.x & (unsigned)K) != 0u;
#pragma unroll
            for (int r = 0; r < N / 2; ++r) {
                const T send = upper ? part[r] : part[r + N / 2];
                const T keep = upper ? part[r + N / 2] : part[r];
                part[r] = xl_sum_add(keep, __shfl_xor_sync(0xFFFFFFFFu, send, K));
            }
        } else {
            part[0] = xl_sum_add(part[0], __shfl_xor_sync(0xFFFFFFFFu, part[0], K));
        }
        return xl_transposed_sum<T, R, (N > 1 ? N / 2 : 1), K / 2>(part);
    }
}
#endif

// The largest power of two <= n (n >= 1).
#if XL_ON_GPU
__host__ __device__
#endif
constexpr int xl_pow2_at_most(int n) {
    int p = 1;
    while (2 * p <= n) p *= 2;
    return p;
}

// A weight-once tile's S <= 64 sums left in lanes (xl_sum_tile; a tail that runs on a lane:
// xl_group_tails): the first P = the largest power of two <= min(S, 32) by a transposed butterfly
// (sum s in lanes s * 32 / P ...), the other S - P, in every lane, by plain butterflies. A group of
// 9 positions so shuffles 8 partials and 1, where a transposed butterfly over all of them would
// shuffle 16 (7 of them empty). The CPU build keeps all S.
template <typename T, int S>
struct XlGroupSum {
    static_assert(S >= 1 && S <= 64, "sums per weight-once tile: at most 64");
#if XL_ON_GPU
    static constexpr int P = xl_pow2_at_most(S < 32 ? S : 32);
    T v;                            // this lane's sum among the first P (xl_row_of_lane<P>)
    T rest[S > P ? S - P : 1];      // sums P .. S - 1
    XL_DEVICE T of(int32_t s) const {
        T x = v;
#pragma unroll
        for (int q = 0; q < S - P; ++q)
            if (s == P + q) x = rest[q];  // (selects: an index into registers would go to memory)
        return x;
    }
#else
    T v[S];
    T of(int32_t s) const { return v[s]; }
#endif
};

// A part of a tile's element, x(args...); with Check, x(args..., err), which may fail (an index
// the checker could not prove, a pool's owner check): `failed` then says so.
template <bool Check, typename X, typename... Args>
XL_DEVICE auto xl_shared_part(bool& failed, X& x, Args... args) {
    if constexpr (Check) {
        XlErr e = {0, 0, 0};
        const auto v = x(args..., e);
        failed |= e.code != 0;
        return v;
    } else {
        return x(args...);
    }
}

// A weight-once tile's stop: the same for every sum (an int), or sum (r, g)'s own, hi(r, g).
XL_HD int32_t xl_tile_stop(int32_t hi, int32_t, int32_t) { return hi; }
template <typename Hi>
XL_HD int32_t xl_tile_stop(Hi& hi, int32_t r, int32_t g) { return hi(r, g); }

// The sums of a weight-once tile (xl_lanes_grouped): R rows times n <= G positions, from the same
// lo, sum s = g * R + r (position g, row r) being sum(j in lo..hi(r, g): elem(r, g, j, w(r, j,
// c(j)), a(g, j, c(j)), c(j))), each in the order of xl_reduce_sum (lane l adds elements l, l +
// 32, ... then the butterfly). c(j) -- the part the same for every iteration of the tile (a norm's
// gain, a pool read's checked page) -- is read once per element, w(r, j, c) -- the part the same
// for every position (the weight, a V row) -- once for all positions, a(g, j, c) -- the part the
// same for every row (the activation, its normalisation, an attention weight) -- once for all
// rows; each only where some sum holding it has element j. `hi` is an int, or (a stop that reads
// the iteration: attention's causal range) hi(r, g). Check: elements may fail; every one is
// evaluated (one that failed read safe substitutes) and false says one did (the tile then runs
// an iteration at a time: xl_lanes_grouped). Into out[s] for every lane (a tail that the warp
// runs), or into an XlGroupSum (a tail that runs on a lane: xl_group_tails).
template <typename T, int R, int G, bool Check, typename Hi, typename W, typename A, typename C, typename Elem>
XL_DEVICE bool xl_tile_partials(int32_t lo, Hi& hi, int32_t n, T (&acc)[R * G], W& w, A& a, C& c, Elem& elem) {
    bool failed = false;
#if XL_ON_GPU
    constexpr bool ragged = !XlSame<Hi, int32_t>::value;  // each sum its own stop
    int32_t stop[R * G], row_stop[R], position_stop[G], end = xl_tile_stop(hi, 0, 0);
    if constexpr (ragged) {
        end = lo;
#pragma unroll
        for (int r = 0; r < R; ++r) row_stop[r] = lo;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            position_stop[g] = lo;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                stop[g * R + r] = g < n ? xl_tile_stop(hi, r, g) : lo;
                position_stop[g] = xl_max(position_stop[g], stop[g * R + r]);
                row_stop[r] = xl_max(row_stop[r], stop[g * R + r]);
            }
            end = xl_max(end, position_stop[g]);
        }
    }
#pragma unroll
    for (int s = 0; s < R * G; ++s) acc[s] = xl_sum_identity<T>();
    // unrolled: several elements' loads in flight at once (a 9-position pass measured 540 -> 453
    // us on an H100 with one row a warp, team 32; docs/benchmarks.md); with several rows less
    // (XL_TILE_UNROLL)
    XL_PRAGMA(unroll (R == 1 ? 4 : XL_TILE_UNROLL))
    for (int64_t j = (int64_t)lo + XL_LANE; j < (int64_t)end; j += 32) {
        const auto cj = xl_shared_part<Check>(failed, c, (int32_t)j);
        decltype(xl_shared_part<Check>(failed, w, 0, 0, cj)) wr[R];
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (!ragged || j < row_stop[r]) wr[r] = xl_shared_part<Check>(failed, w, r, (int32_t)j, cj);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g < n && (!ragged || j < position_stop[g])) {
                const auto ag = xl_shared_part<Check>(failed, a, g, (int32_t)j, cj);
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (!ragged || j < stop[g * R + r])
                        acc[g * R + r] = xl_sum_add(acc[g * R + r], xl_shared_part<Check>(failed, elem, r, g, (int32_t)j, wr[r], ag, cj));
            }
        }
    }
    if (Check) failed = __any_sync(0xFFFFFFFFu, failed);
#endif
    return !failed;
}

// The CPU build: each sum on its own, by xl_reduce_sum (the same bits); false where an element failed.
template <typename T, int R, bool Check, typename Hi, typename W, typename A, typename C, typename Elem>
XL_DEVICE bool xl_tile_sum_alone(int32_t lo, Hi& hi, int32_t s, T& out, W& w, A& a, C& c, Elem& elem) {
    XlErr e = {0, 0, 0};
    const int32_t r = s % R, g = s / R;
    out = xl_reduce_sum<T, Check>(e, 1, lo, xl_tile_stop(hi, r, g), [&](int32_t j, [[maybe_unused]] XlErr& ee) -> T {
        if constexpr (Check) {  // (a shared part's error fails the element too)
            const auto cj = c(j, ee);
            return elem(r, g, j, w(r, j, cj, ee), a(g, j, cj, ee), cj, ee);
        } else {
            const auto cj = c(j);
            return elem(r, g, j, w(r, j, cj), a(g, j, cj), cj);
        }
    });
    return !(Check && e.code);
}

template <typename T, int R, int G, bool Check = false, typename Hi, typename W, typename A, typename C, typename Elem>
XL_DEVICE bool xl_sum_tile(int32_t lo, Hi hi, int32_t n, T (&out)[R * G], W w, A a, C c, Elem elem) {
#if XL_ON_GPU
    if (!xl_tile_partials<T, R, G, Check>(lo, hi, n, out, w, a, c, elem)) return false;
#pragma unroll
    for (int s = 0; s < R * G; ++s)
        if (s < n * R)
            for (int k = 16; k >= 1; k >>= 1) out[s] = xl_sum_add(out[s], __shfl_xor_sync(0xFFFFFFFFu, out[s], k));
#else
    for (int32_t s = 0; s < n * R; ++s)
        if (!xl_tile_sum_alone<T, R, Check>(lo, hi, s, out[s], w, a, c, elem)) return false;
#endif
    return true;
}

template <typename T, int R, int G, bool Check = false, typename Hi, typename W, typename A, typename C, typename Elem>
XL_DEVICE bool xl_sum_tile(int32_t lo, Hi hi, int32_t n, XlGroupSum<T, R * G>& out, W w, A a, C c, Elem elem) {
#if XL_ON_GPU
    constexpr int P = XlGroupSum<T, R * G>::P;
    T acc[R * G];
    if (!xl_tile_partials<T, R, G, Check>(lo, hi, n, acc, w, a, c, elem)) return false;
    T first[P];
#pragma unroll
    for (int s = 0; s < P; ++s) first[s] = acc[s];
    out.v = xl_transposed_sum<T, P>(first);
#pragma unroll
    for (int q = 0; q < R * G - P; ++q) {
        T x = acc[P + q];
        if (P + q < n * R)  // (the same on every lane)
            for (int k = 16; k >= 1; k >>= 1) x = xl_sum_add(x, __shfl_xor_sync(0xFFFFFFFFu, x, k));
        out.rest[q] = x;
    }
#else
    for (int32_t s = 0; s < n * R; ++s)
        if (!xl_tile_sum_alone<T, R, Check>(lo, hi, s, out.v[s], w, a, c, elem)) return false;
#endif
    return true;
}

// Each sum's tail of a tile (XlGroupSum), s < n: on the GPU sum s < P on the first lane holding
// it, sum P + q on the second lane of sum q's (32 / P >= 2 lanes each) or, with P = 32, on lane q
// after its first; in the CPU build one after another.
template <int S, typename Tail>
XL_DEVICE void xl_group_tails(int32_t n, Tail tail) {
#if XL_ON_GPU
    constexpr int P = XlGroupSum<float, S>::P, span = 32 / P;
    const int32_t lane = (int32_t)(threadIdx.x & 31u), slot = lane % span;
    if (slot == 0 && lane / span < n) tail(lane / span);
    if constexpr (S > P) {
        const int32_t q = span == 1 ? lane : (slot == 1 ? lane / span : S);
        if (q < S - P && P + q < n) tail(P + q);
    }
#else
    for (int32_t s = 0; s < n; ++s) tail(s);
#endif
}

// A tile's sums (xl_lanes_grouped's rows path): S sums over the same j range (q, k and v of one
// input) for each of its rows rlo <= r < rhi, sum k of row r into out[k]: sum(j in lo..hi: elem(k,
// r, j, x(j))), x(j) -- the part the same for every row (the activation; with Check x(j, err):
// xl_shared_part) -- read once per element for all of them. On the GPU a lane keeps a partial of
// every sum of every row, adding elements l, l + 32, ... in order as xl_reduce_sum does, with the
// loads of all of them in flight together; then a transposed butterfly per sum (xl_transposed_sum)
// leaves row r's sums in lanes r * 32 / R ... The CPU build computes each with xl_reduce_sum: the
// same bits. Check: elements may fail; every one is evaluated (one that failed read safe
// substitutes) and false says one did (the tile then runs an iteration at a time:
// xl_lanes_grouped).
// How far a lane's elements of a rows tile are unrolled (R rows' loads each; an A/B switch): by 2
// the real pair's plain greedy was 5.8% slower at batch 1 (H200, docs/benchmarks.md).
#ifndef XL_ROWS_UNROLL
#define XL_ROWS_UNROLL 4
#endif
// The most partials a lane keeps in one pass (S sums x R rows); more take a pass per sum.
#ifndef XL_ROWS_PARTIALS
#define XL_ROWS_PARTIALS 32
#endif
template <typename T, int R, bool Check, int S, typename X, typename Elem>
XL_DEVICE bool xl_sum_rows(int32_t lo, int32_t hi, int32_t rlo, int32_t rhi, XlRowSum<T, R>* const (&out)[S], X x,
                           Elem elem) {
#if XL_ON_GPU
    if constexpr (S > 1 && S * R > XL_ROWS_PARTIALS) {
        bool ok = true;
#pragma unroll
        for (int k = 0; k < S; ++k) {
            XlRowSum<T, R>* const one[1] = {out[k]};
            ok = ok && xl_sum_rows<T, R, Check, 1>(lo, hi, rlo, rhi, one, x, [&](int32_t, auto... a) { return elem(k, a...); });
        }
        return ok;
    }
    T acc[S][R];
    bool failed = false;
#pragma unroll
    for (int k = 0; k < S; ++k)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[k][r] = xl_sum_identity<T>();
    XL_PRAGMA(unroll XL_ROWS_UNROLL)
    for (int64_t j = (int64_t)lo + XL_LANE; j < (int64_t)hi; j += 32) {
        const auto xj = xl_shared_part<Check>(failed, x, (int32_t)j);
#pragma unroll
        for (int k = 0; k < S; ++k) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r >= rlo && r < rhi) {
                    if constexpr (Check) {  // every element evaluated: one that failed read safe substitutes
                        XlErr e = {0, 0, 0};
                        acc[k][r] = xl_sum_add(acc[k][r], elem(k, r, (int32_t)j, xj, e));
                        failed |= e.code != 0;
                    } else {
                        acc[k][r] = xl_sum_add(acc[k][r], elem(k, r, (int32_t)j, xj));
                    }
                }
            }
        }
    }
    if (Check && __any_sync(0xFFFFFFFFu, failed)) return false;
#pragma unroll
    for (int k = 0; k < S; ++k) out[k]->v = xl_transposed_sum<T, R>(acc[k]);
#else
    for (int k = 0; k < S; ++k) {
        for (int32_t r = rlo; r < rhi; ++r) {
            XlErr e = {0, 0, 0};
            out[k]->v[r] = xl_reduce_sum<T, Check>(e, 1, lo, hi, [&](int32_t j, [[maybe_unused]] XlErr& ee) -> T {
                if constexpr (Check) return elem(k, r, j, x(j, ee), ee);  // (the shared part's error fails it too)
                else return elem(k, r, j, x(j));
            });
            if (Check && e.code) return false;
        }
    }
#endif
    return true;
}

// Each row's tail, rlo <= r < rhi: on the GPU on the first lane holding the row's sums, the
// rows side by side; in the CPU build one after another.
template <int R, typename Tail>
XL_DEVICE void xl_rows_tails(int32_t rlo, int32_t rhi, Tail tail) {
#if XL_ON_GPU
    const int32_t r = xl_row_of_lane<R>();
    if ((threadIdx.x & (32u / R - 1u)) == 0u && r >= rlo && r < rhi) tail(r);
#else
    for (int32_t r = rlo; r < rhi; ++r) tail(r);
#endif
}

// The best of (value, index) pairs: the greatest (or least) key, ties to the lower index;
// index XL_NO_INDEX is "no element yet". Every order of combining gives the same pair.
template <typename T>
XL_HD void xl_best_merge(T& v, int64_t& i, T ov, int64_t oi, bool greatest) {
    if (oi == XL_NO_INDEX) return;
    if (i != XL_NO_INDEX) {
        const uint32_t a = xl_reduce_key(ov), b = xl_reduce_key(v);
        if (a == b ? oi > i : (greatest ? a < b : a > b)) return;
    }
    v = ov;
    i = oi;
}

#if XL_ON_GPU
// The warp's best pair by xl_best_merge's order, on every lane: the least key (the value's order
// key, reversed for the greatest), then the lowest index among the lanes that hold it, each a
// redux.sync minimum (a butterfly of (value, index) pairs took five rounds of three shuffles and
// a branch: ~1,200 cycles, kv_plan's line profile). An index is an int32 of lo..hi < INT32_MAX:
// its order as an unsigned key, 0xFFFFFFFF for a lane without an element. -DXL_REDUX_BEST=0: the
// butterfly, for A/B runs.
#ifndef XL_REDUX_BEST
#define XL_REDUX_BEST 1
#endif
template <typename T>
XL_DEVICE void xl_warp_best(T& v, int64_t& at, bool greatest) {
    const bool has = at != XL_NO_INDEX;
    const uint32_t key = greatest ? ~xl_reduce_key(v) : xl_reduce_key(v);
    const uint32_t least = __reduce_min_sync(0xFFFFFFFFu, has ? key : 0xFFFFFFFFu);
    const uint32_t index = has && key == least ? (uint32_t)(int32_t)at ^ 0x80000000u : 0xFFFFFFFFu;
    const uint32_t lowest = __reduce_min_sync(0xFFFFFFFFu, index);
    if (lowest == 0xFFFFFFFFu) return;  // no lane has an element (every v is still T(0))
    v = __shfl_sync(0xFFFFFFFFu, v, __ffs(__ballot_sync(0xFFFFFFFFu, index == lowest)) - 1);
    at = (int64_t)(int32_t)(lowest ^ 0x80000000u);
}
#endif

// max/min/argmax/argmin over j in lo..hi: finish returns the best element's index (XL_NO_INDEX
// for an empty range) and leaves its value in *best. (Every order of taking the elements gives
// the same pair: xl_best_merge.)
template <typename T, bool Check = true>
struct XlBestPass {
    bool greatest;
    T v = T(0);
    int64_t at = XL_NO_INDEX;
    XlLaneErr first = {XL_NO_INDEX, {0, 0, 0}};
    int32_t stopped = -1;
    XL_DEVICE explicit XlBestPass(bool greatest_) : greatest(greatest_) {}
    template <typename Elem>
    XL_DEVICE void add(int64_t j, int32_t lane, Elem&& elem) {
        T x{};
        if (xl_pass_element<Check>(j, lane, elem, first, stopped, x)) xl_best_merge(v, at, x, j, greatest);
    }
    XL_DEVICE int64_t finish(XlErr& err, int32_t key, T* best) {
        if (Check) xl_lane_err_finish(err, key, first);
#if XL_ON_GPU && XL_REDUX_BEST
        xl_warp_best(v, at, greatest);
#elif XL_ON_GPU
        for (int k = 16; k >= 1; k >>= 1) {
            const T ov = __shfl_xor_sync(0xFFFFFFFFu, v, k);
            const int64_t oi = __shfl_xor_sync(0xFFFFFFFFu, (long long)at, k);
            xl_best_merge(v, at, ov, oi, greatest);
        }
#endif
        *best = v;
        return at;
    }
};

template <typename T, bool Check = true, typename Elem>
XL_DEVICE int64_t xl_reduce_best(XlErr& err, int32_t key, int32_t lo, int32_t hi, bool greatest, T* best, Elem elem) {
    XlBestPass<T, Check> pass(greatest);
    xl_reduce_pass(lo, hi, [&](int64_t j, int32_t lane) { pass.add(j, lane, elem); });
    return pass.finish(err, key, best);
}

// argmax/argmin: the index, -1 for an empty range.
XL_HD int32_t xl_best_index(int64_t at) { return at == XL_NO_INDEX ? -1 : (int32_t)at; }

// The value of max/min: the best element; for an empty range the least (max) or greatest
// (min) value of the type. A NaN comes out as the canonical NaN.
XL_HD float xl_best_value(float v, int64_t at, bool greatest) {
    if (at == XL_NO_INDEX) return greatest ? -XL_INF : XL_INF;
    return v != v ? XL_NAN : v;
}
XL_HD int32_t xl_best_value(int32_t v, int64_t at, bool greatest) {
    return at != XL_NO_INDEX ? v : (greatest ? (int32_t)0x80000000 : 0x7FFFFFFF);
}
XL_HD uint32_t xl_best_value(uint32_t v, int64_t at, bool greatest) {
    return at != XL_NO_INDEX ? v : (greatest ? 0u : 0xFFFFFFFFu);
}

#if XL_ON_GPU
// Block-wide inclusive sum of one value per thread (all threads call it); *total: the block's sum.
__device__ uint32_t xl_block_inclusive_sum(uint32_t v, uint32_t* total) {
    __shared__ uint32_t warp_sums[32];
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5), warps = (int)((blockDim.x + 31u) >> 5);
    uint32_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    uint32_t before = 0u, all = 0u;
    for (int w = 0; w < warps; ++w) {
        before += w < warp ? warp_sums[w] : 0u;
        all += warp_sums[w];
    }
    __syncthreads();
    *total = all;
    return before + x;
}

// Block-wide minimum of one 64-bit key per thread (all threads call it).
__device__ uint64_t xl_block_min_u64(uint64_t v) {
    __shared__ uint64_t warp_mins[32];
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5), warps = (int)((blockDim.x + 31u) >> 5);
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t y = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = y < v ? y : v;
    }
    if (lane == 0) warp_mins[warp] = v;
    __syncthreads();
    uint64_t best = warp_mins[0];
    for (int w = 1; w < warps; ++w) best = warp_mins[w] < best ? warp_mins[w] : best;
    __syncthreads();
    return best;
}
#else
inline uint32_t xl_block_inclusive_sum(uint32_t v, uint32_t* total) { *total = v; return v; }
inline uint64_t xl_block_min_u64(uint64_t v) { return v; }
#endif

#if XL_ON_GPU
// Whether `x` holds on some thread of the span (all of them call it).
__device__ bool xl_span_any(const XlSpan& sp, int x) {
    const int any = __syncthreads_or(x);
    if (!sp.grid) return any != 0;
    const int parity = xl_grid_set(*sp.grid, 0, any ? 1u : 0u);
    xl_grid_barrier(*sp.grid);
    int seen = 0;
    for (int b = (int)threadIdx.x; b < sp.grid->blocks; b += (int)blockDim.x) seen |= (int)xl_grid_part(*sp.grid, parity, b, 0);
    return __syncthreads_or(seen) != 0;
}
#else
inline bool xl_span_any(const XlSpan&, int x) { return x != 0; }
#endif

XL_HD bool xl_is_sum(int op) { return op == XL_SCAN || op == XL_SUM || op == XL_COUNT; }

// The span's block's part of collective k of a group (op over the contributions in column k,
// word: their kind): a scan's, sum's or count's total over the block's slots (a scan's results
// so far: the prefix within the block), or the least (key, slot), the key complemented for
// max: ties go to the lowest id. By all threads of the block.
XL_DEVICE uint64_t xl_collective_part(const XlColl& c, int k, int op, int word, const XlSpan& sp) {
    const int32_t t = XL_THREAD, nt = XL_THREADS;
    if (xl_is_sum(op)) {
        uint32_t carry = 0u;  // wrapping sums: any order of additions gives the same bits
        for (int32_t base = sp.lo; base < sp.hi; base += nt) {
            const int32_t i = base + t;
            const bool in = i < sp.hi && c.part[i];
            const uint32_t x = in ? c.contrib[(size_t)k * c.slots + i] : 0u;
            const uint32_t v = op == XL_COUNT ? (x != 0u ? 1u : 0u) : x;
            uint32_t chunk = 0u;
            const uint32_t inclusive = xl_block_inclusive_sum(v, &chunk);
            if (in && op == XL_SCAN) c.result[(size_t)k * c.slots + i] = carry + inclusive - v;
            carry += chunk;
        }
        return carry;
    }
    const bool greatest = op == XL_MAX_OF || op == XL_ARGMAX;
    uint64_t best = ~0ull;
    for (int32_t base = sp.lo; base < sp.hi; base += nt) {
        const int32_t i = base + t;
        uint64_t mine = ~0ull;
        if (i < sp.hi && c.part[i]) {
            const uint32_t key = xl_order_key(c.contrib[(size_t)k * c.slots + i], word);
            mine = ((uint64_t)(greatest ? ~key : key) << 32) | (uint64_t)(uint32_t)i;
        }
        const uint64_t chunk = xl_block_min_u64(mine);
        best = chunk < best ? chunk : best;
    }
    return best;
}

// Collective k's results, from the parts of the blocks before the span's (`before`, a sum's)
// and of all (`all`: the total, or the least (key, slot)).
XL_DEVICE void xl_collective_results(const XlColl& c, int k, int op, uint32_t before, uint64_t all,
                                     const int32_t* active, const XlSpan& sp) {
    const int32_t t = XL_THREAD, nt = XL_THREADS;
    if (xl_is_sum(op)) {
        if (op != XL_SCAN || before != 0u)  // (one block's scan is already complete)
            for (int32_t i = sp.lo + t; i < sp.hi; i += nt)
                if (c.part[i]) {
                    uint32_t& result = c.result[(size_t)k * c.slots + i];
                    result = op == XL_SCAN ? before + result : (uint32_t)all;
                }
    } else if (all != ~0ull) {  // (no participant left: nothing to give)
        const int32_t winner = (int32_t)(uint32_t)(all & 0xFFFFFFFFull);
#if XL_ON_GPU
        const uint32_t theirs = __ldcg(&c.contrib[(size_t)k * c.slots + winner]);  // (another block's, over the grid)
#else
        const uint32_t theirs = c.contrib[(size_t)k * c.slots + winner];
#endif
        const uint32_t value = (op == XL_ARGMIN || op == XL_ARGMAX) ? (uint32_t)active[winner] : theirs;
        XL_BLOCK_SYNC();
        for (int32_t i = sp.lo + t; i < sp.hi; i += nt)
            if (c.part[i]) c.result[(size_t)k * c.slots + i] = value;
    }
}

// Operation k of a group's packed operations or word kinds (4 bits each: Stage_<name>::ops).
XL_HD int xl_nibble(uint32_t packed, int k) { return (int)((packed >> (4 * k)) & 15u); }

#if XL_ON_GPU
// -DXL_WARP_COLLECTIVES=0 takes every group block-wide, one collective at a time (an A/B switch).
#ifndef XL_WARP_COLLECTIVES
#define XL_WARP_COLLECTIVES 1
#endif
// A group over at most 32 slots of one block, by its first warp, a lane per slot: each collective
// by shuffles, no block barrier but the one at the end. Block-wide, each collective cost two or
// three barriers of the whole block (the real pair's cost_batch, 8 collectives over 8 requests:
// 8 us a round on an H100, team of 16 warps). The same bits: sums wrap (any order of additions
// gives the same bits), a scan's prefix is the sum of the slots before, and the least (key,
// slot) is the same in any order. The columns are wherever the caller keeps them: lane l's
// flag at part[l], its contribution and result of collective k at [k * stride + l] (XlColl's,
// from sp.lo on, in global memory; or XlFew's, in the block's shared memory).
XL_DEVICE void xl_collectives_lanes(const int32_t* part, const uint32_t* contrib, uint32_t* result, size_t stride,
                                    int n, uint32_t ops, uint32_t words, const int32_t* active, const XlSpan& sp) {
    const int32_t lane = XL_THREAD;
    const bool in = sp.lo + lane < sp.hi && part[lane];
    for (int k = 0; k < n; ++k) {
        const int op = xl_nibble(ops, k);
        const uint32_t x = in ? contrib[k * stride + lane] : 0u;
        uint32_t& mine = result[k * stride + (in ? lane : 0)];
        if (xl_is_sum(op)) {
            const uint32_t v = op == XL_COUNT ? (x != 0u ? 1u : 0u) : x;
            uint32_t inclusive = v;
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
                if (lane >= o) inclusive += y;
            }
            const uint32_t total = __shfl_sync(0xFFFFFFFFu, inclusive, 31);
            if (in) mine = op == XL_SCAN ? inclusive - v : total;
        } else {
            const bool greatest = op == XL_MAX_OF || op == XL_ARGMAX;
            const uint32_t key = xl_order_key(x, xl_nibble(words, k));
            uint64_t best = in ? ((uint64_t)(greatest ? ~key : key) << 32) | (uint64_t)(uint32_t)lane : ~0ull;
            for (int o = 16; o > 0; o >>= 1) {
                const uint64_t y = __shfl_xor_sync(0xFFFFFFFFu, best, o);
                best = y < best ? y : best;
            }
            if (best != ~0ull) {  // (no participant: nothing to give)
                const int32_t winner = (int32_t)(uint32_t)(best & 0xFFFFFFFFull);
                const uint32_t value = (op == XL_ARGMIN || op == XL_ARGMAX) ? (uint32_t)active[sp.lo + winner]
                                                                          : contrib[k * stride + winner];
                __syncwarp();
                if (in) mine = value;
            }
        }
    }
}

XL_DEVICE void xl_collectives_warp(const XlColl& c, int n, uint32_t ops, uint32_t words, const int32_t* active,
                                   const XlSpan& sp) {
    xl_collectives_lanes(c.part + sp.lo, c.contrib + sp.lo, c.result + sp.lo, (size_t)c.slots, n, ops, words,
                         active, sp);
}

// A collective stage over at most 32 slots of one block (run_collective_few, kernel.cuh.j2): its
// participants keep their frames in registers, and the columns of its groups and each one's flag
// are in the block's shared memory where the kernel lends some (XlColl::few: the mega-kernel's
// phase-2 team, whose blocks hold no request), else in XlColl's. No static shared memory: 2 KB
// more take the real pair's blocks (a 188 KB request copy) past the 196 KB carve-out step (an L1
// of 28 KB, not 60), and that build ran 3% slower. By default with teams of one warp only: on an
// H200 (docs/benchmarks.md, twenty-fifth session) it made xl_spec's target point 5% faster in
// deterministic mode and 14% in fast mode, and the real pair 1-3% slower end to end, though its
// phase 2's marks were 26% fewer cycles. -DXL_FEW_COLLECTIVES=0 or 1 for A/B runs.
#ifndef XL_FEW_COLLECTIVES
#define XL_FEW_COLLECTIVES (XL_TEAM_WARPS == 1)
#endif
struct XlFew {
    uint32_t contrib[XL_COLL_WIDTH * 32];
    uint32_t result[XL_COLL_WIDTH * 32];
    int32_t part[32];
};
#endif

// A group of `n` collectives (operation k and its contributions' word kind: nibble k of `ops`
// and of `words`, the contributions in column k) over the slots that take part (c.part), in
// slot order, which is request-id order: each participant's results in c.result, column k.
// One pass for the group: each block its parts, then over the grid one exchange of all of them
// (a barrier), combined as wrapping sums and the least (key, slot), which gives the bits of one
// block's pass. By all threads of the span. False: aborted.
XL_DEVICE bool xl_collectives(const XlColl& c, int n, uint32_t ops, uint32_t words, const int32_t* active,
                              const XlSpan& sp) {
#if XL_ON_GPU
    if (XL_WARP_COLLECTIVES && !sp.grid && sp.hi - sp.lo <= 32) {
        if (XL_THREAD < 32) xl_collectives_warp(c, n, ops, words, active, sp);
        XL_BLOCK_SYNC();
        return true;
    }
    if (sp.grid) {
        XlGrid& g = *sp.grid;
        int parity = 0;
        for (int k = 0; k < n; ++k)
            parity = xl_grid_set(g, k, xl_collective_part(c, k, xl_nibble(ops, k), xl_nibble(words, k), sp));
        if (!xl_grid_barrier(g)) return false;
        for (int k = 0; k < n; ++k) {
            uint32_t earlier = 0u, total = 0u;
            uint64_t best = ~0ull;
            for (int b = (int)threadIdx.x; b < g.blocks; b += (int)blockDim.x) {
                const uint64_t v = xl_grid_part(g, parity, b, k);
                earlier += b < (int)blockIdx.x ? (uint32_t)v : 0u;
                total += (uint32_t)v;
                best = v < best ? v : best;
            }
            const int op = xl_nibble(ops, k);
            uint32_t before = 0u, sum = 0u;
            if (xl_is_sum(op)) {
                xl_block_inclusive_sum(earlier, &before);  // (the block's totals)
                xl_block_inclusive_sum(total, &sum);
            }
            xl_collective_results(c, k, op, before, xl_is_sum(op) ? sum : xl_block_min_u64(best), active, sp);
        }
        XL_BLOCK_SYNC();
        return true;
    }
#endif
    for (int k = 0; k < n; ++k) {
        const int op = xl_nibble(ops, k);
        xl_collective_results(c, k, op, 0u, xl_collective_part(c, k, op, xl_nibble(words, k), sp), active, sp);
    }
    XL_BLOCK_SYNC();
    return true;
}
