"""Fast mode, repeated: the GPU's schedule changes from run to run, so a
schedule-dependent bug shows up as an occasional difference from the simulator's
committed tokens. Runs the KV cache on and off, at a few request counts.

    python3 scripts/fast_mode_stress.py [REPEATS]     # on a GPU machine
"""

import sys

import numpy as np

from xlgen.backends.build import load
from xlgen.runtime import gpu, sim
from xlgen.runtime.sim import KIND_ERROR
from xlgen.tools.pipeline.workload import from_dict

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
FIELDS = ["n_out", "token_limit", "state", "iterations", "kv_held", "kv_ready", "kv_misses", "kv_waits",
          "prefill_tokens", "total_proposed", "total_accepted", "last_token"]
compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()


def workload(count):  # tests/test_gpu.py's generic workload
    return from_dict({"seed": count, "launch": {"max_active": 64, "max_rounds": 100000},
                      "generate": {"count": count, "fields": {
                          "seed": {"counter": 17}, "prompt_len": {"uniform": [4, 64]},
                          "max_new_tokens": {"uniform": [4, 40]},
                          "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
                          "base_acceptance": {"uniform": [0.1, 1.0]}}}}, module)


failures = 0
for count in (7, 64, 1000):
    for kv in (False, True):
        w = workload(count)
        params = {**w.params, "kv_cache": kv}
        expected = sim.run(module, params, w.inputs, w.config)
        bad_runs = 0
        for rep in range(REPEATS if count < 1000 else max(1, REPEATS // 10)):
            got = gpu.run(compiled, params, w.inputs, w.config, mode="fast")
            bad = np.nonzero((expected.requests["out_tokens"] != got.requests["out_tokens"]).any(axis=1))[0]
            if len(bad) == 0:
                continue
            bad_runs += 1
            if bad_runs <= 2:
                i = int(bad[0])
                print(f"  count={count} kv={kv} run {rep}: {len(bad)} requests differ; request {i}:")
                print("    " + ", ".join(f"{f} {expected.requests[f][i]}/{got.requests[f][i]}" for f in FIELDS))
                print("    sim", expected.requests["out_tokens"][i][:24].tolist())
                print("    gpu", got.requests["out_tokens"][i][:24].tolist())
                errors = got.records[got.records[:, 2] == KIND_ERROR]
                print("    error records", errors[:3, :6].tolist())
        failures += bad_runs
        print(f"count={count} kv_cache={kv}: {bad_runs} of {rep + 1} fast-mode runs differ from the simulator",
              flush=True)
sys.exit(1 if failures else 0)
