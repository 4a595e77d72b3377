"""Round times of the real pair in the mega-kernel (GPU): plain greedy and ASBS at batch 1 and 8,
128 new tokens, one team size; from the kernel's own per-round %globaltimer stamps.

    python3 scripts/real_rounds.py 16                    # team of 16 warps (after scripts/device_setup.sh)
    python3 scripts/real_rounds.py 16 --timeline OUT     # also where each round's time goes

Prints the kernel time, the rounds, the first round, and the median / p90 / max round in µs (the
max is the prefill round of the longest prompt). With --timeline, each launch runs the kernel's
timeline build (docs/gpu.md, "Timeline"; its cubin: `scripts/precompile_cubins.py --timeline`),
writes OUT/timeline_<policy>_b<batch>.json and prints `xlgen profile`'s table of it: the stages,
phase 2's parts, the barrier waits.
"""

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.runtime.sim import LaunchConfig
from xlgen.companion import load as load_companion
from xlgen.core.resources import data_dir

# The real pair's code, beside byte_spec.xl's companion (stages/real_pair.py)
rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("team", nargs="?", type=int, default=16, help="warps per team (default 16; blocks: the runtime's)")
ap.add_argument("--timeline", type=Path, default=None, metavar="OUT", help="run the timeline build; traces into OUT")
args = ap.parse_args()

binding = rp.load_binding()
compiled = load(binding.pipeline_path())
weights = rp.load_weights()
prompts = rp.load_prompts()
for label in ("plain", "speculative"):
    for batch in (1, 8):
        inputs = rp.request_inputs(prompts[:batch], 128, binding)
        params = rp.launch_params(compiled.sim_module(), weights, binding.params(label))
        for _ in range(2):  # the first launch compiles and uploads
            result = gpu.run(compiled, params, inputs, LaunchConfig(max_active=batch), team_warps=args.team,
                             timeline=args.timeline is not None)
        rounds_us = np.diff(result.extra["round_end_ns"]) / 1e3
        print(f"{label} b{batch} W{args.team}x{result.extra['team_blocks']}: kernel {result.extra['timing'].kernel_ms:.1f} ms, "
              f"rounds {result.rounds}, first round {rounds_us[0]:.0f} us, median {statistics.median(rounds_us):.1f} us, "
              f"p90 {np.percentile(rounds_us, 90):.1f}, max {rounds_us.max():.0f}", flush=True)
        if args.timeline is not None:
            from xlgen.tools.measure import timeline

            args.timeline.mkdir(parents=True, exist_ok=True)
            trace = timeline.to_trace(result.extra["timeline"], compiled.program, {"policy": label, "batch": batch})
            path = args.timeline / f"timeline_{label}_b{batch}.json"
            path.write_text(json.dumps(trace))
            print(timeline.profile(trace).table(), flush=True)
