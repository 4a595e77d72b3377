"""Block-size trajectories of ASBS and the cost policy on the real pair, per prompt kind, with and
without KV pressure: docs/policy_trajectories.png (issue 24, item 4).

The first held-out prompt of each kind (models/bytes_pair/heldout_prompts.json: code, prose,
structured, random bytes), all in one launch of the CPU build (the same bits as the simulator and
the GPU: the block sizes are the GPU's too), --n new tokens each. Columns:

  ASBS                    the seeds' thresholds (the bundled default)
  ASBS, small pool        a pool of about 60% of what the four need: pressure (cap 2) and evictions
  cost, H100 costs        the cost policy (one block per round for the four: cost_batch.xl) at the
                          pipeline's default costs (byte_spec on an H100 at batch 1, issue 23's
                          final run: a verify of B + 1 positions costs about B + 1 plain steps),
                          with and without the small pool
  cost, cheap verify      the cost policy at hypothetical costs of a weight-once verify pass (a
                          step of B: 1 + 0.2 B plain steps; the draft's catch-up 0.03 plain steps
                          a position), with and without the small pool

    python3 scripts/plot_policy_trajectories.py                       # writes docs/policy_trajectories.png
    python3 scripts/plot_policy_trajectories.py --n 32 -o /tmp/t.png  # quicker
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A weight-once verify (hypothetical): a step of block B costs 1 + 0.2 B plain steps (a draft pass
# 0.12, one more verified position 0.08); the draft's catch-up 0.03 plain steps a position (the
# ratio measured on an H100 at batch 1: cost_batch.xl).
CHEAP_VERIFY = {"cost_b0": 1.0, "cost_b1": 1.2, "cost_b2": 1.4, "cost_b4": 1.8, "cost_b8": 2.6, "cost_catchup": 0.03}


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="plot_policy_trajectories.py", description=doc[0],
                                 epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "docs" / "policy_trajectories.png")
    ap.add_argument("--n", type=int, default=96, help="new tokens per prompt (default 96)")
    ap.add_argument("--backend", choices=("cpu", "sim"), default="cpu", help="cpu (default) or sim (slow)")
    args = ap.parse_args(argv)

    from xlgen.backends.build import load
    from xlgen.runtime import cpu, sim
    from xlgen.runtime.sim import LaunchConfig
    from xlgen.companion import load as load_companion

    tools = load_companion(ROOT / "stages" / "byte_spec_tools.py")  # the real pair's code, beside its pipeline
    rp = tools.beside("real_pair")
    policy_trajectories, pressure_pool = (getattr(tools.beside("real_demo"), name)
                                          for name in ("policy_trajectories", "pressure_pool"))

    binding = rp.load_binding()
    held = rp.load_prompts(rp.pair_dir() / "heldout_prompts.json")
    prompts = list({p.kind: p for p in reversed(held)}.values())[::-1]  # the first of each kind, in file order
    compiled = load(binding.pipeline_path())
    weights = rp.load_weights()
    config = LaunchConfig(max_active=len(prompts))

    def run(params, inputs):
        if args.backend == "sim":
            return sim.run(compiled.sim_module(), params, inputs, config)
        return cpu.run(compiled, params, inputs, config)

    pages = pressure_pool(prompts, args.n, binding)
    small = {binding.pool_param: pages}
    asbs, cost = binding.params("speculative"), binding.params("cost")
    pool = f"{pages}-page pool"
    variants = {"ASBS": asbs, f"ASBS, {pool}": {**asbs, **small},
                "cost, H100 costs": cost, f"cost, H100 costs, {pool}": {**cost, **small},
                "cost, cheap verify": {**cost, **CHEAP_VERIFY}, f"cost, cheap verify, {pool}": {**cost, **CHEAP_VERIFY, **small}}
    runs = policy_trajectories(run, compiled, weights, binding, prompts, args.n, variants)
    for name, rows in runs.items():
        print(f"{name}:")
        print("  " + rp.format_speculation(rows).replace("\n", "\n  "))
        for r in rows:
            sizes = {int(b): int((r.blocks == b).sum()) for b in sorted(set(r.blocks.tolist()))}
            print(f"  {r.name}: block sizes chosen {sizes}")
    title = (f"Block size per verify step on the real pair ({args.n} new tokens; {args.backend} build = GPU bits): "
             "ASBS and the cost policy, with and without KV pressure")
    path = rp.plot_policy_trajectories(runs, args.out, title)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
