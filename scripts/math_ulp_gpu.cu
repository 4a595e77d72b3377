// The GPU's exact math functions against the CPU build's, bit for bit, over all 2^32 inputs
// (docs/semantics.md §16.1). Built and run by `python scripts/math_ulp.py --gpu` on a GPU
// machine: nvcc with the GPU build's float options (--fmad=false --ftz=false --prec-div=true
// --prec-sqrt=true) for this file, the host compiler with the CPU build's (-ffp-contract=off)
// for math_ulp.cpp, whose xlm_eval_range gives the CPU bits.
//
//   math_ulp_gpu FN...   FN: 0 exp, 1 log, 2 tanh, 3 sigmoid, 4 sqrt, 5 rsqrt
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <chrono>

#include "xl_runtime.cuh"

extern "C" void xlm_eval_range(int fn, uint64_t start, uint32_t* out, int64_t n);

static const char* NAMES[] = {"exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt"};

__global__ void eval(int fn, uint64_t start, uint32_t* out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = __uint_as_float((uint32_t)(start + (uint64_t)i));
        float y;
        switch (fn) {
            case 0: y = xl_math_exp(x); break;
            case 1: y = xl_math_log(x); break;
            case 2: y = xl_math_tanh(x); break;
            case 3: y = xl_math_sigmoid(x); break;
            case 4: y = xl_math_sqrt(x); break;
            default: y = xl_math_rsqrt(x); break;
        }
        out[i] = y != y ? 0x7FC00000u : __float_as_uint(y);
    }
}

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

int main(int argc, char** argv) {
    const int64_t chunk = (int64_t)1 << 28;
    uint32_t *d_out, *h_gpu, *h_cpu;
    CHECK(cudaMalloc(&d_out, chunk * 4));
    CHECK(cudaMallocHost(&h_gpu, chunk * 4));
    h_cpu = (uint32_t*)malloc(chunk * 4);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    int failed = 0;
    for (int a = 1; a < argc; ++a) {
        const int fn = atoi(argv[a]);
        const auto t0 = std::chrono::steady_clock::now();
        uint64_t differ = 0, shown = 0;
        for (uint64_t start = 0; start < ((uint64_t)1 << 32); start += (uint64_t)chunk) {
            eval<<<4 * prop.multiProcessorCount, 512>>>(fn, start, d_out, chunk);
            CHECK(cudaGetLastError());
            xlm_eval_range(fn, start, h_cpu, chunk);  // while the GPU runs
            CHECK(cudaMemcpy(h_gpu, d_out, chunk * 4, cudaMemcpyDeviceToHost));
            uint64_t d = 0;
#pragma omp parallel for reduction(+ : d)
            for (int64_t i = 0; i < chunk; ++i) d += h_gpu[i] != h_cpu[i];
            if (d) {
                for (int64_t i = 0; i < chunk && shown < 5; ++i)
                    if (h_gpu[i] != h_cpu[i]) {
                        printf("  %s(0x%08llX): GPU 0x%08X, CPU 0x%08X\n", NAMES[fn],
                               (unsigned long long)(start + i), h_gpu[i], h_cpu[i]);
                        ++shown;
                    }
            }
            differ += d;
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        printf("%-8s all 2^32 inputs: %llu differ between the GPU and the CPU build (%.1f s)\n", NAMES[fn],
               (unsigned long long)differ, s);
        fflush(stdout);
        failed |= differ != 0;
    }
    return failed;
}
