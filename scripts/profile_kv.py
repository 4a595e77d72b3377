"""One deterministic mega-kernel run with the paged KV cache on (an ample pool), for
Nsight Compute: where the serial kv_manage turns spend their time.

    ncu -k regex:xl_run_deterministic -c 1 --section SpeedOfLight --section WarpStateStats \
        python3 scripts/profile_kv.py

(Per-line attribution, `--section SourceCounters` with `XLGEN_NVRTC_OPTIONS=-lineinfo`,
needs PC sampling, which the lent H200 did not provide: the source page came back
without metrics.)
"""

from xlgen.build import load
from xlgen.runtime import gpu
from xlgen.workload import from_dict

compiled = load("stages/xl_spec.xl")
w = from_dict({"seed": 32, "launch": {"max_active": 32, "max_rounds": 100000},
               "params": {"fixed_block": 8, "kv_cache": True, "pool_pages": 16384},
               "generate": {"count": 32, "fields": {"seed": {"counter": 11}, "prompt_len": {"uniform": [32, 128]},
                                                    "max_new_tokens": 256, "profile": "CONSTANT",
                                                    "base_acceptance": 0.6}}}, compiled.sim_module())
r = gpu.run(compiled, w.params, w.inputs, w.config, mode="deterministic", timeout=600)
print("rounds", r.rounds, "timing", r.extra["timing"])
