"""One deterministic mega-kernel run at the benchmark's target point (B=32, gamma=8,
256 tokens; the KV cache off, or on with a 256-page pool given `kv`), for Nsight Compute:

    ncu -k regex:xl_run_deterministic -c 1 --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats python3 scripts/profile_target.py [kv]
"""

import sys

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.tools.pipeline.workload import from_dict

compiled = load("stages/xl_spec.xl")
w = from_dict({"seed": 32, "launch": {"max_active": 32, "max_rounds": 100000}, "params": {"fixed_block": 8, "kv_cache": sys.argv[1:] == ["kv"], "pool_pages": 256},
               "generate": {"count": 32, "fields": {"seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]},
                                                    "max_new_tokens": 256, "profile": "CONSTANT",
                                                    "base_acceptance": 0.6}}}, compiled.sim_module())
r = gpu.run(compiled, w.params, w.inputs, w.config, mode="deterministic", timeout=600)
print("rounds", r.rounds, "timing", r.extra["timing"])
