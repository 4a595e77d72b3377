"""Per-round cost of the deterministic mega-kernel with the KV cache off and on (GPU).

    python3 scripts/profile_kv_rounds.py            # on a GPU machine, after scripts/device_setup.sh
    python3 scripts/profile_kv_rounds.py phases     # also where phase 2's time goes (-DXL_PROFILE_PHASE2)

B = 32 requests, 256 new tokens, prompts of 32-128 tokens; and scripts/gpu_measure.py's 1,000
requests (1,024 at once: phase 2 over the grid, docs/gpu.md). For each point: kernel time
(median of 3 after a warm-up), rounds, and the median / p90 / max round from the
kernel's own %globaltimer stamps, so a slow round shows up as such. With `phases`, the
kernel is built with -DXL_PROFILE_PHASE2 (block 0's thread 0 sums the cycles between
marks of phase 2: each collective stage's guards, segments, collectives, settling and
traces; each arbiter's turns) and the cycles per round of each mark are printed.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.tools.pipeline.companion import load as load_companion
from xlgen.tools.pipeline.workload import from_dict

PHASES = sys.argv[1:] == ["phases"]
if PHASES:
    os.environ["XLGEN_NVRTC_OPTIONS"] = (os.environ.get("XLGEN_NVRTC_OPTIONS", "") + " -DXL_PROFILE_PHASE2").strip()
compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()
TOOLS = load_companion("stages/xl_spec_tools.py").module  # scale_workload: 1,000 requests


def phase_marks(rounds: int) -> str:
    """The cycles per round of each phase-2 mark of the last run, by stage and mark."""
    import cupy

    from xlgen.tools.measure import phase2

    prof = phase2.counters(gpu.compile_module(compiled).module)
    counts = prof.get()
    prof.fill(0)
    cupy.cuda.Device().synchronize()
    names = {s.index: s.name for s in compiled.program.stages}
    return "\n".join(f"    {what}: {cycles:,.0f} cycles/round" for what, cycles in phase2.per_round(counts, names, rounds))


def workload(kv_pool=None, policy="asbs", acceptance=0.9, eviction_policy=0):
    params = {"fixed_block": 8 if policy == "fixed" else 0, "kv_cache": kv_pool is not None}
    if kv_pool is not None:
        params |= {"pool_pages": kv_pool, "eviction_policy": eviction_policy}
    return from_dict({"seed": 32, "launch": {"max_active": 32, "max_rounds": 100000}, "params": params,
                      "generate": {"count": 32, "fields": {
                          "seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]}, "max_new_tokens": 256,
                          "profile": "CONSTANT", "base_acceptance": acceptance,
                          "priority": {"uniform": [0, 3]}}}}, module)


POINTS = {
    "target (fixed 8, acc 0.6), KV off": workload(policy="fixed", acceptance=0.6),
    "target (fixed 8, acc 0.6), KV 256 pages": workload(256, policy="fixed", acceptance=0.6),
    "ASBS acc 0.9, KV off": workload(),
    "ASBS acc 0.9, KV ample": workload(16384),
    "ASBS acc 0.9, KV 256 pages LRU": workload(256),
    "ASBS acc 0.9, KV 256 pages priority": workload(256, eviction_policy=1),
    "1,000 requests, KV off": TOOLS.scale_workload(module, 1000, kv_cache=False),
    "1,000 requests, KV ample": TOOLS.scale_workload(module, 1000),
}

print(f"{'point':42} {'kernel ms':>9} {'rounds':>6} {'us/round':>8} {'median':>7} {'p90':>7} {'max':>7}")
for label, w in POINTS.items():
    times = []
    for _ in range(4):
        r = gpu.run(compiled, w.params, w.inputs, w.config, mode="deterministic")
        times.append(r.extra["timing"].kernel_ms)
    stamps = np.diff(r.extra["round_end_ns"]) / 1e3
    ms = statistics.median(times[1:])
    print(f"{label:42} {ms:9.3f} {r.rounds:6d} {ms * 1e3 / max(r.rounds, 1):8.1f} {np.median(stamps):7.1f} "
          f"{np.percentile(stamps, 90):7.1f} {stamps.max():7.1f}", flush=True)
    if PHASES:
        print(phase_marks(r.rounds * 4), flush=True)  # the counters summed over the 4 runs
