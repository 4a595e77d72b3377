"""A/B the deterministic round's cost: for each set of extra NVRTC options
(XLGEN_NVRTC_OPTIONS; "" is the default kernel), the benchmark's target point
(B=32, gamma=8, 256 new tokens, CONSTANT 0.6, KV cache off), the same with the KV
cache on (block 0's serial arbiter turns), and an empty round (a one-stage counter
pipeline, 1,000 against 3,000 rounds) over a full grid and in one block. Variants
are interleaved, so drift hits each alike. With --baselines, also the host loop and
graph replay at the target point (default kernel).

    python3 scripts/round_ab.py [--baselines] "" "-DXL_ROUND_BARRIERS=2" ...   # on a GPU machine
"""

import os
import statistics
import sys

import cupy

from xlgen.backends.build import load, load_text
from xlgen.tools.check.diff import compare
from xlgen.runtime import gpu, sim
from xlgen.runtime.sim import LaunchConfig
from xlgen.tools.pipeline.workload import from_dict

args = sys.argv[1:]
baselines = "--baselines" in args
OPTIONS = [a for a in args if a != "--baselines"] or [""]
TAG = os.environ.get("AB_TAG", "")
compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()
SMS = cupy.cuda.Device().attributes["MultiProcessorCount"]


def workload(batch, kv_pool=None):
    params = {"fixed_block": 8} | ({"kv_cache": True, "pool_pages": kv_pool} if kv_pool else {})
    return from_dict({"seed": batch, "launch": {"max_active": batch, "max_rounds": 100000}, "params": params,
                      "generate": {"count": batch, "fields": {
                          "seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]}, "max_new_tokens": 256,
                          "profile": "CONSTANT", "base_acceptance": 0.6}}}, module)


COUNTER = "pipeline counter\nparam rounds: i32 = 1000\nrequest { n: i32 }\nstage tick { n += 1 }\ndone when n >= rounds\n"
counter = load_text(COUNTER, "counter.xl")
target, kv = workload(32), workload(32, 16384)
ref_target = sim.run(module, target.params, target.inputs, target.config)
ref_kv = sim.run(module, kv.params, kv.inputs, kv.config)
times = {}


def add(key, value):
    times.setdefault(key, []).append(value)


for rep in range(5):
    for option in OPTIONS:
        os.environ["XLGEN_NVRTC_OPTIONS"] = option
        r = gpu.run(compiled, target.params, target.inputs, target.config, mode="deterministic")
        if rep == 0:
            same = compare(compiled.program, ref_target, r) is None
            print(f"{TAG}[{option or 'default'}] target: {r.rounds} rounds, grid {r.extra['timing'].grid}, "
                  f"traces identical to the simulator: {same}", flush=True)
        else:
            add((option, "target ms"), r.extra["timing"].kernel_ms)
        r = gpu.run(compiled, kv.params, kv.inputs, kv.config, mode="deterministic")
        if rep == 0:
            print(f"{TAG}[{option or 'default'}] KV on: identical: {compare(compiled.program, ref_kv, r) is None}",
                  flush=True)
        else:
            add((option, "KV on ms"), r.extra["timing"].kernel_ms)
        for grid, name in ((SMS, f"empty round us, {SMS} blocks"), (1, "empty round us, 1 block")):
            t = {}
            for rounds in (1000, 3000):
                rr = gpu.run(counter, {"rounds": rounds}, [{}], LaunchConfig(max_active=1, max_rounds=10**7),
                             grid=grid)
                t[rounds] = rr.extra["timing"].kernel_ms
            if rep > 0:
                add((option, name), (t[3000] - t[1000]) * 1e3 / 2000)
os.environ["XLGEN_NVRTC_OPTIONS"] = ""
if baselines:
    for mode in ("host-loop", "graph"):
        for rep in range(3):
            r = gpu.run(compiled, target.params, target.inputs, target.config, mode=mode)
            add(("", f"target ms, {mode}"), r.extra["timing"].kernel_ms)
for (option, what), values in times.items():
    print(f"{TAG}[{option or 'default'}] {what}: median {statistics.median(values):.4f} "
          f"(min {min(values):.4f}, max {max(values):.4f}, n {len(values)})", flush=True)
