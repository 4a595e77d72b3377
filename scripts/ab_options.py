"""A/B a kernel choice on the GPU: the same workloads with different extra NVRTC
options (XLGEN_NVRTC_OPTIONS, e.g. -DXL_COPY_BATCH=1), mega-kernel kernel time,
interleaved so that drift between runs hits every option alike.

    python3 scripts/ab_options.py "" "-DXL_COPY_BATCH=1"      # on a GPU machine
"""

import os
import statistics
import sys

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.tools.pipeline.workload import from_dict

OPTIONS = sys.argv[1:] or [""]
compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()


def workload(batch, kv_pool=None):  # the benchmark's target point (docs/benchmarks.md)
    params = {"fixed_block": 8} | ({"kv_cache": True, "pool_pages": kv_pool} if kv_pool else {"kv_cache": False})
    return from_dict({"seed": batch, "launch": {"max_active": batch, "max_rounds": 100000}, "params": params,
                      "generate": {"count": batch, "fields": {
                          "seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]}, "max_new_tokens": 256,
                          "profile": "CONSTANT", "base_acceptance": 0.6}}}, module)


POINTS = {"B=32": workload(32), "B=1024": workload(1024), "B=32 KV ample": workload(32, 16384)}
times = {(p, o): [] for p in POINTS for o in OPTIONS}
for rep in range(6):
    for option in OPTIONS:
        os.environ["XLGEN_NVRTC_OPTIONS"] = option
        for point, w in POINTS.items():
            r = gpu.run(compiled, w.params, w.inputs, w.config, mode="deterministic")
            if rep > 0:  # the first is a warm-up (compile, module load)
                times[(point, option)].append(r.extra["timing"].kernel_ms)
for point in POINTS:
    cells = ", ".join(f"[{o or 'default'}] {statistics.median(times[(point, o)]):.3f} ms" for o in OPTIONS)
    print(f"{point}: {cells}", flush=True)
