// The exact math functions of xl_runtime.cuh (docs/semantics.md §16.1), measured: built by
// scripts/math_ulp.py (and tests/test_xlmath.py) with the CPU build's flags into a shared
// library, and by scripts/math_ulp_gpu.cu into the GPU check.
//
//   xlm_eval   the CPU build's result bits for given input bits (NaN canonical)
//   xlm_eval_range  the same for a range of input bit patterns (OpenMP)
//   xlm_sweep  a range of input bit patterns against a reference: binary64 libm, whose
//              result rounded to binary32 is the correctly rounded result except in
//              astronomically rare double-rounding cases
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "xl_runtime.cuh"

extern "C" {

enum { XLM_EXP, XLM_LOG, XLM_TANH, XLM_SIGMOID, XLM_SQRT, XLM_RSQRT, XLM_COUNT };

static inline float xlm_f(int fn, float x) {
    switch (fn) {
        case XLM_EXP: return xl_math_exp(x);
        case XLM_LOG: return xl_math_log(x);
        case XLM_TANH: return xl_math_tanh(x);
        case XLM_SIGMOID: return xl_math_sigmoid(x);
        case XLM_SQRT: return xl_math_sqrt(x);
        default: return xl_math_rsqrt(x);
    }
}

static inline double xlm_ref(int fn, double x) {
    switch (fn) {
        case XLM_EXP: return exp(x);
        case XLM_LOG: return x < 0 ? NAN : log(x);
        case XLM_TANH: return tanh(x);
        case XLM_SIGMOID: {
            if (x >= 0) return 1.0 / (1.0 + exp(-x));
            const double e = exp(x);
            return e / (1.0 + e);
        }
        case XLM_SQRT: return x < 0 ? NAN : sqrt(x);
        default: return x < 0 ? NAN : 1.0 / sqrt(x);
    }
}

static inline uint32_t xlm_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return x != x ? 0x7FC00000u : u;
}

static inline float xlm_float(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// Binary32 values in order as integers (-0 and +0 both 0), for distances in ulps.
static inline int64_t xlm_ord(uint32_t u) {
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7FFFFFFFu) : (int64_t)u;
}

int xlm_functions(void) { return XLM_COUNT; }

void xlm_eval(int fn, const uint32_t* in, uint32_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = xlm_bits(xlm_f(fn, xlm_float(in[i])));
}

// Every input from `start` on, n of them (the GPU check compares these with the GPU's).
void xlm_eval_range(int fn, uint64_t start, uint32_t* out, int64_t n) {
#pragma omp parallel for schedule(static, 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = xlm_bits(xlm_f(fn, xlm_float((uint32_t)(start + (uint64_t)i))));
}

struct XlmResult {
    uint64_t inputs;
    uint64_t not_rounded;     // results other than the correctly rounded one
    uint64_t nan_mismatch;    // NaN where the reference is not, or the reverse
    int64_t max_dist;         // the most ulps (representable steps) from the correctly rounded result
    uint32_t max_dist_input;
    uint32_t max_err_input;
    double max_err;           // the largest |result - exact| / ulp(exact), exact = the binary64 reference
    uint64_t fingerprint;     // sum over inputs of a hash of (input, result bits): compares builds
};

static inline uint64_t xlm_mix(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t xlm_fingerprint_term(uint32_t input, uint32_t result) {
    return xlm_mix(((uint64_t)input << 32) | result);
}

// ulp of the binary32 grid at |v| (v finite): 2^(e-23) for |v| in [2^e, 2^(e+1)), 2^-149 at least.
static inline double xlm_ulp(double v) {
    v = fabs(v);
    if (v < 0x1p-126) return 0x1p-149;
    if (v >= 0x1p128) return 0x1p104;
    int e;
    frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    return ldexp(1.0, e - 1 - 23);
}

void xlm_sweep(int fn, uint64_t lo, uint64_t hi, XlmResult* res) {
    XlmResult r;
    memset(&r, 0, sizeof r);
    r.max_dist = -1;
    r.max_err = -1.0;
#pragma omp parallel
    {
        XlmResult t;
        memset(&t, 0, sizeof t);
        t.max_dist = -1;
        t.max_err = -1.0;
#pragma omp for schedule(static, 65536)
        for (int64_t i = (int64_t)lo; i < (int64_t)hi; ++i) {
            const uint32_t in = (uint32_t)i;
            const float x = xlm_float(in);
            const uint32_t y = xlm_bits(xlm_f(fn, x));
            const double ref = xlm_ref(fn, (double)x);
            const uint32_t cr = xlm_bits((float)ref);  // binary64 -> binary32, round to nearest even
            t.inputs++;
            t.fingerprint += xlm_fingerprint_term(in, y);
            const bool ynan = y == 0x7FC00000u, rnan = cr == 0x7FC00000u;
            if (ynan || rnan) {
                if (ynan != rnan) {
                    t.nan_mismatch++;
                    t.not_rounded++;
                }
                continue;
            }
            if (y == cr) {
                if (t.max_dist < 0) { t.max_dist = 0; t.max_dist_input = in; }
            } else {
                t.not_rounded++;
                int64_t d = xlm_ord(y) - xlm_ord(cr);
                if (d < 0) d = -d;
                if (d > t.max_dist) { t.max_dist = d; t.max_dist_input = in; }
            }
            const float yf = xlm_float(y);
            if (isfinite(yf) && isfinite(ref) && fabs(ref) < 0x1p128) {
                const double err = fabs((double)yf - ref) / xlm_ulp(ref);
                if (err > t.max_err) { t.max_err = err; t.max_err_input = in; }
            }
        }
#pragma omp critical
        {
            r.inputs += t.inputs;
            r.not_rounded += t.not_rounded;
            r.nan_mismatch += t.nan_mismatch;
            r.fingerprint += t.fingerprint;
            if (t.max_dist > r.max_dist || (t.max_dist == r.max_dist && t.max_dist_input < r.max_dist_input)) {
                r.max_dist = t.max_dist;
                r.max_dist_input = t.max_dist_input;
            }
            if (t.max_err > r.max_err || (t.max_err == r.max_err && t.max_err_input < r.max_err_input)) {
                r.max_err = t.max_err;
                r.max_err_input = t.max_err_input;
            }
        }
    }
    *res = r;
}

}  // extern "C"
