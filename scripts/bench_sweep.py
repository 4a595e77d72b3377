"""Benchmark sweeps for docs/benchmarks.md (run on a GPU machine):

    python3 scripts/bench_sweep.py        # writes bench.json, bench.md and plots to $OUT (or ./bench-out)

Variants: the persistent mega-kernel (deterministic, fast) and the baselines
generated from the same IR (host-launched loop, CUDA-graph replay), on the
bundled pipeline with synthetic models. Sweeps: batch size, gamma (fixed block
size), acceptance rate, policy (ASBS vs fixed B), the paged KV cache (off, an
ample pool, a pool too small); plus the ballot verify's cost against the
acceptance rate, and PyTorch's verify step. XLGEN_SWEEP=quick runs the target
point and the KV points only.

This script compares the mega-kernel with its baselines, point after point on one
GPU. For a study over many points (policies x workloads x backends), use
`xlgen sweep SPEC` (docs/sweep.md): the points run as Ray tasks, one per CPU slot
or GPU at once, resumable, into one table with plots (e.g. docs/sweep_gpu.toml).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from xlgen.tools.measure.bench import run_bench
from xlgen.tools.pipeline.companion import Run, load as load_companion, params_by_name
from xlgen.tools.pipeline.metrics import timing_metrics
from xlgen.backends.build import load, load_text
from xlgen.runtime import gpu
from xlgen.runtime.sim import LaunchConfig
from xlgen.tools.pipeline.workload import from_dict

OUT = Path(os.environ.get("OUT", "bench-out"))
OUT.mkdir(parents=True, exist_ok=True)
REPEATS = int(os.environ.get("XLGEN_REPEATS", "3"))
T0 = time.time()
compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()
results: dict = {"device": None, "sweeps": {}}


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def workload(batch, gamma=8, acceptance=0.6, policy="fixed", tokens=256, profile="CONSTANT", kv_pool=None,
             eviction_policy=0):
    """kv_pool: None turns the paged KV cache off; else it is on with a pool of that many pages."""
    fields = {"seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]}, "max_new_tokens": tokens,
              "profile": profile, "base_acceptance": acceptance, "priority": {"uniform": [0, 3]}}
    params = {"fixed_block": gamma if policy == "fixed" else 0, "vocab": 32000, "kv_cache": False}
    kv = ""
    if kv_pool is not None:
        params |= {"kv_cache": True, "pool_pages": kv_pool, "eviction_policy": eviction_policy}
        kv = f" kv pool {kv_pool}{' priority' if eviction_policy else ''}"
    return from_dict({"name": f"B={batch} gamma={gamma} acc={acceptance} {policy}{kv}",
                      "seed": batch, "launch": {"max_active": batch, "max_rounds": 100000}, "params": params,
                      "generate": {"count": batch, "fields": fields}}, module)


def point(label, w):
    report = run_bench(compiled, w, repeats=REPEATS)
    results["device"] = report.device
    log(f"{label}: " + ", ".join(f"{v.variant} {v.wall_ms_median:.3f} ms" for v in report.variants)
        + ("" if all(v.identical for v in report.variants) else "  (VARIANTS DIFFER)"))
    return report.to_json() | {"table": report.table(), "markdown": report.markdown()}


# The target point: B=32, gamma=8, 256 new tokens per request.
results["target"] = point("target", workload(32, gamma=8))

# The paged KV cache: off; on with a pool that never fills (its cost: the collective
# stage kv_manage, every request at once, every round); on with a pool of 256 pages, about 40% of
# what 32 requests of up to 128 + 256 tokens need (waits, evictions, KV_PRESSURE):
# ASBS vs fixed B=8, LRU vs priority-aware eviction.
TIGHT_POOL = 256
for key, w in (("off", workload(32, policy="asbs", acceptance=0.9)),
               ("ample", workload(32, policy="asbs", acceptance=0.9, kv_pool=16384)),
               ("tight_asbs", workload(32, policy="asbs", acceptance=0.9, kv_pool=TIGHT_POOL)),
               ("tight_fixed8", workload(32, gamma=8, acceptance=0.9, kv_pool=TIGHT_POOL)),
               ("tight_asbs_priority", workload(32, policy="asbs", acceptance=0.9, kv_pool=TIGHT_POOL,
                                                eviction_policy=1))):
    results["sweeps"].setdefault("kv", {})[key] = point(f"KV {key}", w)

# KV occupancy over time on the GPU (deterministic mode: the simulator's trace).
TOOLS = load_companion("stages/xl_spec_tools.py").module  # the bundled pipeline's companion
plot_occupancy, residency = TOOLS.plot_occupancy, TOOLS.residency

w = workload(32, policy="asbs", acceptance=0.9, kv_pool=TIGHT_POOL)
r = gpu.run(compiled, w.params, w.inputs, w.config)
m = results["sweeps"]["kv"]["tight_asbs"]["metrics"]
plot_occupancy(residency(compiled.program, r), TIGHT_POOL, 0.85, OUT / "kv_occupancy_gpu.png",
               title=f"KV pool occupancy on the GPU: 32 requests, {TIGHT_POOL}-page pool, ASBS\n"
                     f"kv_hit_rate {m.get('kv_hit_rate', float('nan')):.3f}, "
                     f"fragmentation_ratio {m.get('fragmentation_ratio', float('nan')):.3f}")
if os.environ.get("XLGEN_SWEEP") == "quick":  # the target and KV points only
    with open(OUT / "bench.json", "w") as f:
        json.dump(results, f, indent=2, default=str)
    print(results["target"]["table"])
    sys.exit(0)

for batch in (1, 8, 32, 128, 1024):
    results["sweeps"].setdefault("batch", {})[batch] = point(f"batch {batch}", workload(batch))
for gamma in (4, 8, 16, 64, 128):
    results["sweeps"].setdefault("gamma", {})[gamma] = point(f"gamma {gamma}", workload(32, gamma=gamma))
for acc in (0.3, 0.6, 0.9):
    results["sweeps"].setdefault("acceptance", {})[acc] = point(f"acceptance {acc}", workload(32, acceptance=acc))
for policy, gamma in (("asbs", 8), ("fixed", 4), ("fixed", 8)):
    key = f"{policy}{'' if policy == 'asbs' else gamma}"
    results["sweeps"].setdefault("policy", {})[key] = point(f"policy {key}", workload(32, gamma=gamma, policy=policy,
                                                                                       profile="STRUCTURED"))

# What a round of the mega-kernel costs without work: a one-stage counter pipeline
# at the grid sizes the sweeps use (one grid barrier per round; one block for a batch that fits one).
COUNTER = "pipeline counter\nparam rounds: i32 = 1000\nrequest { n: i32 }\nstage tick { n += 1 }\ndone when n >= rounds\n"
counter = load_text(COUNTER, "counter.xl")
round_cost = {}
for active in (1, 32, 1024):
    per = {}
    for rounds in (1000, 3000):
        times = []
        for _ in range(4):
            r = gpu.run(counter, {"rounds": rounds}, [{} for _ in range(active)],
                        LaunchConfig(max_active=active, max_rounds=10**7))
            times.append(r.extra["timing"].kernel_ms)
        per[rounds] = (statistics.median(times[1:]), r.extra["timing"].grid)
    us = (per[3000][0] - per[1000][0]) * 1e3 / 2000
    round_cost[active] = {"us_per_round": us, "grid_blocks": per[3000][1]}
    log(f"empty round, {active} requests: {us:.2f} us per round ({per[3000][1]} blocks, 1 barrier)")
results["empty_round_us"] = round_cost

# The ballot verify: a pipeline that only verifies, REPS times per request per
# round, with the first mismatch placed at acceptance * gamma.
VERIFY = """
pipeline verify_cost
const G: i32 = 128
const REPS: i32 = 256
param gamma: i32 = 128
param first_mismatch: i32 = 64
request { a: i32[G]  b: i32[G]  acc: i32  step: i32 }
stage setup when step == 0 {
    for i in 0..G {
        a[i] = i
        b[i] = i == first_mismatch ? -1 : i
    }
    step = 1
}
stage verify when step >= 1 {
    for k in 0..REPS {
        acc += verify_prefix(a, b, gamma)
        b[0] = b[0] + 0
    }
    step += 1
}
done when step > 4
"""
verify = load_text(VERIFY, "verify_cost.xl")
vres = {}
for gamma in (8, 64, 128):
    for acc in (0.3, 0.9):
        times = []
        for _ in range(6):
            r = gpu.run(verify, {"gamma": gamma, "first_mismatch": int(acc * gamma)}, [{} for _ in range(1024)],
                        LaunchConfig(max_active=1024))
            times.append(r.extra["timing"].kernel_ms)
        vres[f"gamma{gamma}_acc{acc}"] = statistics.median(times[1:])
    a, b = vres[f"gamma{gamma}_acc0.3"], vres[f"gamma{gamma}_acc0.9"]
    log(f"verify gamma={gamma}: acc 0.3 {a:.3f} ms, acc 0.9 {b:.3f} ms, difference {abs(b - a) / a * 100:.1f}%")
results["verify_cost_ms"] = vres

# PyTorch's verify step (B=32, gamma=8): eager, and the same captured as a CUDA graph.
try:
    import torch

    B, G = 32, 8
    g = torch.Generator(device="cuda").manual_seed(0)
    draft = torch.randint(0, 8, (B, G), device="cuda", dtype=torch.int32, generator=g)
    target = torch.randint(0, 8, (B, G + 1), device="cuda", dtype=torch.int32, generator=g)
    ema = torch.full((B,), 0.8, device="cuda")

    def verify_step():
        match = (draft == target[:, :G]).to(torch.int32)
        accepted = torch.cumprod(match, dim=1).sum(dim=1)
        bonus = target.gather(1, accepted.unsqueeze(1).to(torch.int64))
        r = accepted.to(torch.float32) / G
        new_ema = 0.2 * r + 0.8 * ema
        block = torch.where(new_ema >= 0.8, 8, torch.where(new_ema >= 0.5, 4, 1))
        return accepted, bonus, new_ema, block

    for _ in range(20):
        verify_step()
    torch.cuda.synchronize()

    def timed(fn, n=2000):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / n  # µs per step

    eager_us = timed(verify_step)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        verify_step()
        graph.capture_begin()
        verify_step()
        graph.capture_end()
    torch.cuda.synchronize()
    graph_us = timed(graph.replay)
    results["torch_verify_us"] = {"eager": eager_us, "graph": graph_us}
    log(f"torch verify step (B=32, gamma=8): eager {eager_us:.1f} us, graph {graph_us:.1f} us")
except Exception as exc:  # torch is optional
    log(f"torch verify step skipped: {exc}")

with open(OUT / "bench.json", "w") as f:
    json.dump(results, f, indent=2, default=str)

# ---- plots ----
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

batches = sorted(results["sweeps"]["batch"])
fig, ax = plt.subplots(figsize=(6, 4))
for baseline, style in (("host-loop", "o-"), ("graph", "s-"), ("mega-fast", "^--")):
    ys = []
    for b in batches:
        vs = {v["variant"]: v for v in results["sweeps"]["batch"][b]["variants"]}
        ys.append(vs[baseline]["wall_ms_median"] / vs["mega-deterministic"]["wall_ms_median"])
    ax.plot(batches, ys, style, label=f"{baseline} time / mega-kernel (deterministic) time")
ax.axhline(1, color="gray", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("batch size (requests, all resident)")
ax.set_ylabel("wall time ratio (higher: mega-kernel wins by more)")
ax.set_title(f"Speedup of the mega-kernel vs batch size\n(gamma 8, acceptance 0.6, 256 tokens; {results['device']})",
             fontsize=9)
ax.legend(fontsize=7)
ax.grid(alpha=0.3, which="both")
fig.tight_layout()
fig.savefig(OUT / "speedup_vs_batch.png", dpi=110)
plt.close(fig)

# ITL distribution per variant at the target point (device timestamps).
w = workload(32, gamma=8)
fig, ax = plt.subplots(figsize=(6, 4))
for mode in ("deterministic", "host-loop", "graph"):
    r = gpu.run(compiled, w.params, w.inputs, w.config, mode=mode)
    from xlgen.tools.pipeline.metrics import trace_series

    commits = trace_series(compiled.program, r, "commit", "n_out")
    stamps = r.extra["round_end_ns"]
    itl = []
    for _req, (rounds, n_out) in commits.items():
        t = stamps[np.clip(rounds + 1, 0, len(stamps) - 1)] / 1e3
        gained = np.diff(np.concatenate([[0], n_out.astype(np.int64)]))
        for k in range(1, len(t)):
            if gained[k] > 0:
                itl.extend([(t[k] - t[k - 1]) / gained[k]] * int(gained[k]))
    results.setdefault("itl_us", {})[mode] = {k: v for k, v in timing_metrics(
        compiled.program, r, w.config.max_active, r.extra["round_end_ns"]).items() if k.startswith(("ttft_us", "itl_us"))}
    ax.hist(itl, bins=np.logspace(-1, 3, 60), histtype="step", lw=1.5, label=mode)
ax.set_xscale("log")
ax.set_xlabel("inter-token latency per token (µs, device timestamps)")
ax.set_ylabel("tokens")
ax.set_title("Inter-token latency, B=32, gamma=8", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(OUT / "itl_by_variant.png", dpi=110)
plt.close(fig)

# Block-size trajectories (ASBS), from a mixed-profile batch.
from xlgen.tools.pipeline.workload import load as load_workload  # noqa: E402

mixed = load_workload("workloads/mixed.json", module)
TOOLS.block_sizes(Run(compiled.program, gpu.run(compiled, mixed.params, mixed.inputs, mixed.config),
                      params_by_name(module, mixed.params), "mixed"), OUT / "block_sizes_gpu.png")

with open(OUT / "bench.json", "w") as f:
    json.dump(results, f, indent=2, default=str)
log("done")
print(results["target"]["table"])
sys.exit(0)
