"""Where phase 2's time goes for the real pair (GPU): the kernel built with -DXL_PROFILE_PHASE2 (thread 0 of
block 0 sums the clock cycles between marks: each collective stage's guards, segments, groups of
collectives, settling and traces), cycles per round, for plain greedy and the cost policy.

    python3 scripts/real_phase2.py                       # the 72 held-out prompts x 64 tokens, 8 at a time
    python3 scripts/real_phase2.py --costs OUT/costs.json --batch 8 --n 64
    python3 scripts/profile_kv_rounds.py phases          # the same marks for the bundled xl_spec pipeline

The costs file (scripts/real_bench.py's costs.json or real_bench.json) sets the cost policy's costs and prior;
without one the pipeline's defaults. docs/benchmarks.md (nineteenth session) has a run and what it showed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts-file", type=Path, default=ROOT / "models" / "bytes_pair" / "heldout_prompts.json")
    ap.add_argument("--batch", type=int, default=8, help="requests at a time (default 8)")
    ap.add_argument("--n", type=int, default=64, help="new tokens per prompt (default 64)")
    ap.add_argument("--costs", type=Path, default=None, help="a costs.json or real_bench.json of real_bench.py")
    ap.add_argument("--team", default="16x8", help="the team, WARPSxBLOCKS (default 16x8)")
    args = ap.parse_args()
    os.environ["XLGEN_NVRTC_OPTIONS"] = (os.environ.get("XLGEN_NVRTC_OPTIONS", "") + " -DXL_PROFILE_PHASE2").strip()

    import cupy
    import real_bench as rb
    from xlgen.backends.build import load
    from xlgen.runtime import gpu
    from xlgen.runtime.sim import LaunchConfig
    from xlgen.tools.measure import phase2

    rp = rb.rp
    warps, _, blocks = args.team.partition("x")
    team = {"team_warps": int(warps), "team_blocks": int(blocks or 1)}
    binding = rp.load_binding()
    compiled = load(binding.pipeline_path())
    weights = rp.load_weights()
    prompts = rp.load_prompts(args.prompts_file)
    costs, catchup, accept = rb.load_costs(args.costs, [args.batch]) if args.costs else ({}, {}, {})
    variants = dict(rb.mega_variants(binding, [], ("cost",), costs.get(args.batch), catchup.get(args.batch),
                                     accept.get(args.batch)))
    prof = phase2.counters(gpu.compile_module(compiled, **team).module)
    names = {s.index: s.name for s in compiled.program.stages if s.is_collective}
    for name in ("mega plain", "mega cost"):
        inputs = rp.request_inputs(prompts, args.n, binding)
        params = rp.launch_params(compiled.sim_module(), weights, variants[name])
        config = LaunchConfig(max_active=args.batch)
        gpu.run(compiled, params, inputs, config, **team)  # warm-up
        prof.fill(0)
        cupy.cuda.Device().synchronize()
        result = gpu.run(compiled, params, inputs, config, **team)
        print(f"== {name}, {len(prompts)} prompts x {args.n} tokens, {args.batch} at a time: kernel "
              f"{result.extra['timing'].kernel_ms:.2f} ms, {result.rounds} rounds; cycles per round")
        for what, cycles in phase2.per_round(prof.get(), names, result.rounds):
            print(f"  {what}: {cycles:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
