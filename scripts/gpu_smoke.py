"""A fast first check on a GPU machine: compile, run tiny workloads in both modes, compare."""

import sys
import time

from xlgen.backends.build import load
from xlgen.tools.check.diff import committed_output_fields, compare, compare_results
from xlgen.runtime import gpu, sim
from xlgen.tools.pipeline.workload import load as load_workload

t0 = time.time()
compiled = load("stages/xl_spec.xl")
w = load_workload("workloads/small.json", compiled.sim_module())
failed = False
# The KV cache off, then on with a pool small enough to wait and evict.
for params in ({**w.params, "kv_cache": False}, {**w.params, "kv_cache": True, "pool_pages": 12}):
    ref = sim.run(compiled.sim_module(), params, w.inputs, w.config)
    for mode in ("deterministic", "fast"):
        got = gpu.run(compiled, params, w.inputs, w.config, mode=mode, timeout=60)
        d = (compare(compiled.program, ref, got) if mode == "deterministic"
             else compare_results(compiled.program, ref, got, committed_output_fields(compiled.program)))
        failed |= d is not None
        print(mode, params, "identical" if d is None else d.render(), got.extra["timing"], flush=True)
print(f"smoke done in {time.time() - t0:.1f}s")
sys.exit(1 if failed else 0)
