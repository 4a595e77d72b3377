"""Phase 2 over the grid (docs/gpu.md): the bundled pipeline's KV cache at 1,000 and 100,000
requests and at the target point (`target`: docs/bench/target_point_kv.json, 32 requests), the
KV cache on and off, each in the variants below, interleaved in one process on one GPU: kernel
time (median of the runs after the first) and whether the traces equal the simulator's.

    python3 scripts/grid_phase2_check.py              # on a GPU machine; JSON to $OUT (or .)
    python3 scripts/grid_phase2_check.py 1000 target --repeats 3

The simulator's runs are long (100,000 requests with the KV cache: minutes), so the script
compares digests (SHA-256 of the sorted records, the final request and shared state and the
pools, the words `compare` reads): `--sim-only` computes the simulator's here, into
XLGEN_CACHE/sim_digests.json, to be carried.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import numpy as np
import statistics
import time
from pathlib import Path

from xlgen.backends.build import load
from xlgen.runtime import gpu, sim
from xlgen.tools.check.diff import canonical_words, pool_words
from xlgen.tools.pipeline.companion import load as load_companion
from xlgen.tools.pipeline.workload import from_dict

TOOLS = load_companion("stages/xl_spec_tools.py").module  # the bundled pipeline's companion
TARGET = Path("docs/bench/target_point_kv.json")
VARIANTS = {  # phase 2 over the grid (every block, or 32 slots a block) or in block 0; consecutive participants
              # on different warps or not
    "grid": "", "grid/32-a-block": "-DXL_PHASE2_BLOCK_SLOTS=32", "grid/one-warp": "-DXL_SPREAD_SLOTS=0",
    "block0": "-DXL_GRID_PHASE2=0", "block0/one-warp (before)": "-DXL_GRID_PHASE2=0 -DXL_SPREAD_SLOTS=0",
    "grid/no-flag": "-DXL_TURN_FLAG=0", "block0/no-flag": "-DXL_GRID_PHASE2=0 -DXL_TURN_FLAG=0"}


def workload(module, count, kv_cache):
    if count == "target":
        spec = json.loads(TARGET.read_text())
        spec["params"]["kv_cache"] = kv_cache
        return from_dict(spec, module)
    return TOOLS.scale_workload(module, count, kv_cache)


def digest(result) -> str:
    """What `compare` compares, hashed: records (sorted by every backend), final state, pools."""
    h = hashlib.sha256(np.ascontiguousarray(result.records, dtype=np.uint32).tobytes())
    for state in (result.requests, result.shared):
        h.update(np.ascontiguousarray(canonical_words(state)).tobytes())
    for name in sorted(result.pools):
        h.update(name.encode() + np.ascontiguousarray(pool_words(result.pools[name])).tobytes())
    return h.hexdigest()


def reference(module, w, count, kv_cache) -> str:
    """The simulator's digest of the workload, from the cache when this source ran this workload before."""
    sources = "".join(p.read_text() for p in sorted(Path("stages").glob("*.xl")))
    key = hashlib.sha256(f"{sources}{w.params!r}{w.inputs!r}{w.config!r}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XLGEN_CACHE", Path.home() / ".cache" / "xlgen")) / "sim_digests.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    if key not in known:
        t0 = time.time()
        known[key] = digest(sim.run(module, w.params, w.inputs, w.config))
        print(f"simulated {count} requests (KV {'on' if kv_cache else 'off'}) in {time.time() - t0:.0f} s", flush=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1))
    return known[key]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="*", type=lambda a: a if a == "target" else int(a), default=[*TOOLS.SCALE_SIZES, "target"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="a comma-separated subset of: " + ", ".join(VARIANTS))
    ap.add_argument("--sim-only", action="store_true", help="compute the simulator's references and stop")
    args = ap.parse_args()
    compiled = load("stages/xl_spec.xl")
    module = compiled.sim_module()
    rows = []
    for count in args.sizes:
        for kv_cache in (True, False):
            w = workload(module, count, kv_cache)
            ref = reference(module, w, count, kv_cache)
            if args.sim_only:
                continue
            variants = {v: VARIANTS[v] for v in args.variants.split(",")}
            times = {v: [] for v in variants}
            round_us = {}
            same = {}
            for rep in range(args.repeats + 1):  # interleaved; the first run of each loads the module
                for name, options in variants.items():
                    os.environ["XLGEN_NVRTC_OPTIONS"] = options
                    out = gpu.run(compiled, w.params, w.inputs, w.config, mode="deterministic")
                    if rep:
                        times[name].append(out.extra["timing"].kernel_ms)
                        round_us[name] = np.diff(out.extra["round_end_ns"]) / 1e3  # the last run's rounds
                    same[name] = digest(out) == ref
                    rounds = out.rounds
            for name in variants:
                row = {"requests": count, "kv_cache": kv_cache, "phase2": name,
                       "median_ms": statistics.median(times[name]) if times[name] else None,
                       "runs_ms": times[name], "rounds": rounds, "traces_identical": same[name],
                       "round_us": {q: float(np.percentile(round_us[name], p)) for q, p in
                                    (("median", 50), ("p90", 90), ("max", 100))} if len(round_us.get(name, [])) else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
    os.environ["XLGEN_NVRTC_OPTIONS"] = ""
    if args.sim_only:
        return 0
    out_dir = Path(os.environ.get("OUT", "."))
    (out_dir / f"grid_phase2_{'_'.join(map(str, args.sizes))}.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["traces_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
