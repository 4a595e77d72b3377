"""Round times of the real pair in the mega-kernel (GPU): plain greedy and ASBS at batch 1 and 8,
128 new tokens, one team size; from the kernel's own per-round %globaltimer stamps.

    python3 scripts/real_rounds.py 16        # team of 16 warps (after scripts/device_setup.sh)

Prints the kernel time, the rounds, the first round, and the median / p90 / max round in µs (the
max is the prefill round of the longest prompt).
"""

import statistics
import sys

import numpy as np

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.runtime.sim import LaunchConfig
from xlgen.companion import load as load_companion
from xlgen.core.resources import data_dir

# The real pair's code, beside byte_spec.xl's companion (stages/real_pair.py)
rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")

team = int(sys.argv[1]) if len(sys.argv) > 1 else 16
binding = rp.load_binding()
compiled = load(binding.pipeline_path())
weights = rp.load_weights()
prompts = rp.load_prompts()
for label in ("plain", "speculative"):
    for batch in (1, 8):
        inputs = rp.request_inputs(prompts[:batch], 128, binding)
        params = rp.launch_params(compiled.sim_module(), weights, binding.params(label))
        for _ in range(2):  # the first launch compiles and uploads
            result = gpu.run(compiled, params, inputs, LaunchConfig(max_active=batch), team_warps=team)
        rounds_us = np.diff(result.extra["round_end_ns"]) / 1e3
        print(f"{label} b{batch} W{team}: kernel {result.extra['timing'].kernel_ms:.1f} ms, rounds {result.rounds}, "
              f"first round {rounds_us[0]:.0f} us, median {statistics.median(rounds_us):.1f} us, "
              f"p90 {np.percentile(rounds_us, 90):.1f}, max {rounds_us.max():.0f}")
