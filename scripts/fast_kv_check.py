"""Fast mode against deterministic mode with the KV cache (docs/gpu.md, "Fast mode"), side by
side in one process on one GPU: kernel time (median of the runs after the first) and, for
every run, whether each request committed plain greedy decoding's tokens and the pool's final
invariants hold (nothing leaked, counters at zero).

    python3 scripts/fast_kv_check.py                 # on a GPU machine; JSON to $OUT (or .)
    python3 scripts/fast_kv_check.py --repeats 3 --points 1000,oversubscribed

Points: `1000` (scale_workload: 1,000 requests, 1,024 at once, the ample 16,384-page pool),
`oversubscribed` (the same requests through a pool of a tenth of the pages their full lengths
take), `target` (docs/bench/target_point_kv.json: 32 requests, 256 pages), each also with
the KV cache off (`-off`) for the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import numpy as np

from xlgen.backends.build import load
from xlgen.runtime import gpu
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR
from xlgen.tools.pipeline.companion import load as load_companion
from xlgen.tools.pipeline.workload import from_dict

TOOLS = load_companion("stages/xl_spec_tools.py").module  # the bundled pipeline's companion
POINTS = ("1000", "oversubscribed", "target", "1000-off", "target-off")


def workload(module, point: str):
    name, _, off = point.partition("-")
    if name == "target":
        spec = json.loads(Path("docs/bench/target_point_kv.json").read_text())
        spec["params"]["kv_cache"] = not off
        return from_dict(spec, module)
    w = TOOLS.scale_workload(module, 1000, not off)
    if name == "oversubscribed":
        pt = int(w.params.get("page_tokens", 16))
        pages = sum(-(-(int(r["prompt_len"]) + int(r["max_new_tokens"]) + 1) // pt) for r in w.inputs)
        w.params["pool_pages"] = pages // 10
    return w


def check(result, w) -> list[str]:
    """What must hold in either mode: every request DONE, none failed, greedy's tokens, the pool empty."""
    recs = result.records
    out = []
    if (recs[:, 2] == KIND_ERROR).any():
        out.append(f"{int((recs[:, 2] == KIND_ERROR).sum())} error records")
    if sorted(recs[recs[:, 2] == KIND_DONE][:, 0].tolist()) != list(range(len(w.inputs))):
        out.append("not every request is DONE once")
    vocab, eos = int(w.params.get("vocab", 32000)), int(w.params.get("eos_token", 0))
    wrong = [i for i, r in enumerate(w.inputs)
             if result.requests["out_tokens"][i][:int(result.requests["n_out"][i])].tolist()
             != TOOLS.greedy_tokens(r["seed"], r["prompt_len"], r["max_new_tokens"], vocab, eos)]
    if wrong:
        out.append(f"{len(wrong)} requests' tokens differ from greedy's, e.g. {wrong[:3]}")
    if w.params.get("kv_cache", True):
        out += TOOLS.check_final(result, int(w.params.get("pool_pages", 16384)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default=",".join(POINTS), help="a comma-separated subset of: " + ", ".join(POINTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take (the hang report)")
    args = ap.parse_args()
    compiled = load("stages/xl_spec.xl")
    module = compiled.sim_module()
    rows = []
    for point in args.points.split(","):
        w = workload(module, point)
        times = {m: [] for m in ("deterministic", "fast")}
        problems = {m: [] for m in times}
        for rep in range(args.repeats + 1):  # interleaved; the first run of each loads the module
            for mode in times:
                try:
                    out = gpu.run(compiled, w.params, w.inputs, w.config, mode=mode, timeout=args.timeout)
                except Exception as exc:  # noqa: BLE001 - a hang report or a failed launch: say so, go on
                    problems[mode].append(f"run {rep}: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                problems[mode] += [f"run {rep}: {p}" for p in check(out, w)]
                if rep:
                    times[mode].append(out.extra["timing"].kernel_ms)
        for mode in times:
            row = {"point": point, "mode": mode, "pool_pages": w.params.get("pool_pages", 16384),
                   "kv_cache": bool(w.params.get("kv_cache", True)), "requests": len(w.inputs),
                   "median_ms": statistics.median(times[mode]) if times[mode] else None, "runs_ms": times[mode],
                   "ok": not problems[mode], "problems": problems[mode][:5]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fast_kv_check.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
