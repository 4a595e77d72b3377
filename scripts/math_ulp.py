"""Exhaustive checks of the exact math builtins (docs/semantics.md §16.1) over all 2^32 binary32
inputs, in C++ with OpenMP:

    python3 scripts/math_ulp.py            # max error in ulps against the correctly rounded result
    python3 scripts/math_ulp.py --gpu      # on a GPU machine: the GPU's bits equal the CPU build's

The reference is the double-precision libm result rounded to binary32, which is the correctly
rounded result except where the double is within 2^-29 relative of a rounding boundary
(counted and reported as `hard`: there the reference itself may be off by one). Error in ulps:
|ours - true| / ulp(true), `true` taken as the double result.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "xlgen" / "runtime"

ACCURACY = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include "xl_runtime.cuh"
static double ref(char f, double x) {
    switch (f) { case 'e': return std::exp(x); case 'l': return std::log(x); case 't': return std::tanh(x);
                 default: return 1.0 / std::sqrt(x); }
}
static float ours(char f, float x) {
    switch (f) { case 'e': return xl_exp(x); case 'l': return xl_log(x); case 't': return xl_tanh(x);
                 default: return xl_rsqrt(x); }
}
int main(int argc, char** argv) {
    const char f = argv[1][0];
    double worst = 0; uint32_t worst_at = 0; long long wrong = 0, hard = 0, nan_mismatch = 0;
    #pragma omp parallel
    {
        double w = 0; uint32_t at = 0; long long wr = 0, hd = 0, nm = 0;
        #pragma omp for schedule(static, 1 << 16)
        for (long long i = 0; i < (1LL << 32); ++i) {
            const uint32_t u = (uint32_t)i;
            const float x = xl_bits_float(u);
            const double t = ref(f, (double)x);
            const float y = ours(f, x);
            if (std::isnan(t) || std::isnan(y)) { nm += std::isnan(t) != std::isnan(y); continue; }
            const float r = (float)t;
            if (y == r && std::signbit(y) == std::signbit(r)) continue;
            ++wr;
            if (std::isinf(t) || std::isinf(y)) { if (w < 1e30) { w = 1e30; at = u; } continue; }
            const float ar = std::fabs(r);
            double ulp = std::ldexp(1.0, std::max(std::ilogb(ar == 0 ? 1.17549435e-38f : ar), -126) - 23);
            const double e = std::fabs((double)y - t) / ulp;
            const double frac = std::fabs(t / ulp - std::nearbyint(t / ulp));
            if (std::fabs(frac - 0.5) < 1e-5) ++hd;
            if (e > w) { w = e; at = u; }
        }
        #pragma omp critical
        {
            if (w > worst) { worst = w; worst_at = at; }
            wrong += wr; hard += hd; nan_mismatch += nm;
        }
    }
    float x; std::memcpy(&x, &worst_at, 4);
    printf("%s max %.3f ulp at %.9g (0x%08X); %lld of 2^32 not correctly rounded; %lld near a tie; %lld NaN mismatches\n",
           argv[1], worst, x, worst_at, wrong, hard, nan_mismatch);
    return 0;
}
"""

def build_and_run(source: str, name: str, args: list[str], compile_cmd) -> str:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / name
        src.write_text(source)
        exe = Path(d) / "a.out"
        subprocess.run(compile_cmd(src, exe), check=True)
        return subprocess.run([str(exe), *args], check=True, capture_output=True, text=True).stdout


def accuracy() -> None:
    cmd = lambda src, exe: ["g++", "-std=c++17", "-O2", "-fopenmp", "-ffp-contract=off", "-fno-fast-math",
                            f"-I{RUNTIME}", str(src), "-o", str(exe)]
    for f in ("exp", "log", "tanh", "rsqrt"):
        print(build_and_run(ACCURACY, "acc.cpp", [f], cmd), end="", flush=True)


GPU_MAIN = r"""
#include <cstdio>
#include <vector>
#include <omp.h>
#include "xl_runtime.cuh"
__global__ void eval(char f, uint32_t base, uint32_t n, uint32_t* out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = __uint_as_float(base + i);
    const float y = f == 'e' ? xl_exp(x) : f == 'l' ? xl_log(x) : f == 't' ? xl_tanh(x) : xl_rsqrt(x);
    out[i] = __float_as_uint(y);
}
float cpu_exp(float), cpu_log(float), cpu_tanh(float), cpu_rsqrt(float);
int main(int argc, char** argv) {
    const char f = argv[1][0];
    const uint32_t chunk = 1u << 28;
    uint32_t* d; cudaMalloc(&d, chunk * 4ull);
    std::vector<uint32_t> h(chunk);
    long long differ = 0, nan_both = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += chunk) {
        eval<<<chunk / 256, 256>>>(f, (uint32_t)base, chunk, d);
        cudaMemcpy(h.data(), d, chunk * 4ull, cudaMemcpyDeviceToHost);
        #pragma omp parallel for reduction(+ : differ, nan_both) schedule(static, 1 << 16)
        for (long long i = 0; i < (long long)chunk; ++i) {
            uint32_t u = (uint32_t)(base + i); float x; memcpy(&x, &u, 4);
            const float y = f == 'e' ? cpu_exp(x) : f == 'l' ? cpu_log(x) : f == 't' ? cpu_tanh(x) : cpu_rsqrt(x);
            uint32_t c; memcpy(&c, &y, 4);
            float g; memcpy(&g, &h[i], 4);
            if (y != y && g != g) { ++nan_both; continue; }
            differ += c != h[i];
        }
    }
    printf("%s: GPU vs CPU build over all 2^32 inputs: %lld differ (%lld NaN on both)\n", argv[1], differ, nan_both);
    return differ != 0;
}
"""

CPU_SIDE = r"""
#include "xl_runtime.cuh"
float cpu_exp(float x) { return xl_exp(x); }
float cpu_log(float x) { return xl_log(x); }
float cpu_tanh(float x) { return xl_tanh(x); }
float cpu_rsqrt(float x) { return xl_rsqrt(x); }
"""


def gpu() -> None:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / "cpu.cpp").write_text(CPU_SIDE)
        (d / "gpu.cu").write_text(GPU_MAIN)
        subprocess.run(["g++", "-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-c", f"-I{RUNTIME}",
                        str(d / "cpu.cpp"), "-o", str(d / "cpu.o")], check=True)
        subprocess.run(["nvcc", "-std=c++17", "-O2", "-arch=sm_90", "--fmad=false", "-Xcompiler", "-fopenmp",
                        f"-I{RUNTIME}", str(d / "gpu.cu"), str(d / "cpu.o"), "-o", str(d / "a.out"), "-lgomp"],
                       check=True)
        for f in ("exp", "log", "tanh", "rsqrt"):
            print(subprocess.run([str(d / "a.out"), f], capture_output=True, text=True).stdout, end="", flush=True)


if __name__ == "__main__":
    gpu() if "--gpu" in sys.argv else accuracy()
