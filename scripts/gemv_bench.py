"""Issue 13's GEMV benchmark: a 128x512 f32 matrix-vector product written in the language
(examples/gemv/gemv.xl: one reduction per row, one request per warp, 32 requests) against a
hand-written CUDA warp GEMV of the same layout and the same order of additions, on the same
GPU; and the simulator's multiply-adds per second on the same product.

    python3 scripts/gemv_bench.py [out.json]     # GPU part skipped without one

Checks, before timing, that the mega-kernel's y equals the simulator's and the reference
kernel's bit for bit.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xlgen.backends.build import load  # noqa: E402
from xlgen.runtime import sim  # noqa: E402

ROWS, COLS, REPS, REQUESTS = 128, 512, 16, 32

REFERENCE = r"""
extern "C" __global__ void gemv_ref(const float* __restrict__ w, const float* __restrict__ xs,
                                    float* __restrict__ ys, int requests, int reps) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= requests) return;
    const float* x = xs + warp * 512;
    for (int rep = 0; rep < reps; ++rep) {
        for (int i = 0; i < 128; ++i) {
            float acc = -0.0f;
            for (int j = lane; j < 512; j += 32) acc = __fadd_rn(acc, __fmul_rn(w[i * 512 + j], x[j]));
            for (int k = 16; k >= 1; k >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, k));
            if (lane == 0) ys[warp * 128 + i] = acc;
        }
        __syncwarp();
    }
}
"""


def main() -> None:
    out = {}
    compiled = load(ROOT / "examples/gemv/gemv.xl")
    module = compiled.sim_module()
    rng = np.random.default_rng(13)
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    xs = rng.standard_normal((REQUESTS, COLS)).astype(np.float32)
    inputs = [{"x": [float(v) for v in x]} for x in xs]
    params = {"w": w}

    t0 = time.perf_counter()
    ref = sim.run(module, params, inputs[:2], sim.LaunchConfig(max_active=2))
    seconds = (time.perf_counter() - t0) / 2
    macs = ROWS * COLS * REPS
    out["sim_seconds_per_request"] = seconds
    out["sim_macs_per_second_per_request"] = macs / seconds
    print(f"simulator: {macs} multiply-adds per request in {seconds * 1e3:.1f} ms: "
          f"{macs / seconds / 1e6:.2f} M multiply-adds/s per request")
    y_sim = np.stack([np.asarray(r["y"], dtype=np.float32) for r in ref.requests])
    close = np.abs(y_sim - xs[:2] @ w.T).max()
    print(f"  |y - numpy's w @ x| max {close:.2e} (a different order of additions; informational)")

    try:
        from xlgen.runtime import gpu
        ok = gpu.available()
    except Exception:
        ok = False
    if not ok:
        print("no GPU: the GPU half is skipped")
        return _write(out)
    import cupy

    cfg = sim.LaunchConfig(max_active=REQUESTS)
    full = sim.run(module, params, inputs, cfg)
    y_sim = np.stack([np.asarray(r["y"], dtype=np.float32) for r in full.requests])
    gpu.run(compiled, params, inputs, cfg)  # compile and upload once
    times = []
    for _ in range(10):
        res = gpu.run(compiled, params, inputs, cfg)
        times.append(res.extra["timing"].kernel_ms)
    y_gpu = np.stack([np.asarray(r["y"], dtype=np.float32) for r in res.requests])
    assert y_gpu.view(np.uint32).tolist() == y_sim.view(np.uint32).tolist(), "GPU and simulator differ"

    kernel = cupy.RawKernel(REFERENCE, "gemv_ref", options=("--fmad=false",))
    d_w, d_x = cupy.asarray(w.reshape(-1)), cupy.asarray(xs.reshape(-1))
    d_y = cupy.zeros(REQUESTS * ROWS, dtype=cupy.float32)
    threads = 128
    blocks = (REQUESTS * 32 + threads - 1) // threads
    kernel((blocks,), (threads,), (d_w, d_x, d_y, np.int32(REQUESTS), np.int32(REPS)))
    y_ref = d_y.get().reshape(REQUESTS, ROWS)
    assert y_ref.view(np.uint32).tolist() == y_sim.view(np.uint32).tolist(), "reference kernel and simulator differ"
    ref_times = []
    for _ in range(10):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        kernel((blocks,), (threads,), (d_w, d_x, d_y, np.int32(REQUESTS), np.int32(REPS)))
        end.record()
        end.synchronize()
        ref_times.append(cupy.cuda.get_elapsed_time(start, end))
    ours, theirs = float(np.median(times)), float(np.median(ref_times))
    out.update(xlgen_kernel_ms=ours, reference_kernel_ms=theirs, ratio=ours / theirs,
               per_product_us_xlgen=ours * 1e3 / REPS, per_product_us_reference=theirs * 1e3 / REPS,
               device=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    print(f"GPU: y equal bit for bit (simulator, mega-kernel, reference). {REQUESTS} requests x {REPS} products:")
    print(f"  mega-kernel {ours:.3f} ms (median of 10, the whole launch: rounds, admission, retire)")
    print(f"  hand-written warp GEMV {theirs:.3f} ms; ratio {ours / theirs:.2f}x")

    # One request, served by a team of 1..32 warps (a block): the rows spread over its warps.
    one = [inputs[0]]
    cfg1 = sim.LaunchConfig(max_active=1)
    y_one = y_sim[0].view(np.uint32).tolist()
    out["batch1"] = {}
    print(f"one request, {REPS} products, a team of W warps (rows over warps, each row over a warp's lanes):")
    for team in (1, 2, 4, 8, 16, 32):
        gpu.run(compiled, params, one, cfg1, team_warps=team)
        times = []
        for _ in range(10):
            res = gpu.run(compiled, params, one, cfg1, team_warps=team)
            times.append(res.extra["timing"].kernel_ms)
        got = np.asarray(res.requests[0]["y"], dtype=np.float32).view(np.uint32).tolist()
        assert got == y_one, f"team of {team} warps: y differs from the simulator's"
        ms = float(np.median(times))
        out["batch1"][team] = ms
        print(f"  W={team:2d}: {ms:.3f} ms ({ms * 1e3 / REPS:.1f} us per product), y identical")
    _write(out)


def _write(out) -> None:
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
