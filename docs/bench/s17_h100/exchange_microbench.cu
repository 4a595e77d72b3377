// Micro-benchmark: ways to close a spread loop in a cluster of 8 CTAs x 512 threads, each CTA
// sending N floats into each other CTA's shared memory per exchange (N storing threads a CTA).
// M0: st.shared::cluster + barrier.cluster (release/acquire)        [today]
// M1: st.async + every warp's lanes arrive remotely (v1)
// M2: st.async + per-CTA aggregated remote arrive.expect_tx (v2)
// M3: st.async + count words by st.async, local expect_tx, then data barrier (v3)
// M4: st.shared::cluster + barrier.cluster relaxed (no fences: a lower bound, not correct)
#include <cstdio>
#include <cstdint>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
constexpr int CN = 8, CT = 512, W = CT / 32, ITERS = 2000;
__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ uint32_t mapa(uint32_t a, uint32_t r) { uint32_t o; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(o) : "r"(a), "r"(r)); return o; }
__device__ __forceinline__ uint32_t crank() { uint32_t r; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void wait_par(uint32_t bar, uint32_t par) {
    uint32_t done = 0;
    while (!done) asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(par) : "memory");
}
__device__ __forceinline__ void test_par(uint32_t bar, uint32_t par) {
    uint32_t done = 0;
    while (!done) asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}" : "=r"(done) : "r"(bar), "r"(par) : "memory");
}
__device__ __forceinline__ void stas(uint32_t a, float v, uint32_t m) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(a), "r"(__float_as_uint(v)), "r"(m) : "memory");
}
__device__ __forceinline__ void st_remote(uint32_t a, float v) { asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory"); }

template <int M>
__global__ void __cluster_dims__(CN, 1, 1) __launch_bounds__(CT, 1) k(int nstore, int skew, long long* out, float* sink) {
    __shared__ float buf[2][CT];
    __shared__ uint64_t bar[2], cbar[2];
    __shared__ uint32_t wbytes[2][W];
    __shared__ uint32_t counts[2][CN];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, rank = crank();
    if (tid == 0) {
        const uint32_t n = M == 1 ? CN * W : (M == 2 || M == 5) ? CN : 1;
        for (int i = 0; i < 2; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&bar[i])), "r"(n) : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&cbar[i])), "r"(1u) : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    buf[0][tid] = buf[1][tid] = 0.f;
    cg::this_cluster().sync();
    float acc = 0.f;
    long long t0 = clock64();
    for (int x = 0; x < ITERS; ++x) {
        const uint32_t s = x & 1, par = (x >> 1) & 1;
        const bool stores = (int)tid < nstore;
        if (skew) { const long long until = clock64() + (long long)skew * (long long)((warp * 7 + rank * 3 + x) % W); while (clock64() < until) {} }
        const float v = acc + (float)x;
        const uint32_t b = sa(&bar[s]);
        uint32_t sent = 0;
        if (stores)
            for (uint32_t d = 0; d < CN; ++d) {
                if (d == rank) { buf[s][tid] = v; continue; }
                const uint32_t a = mapa(sa(&buf[s][tid]), d);
                if (M == 0 || M == 4) st_remote(a, v);
                else { stas(a, v, mapa(b, d)); sent = 4; }
            }
        if (M == 0) {
            asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
        } else if (M == 4) {
            asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
        } else if (M == 1) {
            const uint32_t bytes = __reduce_add_sync(~0u, sent);
            __syncwarp();
            if (lane == rank) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
            else if (lane < CN) {
                asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
                asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(mapa(b, lane)), "r"(bytes) : "memory");
            }
            wait_par(b, par);
        } else if (M == 2 || M == 5) {
            const uint32_t bytes = __reduce_add_sync(~0u, sent);
            if (lane == 0) wbytes[s][warp] = bytes;
            __syncthreads();
            if (tid < CN) {
                uint32_t total = 0;
                for (int w = 0; w < W; ++w) total += wbytes[s][w];
                if (tid == rank) asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
                else {
                    asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
                    asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(mapa(b, tid)), "r"(total) : "memory");
                }
            }
            if (M == 5) test_par(b, par); else wait_par(b, par);
        } else if (M == 3) {
            const uint32_t bytes = __reduce_add_sync(~0u, sent);
            if (lane == 0) wbytes[s][warp] = bytes;
            __syncthreads();
            const uint32_t c = sa(&cbar[s]);
            if (tid < CN) {
                uint32_t total = 0;
                for (int w = 0; w < W; ++w) total += wbytes[s][w];
                if (tid == rank) asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(c), "r"((uint32_t)(4 * (CN - 1))) : "memory");
                else {
                    asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
                    stas(mapa(sa(&counts[s][rank]), tid), __uint_as_float(total), mapa(c, tid));
                }
            }
            wait_par(c, par);
            if (tid == 0) {
                uint32_t in = 0;
                for (uint32_t d = 0; d < CN; ++d) if (d != rank) in += counts[s][d];
                asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(in) : "memory");
            }
            wait_par(b, par);
        }
        acc += buf[s][(tid * 7 + x) & (CT - 1)];
    }
    long long t1 = clock64();
    cg::this_cluster().sync();
    if (tid == 0) out[blockIdx.x] = (t1 - t0) / ITERS;
    if (acc == 12345.f) sink[0] = acc;
}

template <int M> void run(int nstore, int skew, long long* d, float* sink) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CN); cfg.blockDim = dim3(CT);
    for (int rep = 0; rep < 3; ++rep) { k<M><<<CN, CT>>>(nstore, skew, d, sink); }
    cudaError_t e = cudaDeviceSynchronize();
    long long h[CN]; cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    long long mx = 0; for (int i = 0; i < CN; ++i) mx = h[i] > mx ? h[i] : mx;
    printf("M%d nstore %3d skew %3d: %5lld cycles per exchange (%s)\n", M, nstore, skew, mx, cudaGetErrorString(e));
}
int main() {
    long long* d; float* sink; cudaMalloc(&d, 64 * sizeof(long long)); cudaMalloc(&sink, 64);
    for (int skew : {0, 20, 100})
        for (int n : {16, 512}) { run<0>(n, skew, d, sink); run<4>(n, skew, d, sink); run<1>(n, skew, d, sink); run<2>(n, skew, d, sink); run<5>(n, skew, d, sink); run<3>(n, skew, d, sink); }
    return 0;
}
