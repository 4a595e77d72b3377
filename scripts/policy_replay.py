"""Replay the real pair's block-size policies on the CPU build, with costs calibrated on a GPU: no GPU
needed to see what a policy decides and what that would cost (issue 24).

A policy's decisions depend only on the launch's parameters and the tokens, and the CPU build computes
the same bits as the GPU, so a launch replayed here takes the same blocks in the same rounds. Its time
is then modelled from a calibration (`scripts/real_bench.py --calibrate-only`'s costs.json, or a
real_bench.json): each round costs the step cost of the largest block verified in it (cost_b0 where
none was), and each position the draft computed costs the catch-up per position. The model leaves out
prefill and the launch, so its tokens/s are higher than the GPU's; it ranks variants, it does not
replace measuring them.

    python3 scripts/policy_replay.py costs.json --batch 8                    # plain, cost, B = 1
    python3 scripts/policy_replay.py costs.json --batch 8 --policies cost --param asbs_ema_init=0.8
    python3 scripts/policy_replay.py costs.json --batch 1 --policies cost,asbs,B=2 --prompts 8 --n 32

The cost variant takes the file's costs, catch-up and acceptance prior (where it has them) as
real_bench does; --param NAME=VALUE overrides any launch parameter of every variant.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_bench as rb  # noqa: E402  (its costs files and variants: the same launches real_bench runs)

rp = rb.rp
BLOCKS = (0, 1, 2, 4, 8)
VARIANTS = {"plain": "mega plain", "asbs": "mega ASBS", "cost": "mega cost"}  # --policies name -> real_bench's


def variant_params(binding, names: list[str], costs: dict, catchup, prior) -> list[tuple[str, dict]]:
    """Each variant's launch parameters, as real_bench.mega_variants gives them: plain, asbs, cost (the
    calibration's costs, catch-up and prior) or B=k."""
    blocks = [int(name[2:]) for name in names if name.startswith("B=") and name[2:].isdigit() and int(name[2:]) > 0]
    for name in names:
        if name not in VARIANTS and name not in (f"B={b}" for b in blocks):
            raise SystemExit(f"policy_replay: variant {name!r}: plain, asbs, cost or B=k (k >= 1)")
    table = dict(rb.mega_variants(binding, blocks, rb.POLICIES, costs, catchup, prior))
    return [(name, table[VARIANTS.get(name, f"mega {name}")]) for name in names]


def modelled(program, module, result, costs: dict[int, float], catchup: float, binding) -> dict:
    """Rounds, tokens, the blocks the rounds verified, the draft's rows, and the modelled time (us)."""
    kind, fields = next((i, f) for i, stage, f in module.TRACES if stage == binding.verify_stage)
    at = list(fields).index(binding.proposed)
    table = result.record_table
    block_of_round: dict[int, int] = collections.defaultdict(int)
    for rec in table[table["kind"] == kind]:
        block_of_round[int(rec["round"])] = max(block_of_round[int(rec["round"])], int(rec["words"][at]))

    def cost_of(b: int) -> float:
        return costs[next((k for k in BLOCKS if b <= k), BLOCKS[-1])]

    rounds = int(result.rounds)
    draft_rows = int(sum(int(v) for v in result.requests["d_rows"])) if "d_rows" in result.requests.dtype.names else 0
    time_us = sum(cost_of(block_of_round.get(r, 0)) for r in range(rounds)) + draft_rows * catchup
    tokens = sum(len(a) for a in rp.committed_tokens(program, result))
    return {"rounds": rounds, "tokens": tokens, "draft_rows": draft_rows, "model_us": time_us,
            "model_tokens_per_s": tokens / time_us * 1e6 if time_us else None,
            "blocks": dict(sorted(collections.Counter(block_of_round.values()).items()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("costs", type=Path, help="a calibration: costs.json or real_bench.json of scripts/real_bench.py")
    ap.add_argument("--batch", type=int, default=8, help="requests at once; the calibration's costs at this batch (8)")
    ap.add_argument("--policies", default="plain,cost,B=1", help="variants: plain, asbs, cost, B=k (plain,cost,B=1)")
    ap.add_argument("--prompts-file", type=Path, default=None, help="prompts (default: the held-out set)")
    ap.add_argument("--prompts", type=int, default=None, help="the first N prompts only")
    ap.add_argument("--n", type=int, default=64, help="new tokens per prompt (64)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a launch parameter, every variant")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    from xlgen.backends.build import load
    from xlgen.runtime import cpu
    from xlgen.runtime.sim import LaunchConfig

    try:
        tables = rb.load_costs(args.costs, [args.batch])
    except rp.RealPairError as exc:
        raise SystemExit(f"policy_replay: {exc}") from None
    costs, catchup, prior = (table.get(args.batch) for table in tables)
    overrides = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"policy_replay: --param {item!r}: give NAME=VALUE")
        try:
            overrides[name] = json.loads(value)  # a number or true/false
        except ValueError:
            overrides[name] = value  # an enum's member, e.g. COST
    binding = rp.load_binding()
    prompts = rp.load_prompts(args.prompts_file or rp.models_dir() / "bytes_pair" / "heldout_prompts.json")
    prompts = prompts[:args.prompts] if args.prompts else prompts
    inputs = rp.request_inputs(prompts, args.n, binding)
    compiled = load(binding.pipeline_path())
    module = compiled.sim_module()
    weights = rp.load_weights()
    rows = []
    for name, variant in variant_params(binding, args.policies.split(","), costs, catchup, prior):
        params = rp.launch_params(module, weights, {**variant, **overrides})
        t0 = time.perf_counter()
        result = cpu.run(compiled, params, inputs, LaunchConfig(max_active=args.batch))
        row = {"variant": name, "batch": args.batch,
               **modelled(compiled.program, module, result, costs, catchup or 0.0, binding), "cpu_s": time.perf_counter() - t0}
        rows.append(row)
        print(f"{name:<6} batch {args.batch}: {row['rounds']} rounds, {row['tokens']} tokens "
              f"({row['tokens'] / max(row['rounds'], 1):.2f} a round), modelled {row['model_tokens_per_s']:,.0f} tok/s, "
              f"blocks {row['blocks']}, draft rows {row['draft_rows']}  [{row['cpu_s']:.0f} s on the CPU]", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "policy_replay.json").write_text(json.dumps({"costs": str(args.costs), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
