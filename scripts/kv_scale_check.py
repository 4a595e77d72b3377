"""The KV cache at scale, without a GPU: the simulator with the pool invariants checked
after every round (the bundled pipeline's companion, stages/xl_spec_tools.py), then the CPU build, whose traces and final state
must be identical. The workloads are scripts/gpu_measure.py's (the GPU run compares
its traces with the same simulator run).

    python3 scripts/kv_scale_check.py            # 1,000 and 100,000 requests
    python3 scripts/kv_scale_check.py 1000       # one size
"""

from __future__ import annotations

import sys
import time

from xlgen.backends.build import load
from xlgen.tools.check.diff import compare
from xlgen.tools.pipeline.companion import load as load_companion
from xlgen.runtime import cpu, sim

compiled = load("stages/xl_spec.xl")
module = compiled.sim_module()
TOOLS = load_companion("stages/xl_spec_tools.py").module
PoolObserver, assert_invariants = TOOLS.PoolObserver, TOOLS.assert_invariants


for n in [int(a) for a in sys.argv[1:]] or list(TOOLS.SCALE_SIZES):
    w = TOOLS.scale_workload(module, n)
    max_active = w.config.max_active
    assert w.params.get("kv_cache", True), "the KV cache is on by default"
    pool = int(w.params.get("pool_pages", 16384))
    observer = PoolObserver(pool)
    t0 = time.time()
    reference = sim.run(module, w.params, w.inputs, w.config, observer=observer)
    sim_s = time.time() - t0
    assert_invariants(reference, pool, observer)
    t0 = time.time()
    got = cpu.run(compiled, w.params, w.inputs, w.config)
    cpu_s = time.time() - t0
    divergence = compare(compiled.program, reference, got)
    assert divergence is None, divergence.render()
    print(f"{n} requests (max_active {max_active}), KV cache on (pool {pool}): {reference.rounds} rounds; "
          f"pool invariants held after each of {observer.rounds} rounds, nothing leaked; "
          f"CPU build identical (traces and final state); simulator {sim_s:.1f} s, CPU build {cpu_s:.1f} s",
          flush=True)
