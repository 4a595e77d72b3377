// xlgen runtime: the exact semantics of docs/semantics.md for C++ and CUDA.
// The Python twin is xlgen/runtime/ops.py (+ builtins.py); keep them in step.
// Compiles three ways: nvcc/NVRTC for the GPU, and the system C++ compiler for
// the CPU build, where the __device__ decorations are mapped away below.
#pragma once

#if defined(__CUDACC_RTC__)
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
typedef signed char int8_t;
#else
#include <stdint.h>
#include <math.h>
#include <string.h>
#endif

#if defined(__CUDACC__)
#define XL_HD __device__ __forceinline__  // the GPU build calls these from device code only
#define XL_DEVICE __device__ __forceinline__
#define XL_ON_GPU 1
#else
#define XL_HD inline
#define XL_DEVICE inline
#define XL_ON_GPU 0
#endif

#if XL_ON_GPU  // NVRTC has no __builtin_huge_valf / __builtin_nanf
#define XL_INF (__int_as_float(0x7F800000))
#define XL_NAN (__int_as_float(0x7FC00000))
#else
#define XL_INF (__builtin_huge_valf())
#define XL_NAN (__builtin_nanf(""))
#endif

// Runtime error codes (ops.py ERR_*).
enum { XL_ERR_DIV_ZERO = 1, XL_ERR_INDEX = 2, XL_ERR_SHIFT = 3, XL_ERR_CAST = 4, XL_ERR_BUILTIN = 5, XL_ERR_WATCHDOG = 6 };

// A statement's first runtime error. `key` is the failing operation's position
// in left-to-right evaluation order, so the earliest error wins whatever order
// the compiler evaluated the operands in (see xlgen/emit_cpp.py).
struct XlErr {
    int32_t code;
    int32_t line;
    int32_t key;
};

XL_HD void xl_err_set(XlErr& e, int32_t key, int32_t code, int32_t line) {
    if (e.code == 0 || key < e.key) {
        e.code = code;
        e.line = line;
        e.key = key;
    }
}

// A helper function failed: report its error to the caller's statement under the call's key.
template <typename T>
XL_HD T xl_raise(XlErr& caller, int32_t key, const XlErr& inner) {
    xl_err_set(caller, key, inner.code, inner.line);
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

XL_HD int32_t xl_div(XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if (b == 0) { xl_err_set(e, k, XL_ERR_DIV_ZERO, line); return 0; }
    if (b == -1) return xl_neg(a);  // INT_MIN / -1 wraps instead of trapping
    return a / b;
}
XL_HD int32_t xl_rem(XlErr& e, int32_t k, int32_t line, int32_t a, int32_t b) {
    if (b == 0) { xl_err_set(e, k, XL_ERR_DIV_ZERO, line); return 0; }
    if (b == -1) return 0;
    return a % b;
}
XL_HD uint32_t xl_div(XlErr& e, int32_t k, int32_t line, uint32_t a, uint32_t b) {
    if (b == 0) { xl_err_set(e, k, XL_ERR_DIV_ZERO, line); return 0; }
    return a / b;
}
XL_HD uint32_t xl_rem(XlErr& e, int32_t k, int32_t line, uint32_t a, uint32_t b) {
    if (b == 0) { xl_err_set(e, k, XL_ERR_DIV_ZERO, line); return 0; }
    return a % b;
}

// Shift amounts may be i32 or u32; outside 0..31 is a runtime error.
XL_HD bool xl_shift_ok(XlErr& e, int32_t k, int32_t line, int32_t n) {
    if (n < 0 || n > 31) { xl_err_set(e, k, XL_ERR_SHIFT, line); return false; }
    return true;
}
XL_HD bool xl_shift_ok(XlErr& e, int32_t k, int32_t line, uint32_t n) {
    if (n > 31u) { xl_err_set(e, k, XL_ERR_SHIFT, line); return false; }
    return true;
}
template <typename N>
XL_HD int32_t xl_shl(XlErr& e, int32_t k, int32_t line, int32_t a, N n) {
    return xl_shift_ok(e, k, line, n) ? (int32_t)((uint32_t)a << (uint32_t)n) : 0;
}
template <typename N>
XL_HD uint32_t xl_shl(XlErr& e, int32_t k, int32_t line, uint32_t a, N n) {
    return xl_shift_ok(e, k, line, n) ? a << (uint32_t)n : 0u;
}
template <typename N>
XL_HD int32_t xl_shr(XlErr& e, int32_t k, int32_t line, int32_t a, N n) {
    return xl_shift_ok(e, k, line, n) ? a >> (uint32_t)n : 0;  // arithmetic on every supported compiler
}
template <typename N>
XL_HD uint32_t xl_shr(XlErr& e, int32_t k, int32_t line, uint32_t a, N n) {
    return xl_shift_ok(e, k, line, n) ? a >> (uint32_t)n : 0u;
}

XL_HD int32_t xl_abs(int32_t a) { return a < 0 ? xl_neg(a) : a; }

template <typename T>
XL_HD T xl_min(T a, T b) { return (b < a) ? b : a; }
template <typename T>
XL_HD T xl_max(T a, T b) { return (b > a) ? b : a; }
template <typename T>
XL_HD T xl_clamp(T x, T lo, T hi) { return xl_min(xl_max(x, lo), hi); }

// Checked array index: out of range records INDEX and yields 0, a safe index.
XL_HD int32_t xl_idx(XlErr& e, int32_t k, int32_t line, int32_t i, int32_t n) {
    if (i < 0 || i >= n) { xl_err_set(e, k, XL_ERR_INDEX, line); return 0; }
    return i;
}
XL_HD int32_t xl_idx(XlErr& e, int32_t k, int32_t line, uint32_t i, int32_t n) {  // a u32 index is never negative
    if (i >= (uint32_t)n) { xl_err_set(e, k, XL_ERR_INDEX, line); return 0; }
    return (int32_t)i;
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

// Traces store the canonical NaN so that every backend writes the same bits.
XL_HD uint32_t xl_f32_bits(float x) { return x != x ? 0x7FC00000u : xl_float_bits(x); }

XL_HD int32_t xl_f2i(XlErr& e, int32_t k, int32_t line, float x) {
    // No binary32 lies strictly between -2^31 - 1 and -2^31, so `>=` admits exactly INT_MIN.
    if (!(x >= -2147483648.0f && x < 2147483648.0f)) { xl_err_set(e, k, XL_ERR_CAST, line); return 0; }
    return (int32_t)x;
}
XL_HD uint32_t xl_f2u(XlErr& e, int32_t k, int32_t line, float x) {
    if (!(x > -1.0f && x < 4294967296.0f)) { xl_err_set(e, k, XL_ERR_CAST, line); return 0u; }
    return (uint32_t)x;
}

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

XL_HD int32_t xl_b_target_token(XlErr& e, int32_t k, int32_t line, uint32_t seed, int32_t pos, int32_t prev, int32_t vocab) {
    if (vocab < 2) { xl_err_set(e, k, XL_ERR_BUILTIN, line); return 0; }
    return (int32_t)(xl_mix(seed, pos, prev, 0x7A3C5E11u) % (uint32_t)vocab);
}

XL_HD int32_t xl_b_draft_token(XlErr& e, int32_t k, int32_t line, uint32_t seed, int32_t pos, int32_t prev, int32_t vocab, float agree) {
    const int32_t target = xl_b_target_token(e, k, line, seed, pos, prev, vocab);
    // Not `if (e.code)`: `e` is the whole statement's error, and may already hold one from an
    // operand the compiler evaluated first (a later key). This call did not fail, so it must not
    // return a substitute value, which could raise a spurious earlier error (`x % 0`).
    if (vocab < 2) return 0;  // xl_b_target_token recorded BUILTIN
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
    if (n < 0 || n > alen || n > blen) { xl_err_set(e, k, XL_ERR_BUILTIN, line); return 0; }
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
