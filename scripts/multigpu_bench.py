"""Several GPUs against one on one large workload (docs/sweep.md, docs/benchmarks.md).

    source scripts/device_setup.sh                       # on a 2-GPU machine, with Ray installed
    python3 scripts/multigpu_bench.py --gpus 2           # 10,000 requests, KV cache on and off; logs to $OUT
    python3 scripts/multigpu_bench.py --backend sim --gpus 2 --count 300   # the same path on CPU workers

For each KV setting: a warm-up on every GPU, then `--repeats` runs of the whole
workload on one GPU and `--repeats` runs sharded over all of them (round-robin by
request id, a mega-kernel and a KV pool per GPU), through the same Ray actors
(xlgen.tools.measure.multigpu.bench_sharded). Committed tokens of the sharded run are compared
with the 1-GPU run's and with plain greedy decoding's for every request. The
requests are generated like workloads/mixed.json (every acceptance profile,
prompts of 16-128 tokens, 64/128/256 new tokens), each with its own seed.
Writes multigpu.json and multigpu.md to --out (default $OUT, else ./bench-out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xlgen.backends.build import load  # noqa: E402
from xlgen.tools.measure.multigpu import ShardPool, bench_sharded  # noqa: E402
from xlgen.tools.pipeline.workload import from_dict  # noqa: E402


def workload(module, count: int, max_active: int, kv_cache: bool):
    return from_dict({
        "name": f"mixed-{count} kv {'on' if kv_cache else 'off'}", "seed": 7,
        "launch": {"max_active": max_active, "max_rounds": 1_000_000},
        "params": {"vocab": 32000, "kv_cache": kv_cache},
        "generate": {"count": count, "fields": {
            "seed": {"counter": 1000}, "prompt_len": {"uniform": [16, 128]},
            "max_new_tokens": {"choice": [64, 128, 256]},
            "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
            "base_acceptance": {"cycle": [0.3, 0.6, 0.9, 0.98]}}}}, module)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=2, help="GPUs (or CPU workers with --backend sim/cpu)")
    ap.add_argument("--backend", default="gpu", choices=["gpu", "gpu-fast", "sim", "cpu"])
    ap.add_argument("--count", type=int, default=10_000, help="requests")
    ap.add_argument("--max-active", type=int, default=256, help="batch capacity per GPU")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kv", choices=["on", "off", "both"], default="both")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)

    pipeline = ROOT / "stages" / "xl_spec.xl"
    compiled = load(pipeline)
    module = compiled.sim_module()
    pool = ShardPool(compiled, pipeline, args.gpus, args.backend)
    log(f"{args.gpus} workers: {pool.devices}")
    import ray

    out = {"ray": ray.__version__, "devices": pool.devices, "backend": args.backend, "runs": []}
    ok = True
    for kv in ([False, True] if args.kv == "both" else [args.kv == "on"]):  # the quick one first
        w = workload(module, args.count, args.max_active, kv)
        log(f"{w.name}: {len(w.inputs)} requests, max_active {args.max_active} per worker")
        report = bench_sharded(pool, w, repeats=args.repeats)
        log("\n" + report.table())
        out["runs"].append(report.to_json() | {"table": report.table(), "markdown": report.markdown()})
        ok = ok and report.identical
        with open(args.out / "multigpu.json", "w") as f:
            json.dump(out, f, indent=2, default=str)
    pool.close()
    with open(args.out / "multigpu.md", "w") as f:
        for run in out["runs"]:
            f.write(f"{run['workload']}:\n\n{run['markdown']}\n\n")
    log("committed tokens identical everywhere" if ok else "COMMITTED TOKENS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
