"""Numbers for the GPU issue: kernel time on 1,000 requests (deterministic with the KV
cache on and off, fast with it off), the cost of one deterministic round's barriers, and
the largest request count run (the KV cache on).

    python3 scripts/gpu_measure.py            # on a GPU machine; prints a table, writes JSON to $OUT
    python3 scripts/gpu_measure.py big        # only the largest run

Fast mode is measured with the KV cache off: in fast mode a collective stage has one
participant, so kv_evict finds no victim and a pool that the requests running at once
oversubscribe is shared by yields alone (1,000 requests at once through 16,384 pages
did not finish in 120 s; docs/gpu.md).
"""

import json
import os
import statistics
import sys
import time

from xlgen.backends.build import load, load_text
from xlgen.tools.check.diff import compare
from xlgen.runtime import gpu, sim
from xlgen.runtime.sim import KIND_DONE, LaunchConfig
from xlgen.tools.pipeline.companion import load as load_companion

results = {}
T0 = time.time()


def report(key, value):
    results[key] = value
    print(f"[{time.time() - T0:6.1f}s] {key}: {json.dumps(value)}", flush=True)

compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()
TOOLS = load_companion("stages/xl_spec_tools.py").module  # scale_workload


def workload(count, max_active, tokens, kv_cache=True):
    return TOOLS.scale_workload(module, count, kv_cache, max_active, tokens)


def median_kernel_ms(w, mode, repeats=5):
    times, last = [], None
    for _ in range(repeats + 1):
        last = gpu.run(compiled, w.params, w.inputs, w.config, mode=mode)
        times.append(last.extra["timing"].kernel_ms)
    times = times[1:]  # the first run includes module load
    return statistics.median(times), min(times), max(times), last


def thousand(kv_cache, modes):
    w = workload(1000, 1024, [64, 128, 256], kv_cache)
    reference = sim.run(module, w.params, w.inputs, w.config)
    print(f"[{time.time() - T0:6.1f}s] simulated 1000 requests (KV cache {'on' if kv_cache else 'off'})", flush=True)
    for mode in modes:
        med, lo, hi, last = median_kernel_ms(w, mode)
        tokens = int(last.requests["n_out"].sum())
        report(f"bundled_1000_{mode}_kv_{'on' if kv_cache else 'off'}", {
            "median_ms": med, "min_ms": lo, "max_ms": hi, "rounds": last.rounds,
            "grid": last.extra["timing"].grid, "barriers": last.extra["timing"].barriers,
            "tokens": tokens, "tokens_per_s": tokens / (med / 1e3),
            "identical_to_sim": compare(compiled.program, reference, last) is None if mode == "deterministic" else
            bool((last.requests["out_tokens"] == reference.requests["out_tokens"]).all())})


BIG_ONLY = sys.argv[1:] == ["big"]
if not BIG_ONLY:
    thousand(True, ["deterministic"])
    thousand(False, ["deterministic", "fast"])

if not BIG_ONLY:
    # Barrier cost: a one-request pipeline whose round does almost nothing. Two rounds'
    # difference in kernel time over their difference in barriers is the per-barrier cost.
    COUNTER = "pipeline counter\nparam rounds: i32 = 1000\nrequest { n: i32 }\nstage tick { n += 1 }\ndone when n >= rounds\n"
    counter = load_text(COUNTER, "counter.xl")
    SMS = __import__("cupy").cuda.Device().attributes["MultiProcessorCount"]
    per_round = {}
    for rounds in (2000, 4000):
        times = []
        for _ in range(4):
            r = gpu.run(counter, {"rounds": rounds}, [{}], LaunchConfig(max_active=1, max_rounds=10**7),
                        grid=SMS)  # one request alone would get one block (no grid barrier)
            times.append(r.extra["timing"].kernel_ms)
        per_round[rounds] = (statistics.median(times[1:]), r.extra["timing"].barriers, r.extra["timing"].grid)
    (t1, b1, grid), (t2, b2, _) = per_round[2000], per_round[4000]
    report("round_cost", {"us_per_round": (t2 - t1) * 1e3 / 2000, "us_per_barrier": (t2 - t1) * 1e3 / (b2 - b1),
                          "grid_blocks": grid, "barriers_per_round": (b2 - b1) / 2000})
    one_block = {}
    for rounds in (2000, 4000):  # the same with one block: no grid barrier, __syncthreads only
        times = []
        for _ in range(4):
            r = gpu.run(counter, {"rounds": rounds}, [{}], LaunchConfig(max_active=1, max_rounds=10**7), grid=1)
            times.append(r.extra["timing"].kernel_ms)
        one_block[rounds] = statistics.median(times[1:])
    report("round_cost_one_block", {"us_per_round": (one_block[4000] - one_block[2000]) * 1e3 / 2000})

# The largest request count: 100,000 short requests, deterministic mode, checked against the simulator.
BIG = int(os.environ.get("XLGEN_BIG", "100000"))
big = workload(BIG, 4096, [8, 16])
t0 = time.time()
ref_big = sim.run(module, big.params, big.inputs, big.config)
sim_s = time.time() - t0
t0 = time.time()
got_big = gpu.run(compiled, big.params, big.inputs, big.config, mode="deterministic", timeout=300)
print(f"[{time.time() - T0:6.1f}s] gpu run of {BIG} requests took {time.time() - t0:.1f}s wall, "
      f"kernel {got_big.extra['timing'].kernel_ms:.1f} ms", flush=True)
print(f"[{time.time() - T0:6.1f}s] simulated {BIG} requests in {sim_s:.1f}s", flush=True)
report("largest", {"requests": BIG, "identical_to_sim": compare(compiled.program, ref_big, got_big) is None,
                      "done": int((got_big.records[:, 2] == KIND_DONE).sum()), "kernel_ms": got_big.extra["timing"].kernel_ms,
                      "rounds": got_big.rounds, "sim_seconds": sim_s})

out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "gpu_measure.json"), "w") as f:
        json.dump(results, f, indent=2)
