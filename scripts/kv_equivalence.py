"""Two versions of the bundled pipeline's KV module, run on the same KV scenarios: the records
(matched by stage name, so an added or removed stage does not shift them), the final value of
every request field both have, and the shared state (the pool) must be the same.

    python3 scripts/kv_equivalence.py OLD_TREE [xl_spec]   # OLD_TREE: e.g. `git archive REV | tar -x -C /tmp/old`

The scenarios: the 8 of tests/test_kv_cache.py (small pools, eviction, grafting, pinned
requests, oversize, ...) and 4 random pools and batch sizes, on the simulator. Used when kv_plan
took the page-table count out of kv_manage (docs/kv_cache.md): every scenario the same.
"""
import sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
from xlgen.backends.build import load
from xlgen.runtime import sim
from xlgen.runtime.sim import LaunchConfig
import test_kv_cache as T

old_dir = sys.argv[1]
pipelines = sys.argv[2].split(",") if len(sys.argv) > 2 else ["xl_spec"]


def by_name(program, result):
    names = [s.name for s in program.stages]
    out = []
    for rec in result.records:
        req, rnd, kind, stage = (int(x) for x in rec[:4])
        out.append((req, rnd, kind, names[stage] if 0 <= stage < len(names) else stage, tuple(int(w) for w in rec[4:])))
    return out


def compare_runs(label, old_c, new_c, params, inputs, max_active):
    cfg = LaunchConfig(max_active=max_active, max_rounds=20_000)
    a = sim.run(old_c.sim_module(), params, inputs, cfg)
    b = sim.run(new_c.sim_module(), params, inputs, cfg)
    ra, rb = by_name(old_c.program, a), by_name(new_c.program, b)
    problems = []
    if ra != rb:
        first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
        problems.append(f"records differ at {first}: {ra[first:first+1]} vs {rb[first:first+1]} (lengths {len(ra)}, {len(rb)})")
    ra_, rb_ = a.requests, b.requests
    for name in ra_.dtype.names:
        if name in rb_.dtype.names and not np.array_equal(ra_[name], rb_[name]):
            problems.append(f"request field {name} differs")
    sa, sb = a.shared, b.shared
    for name in (sa.dtype.names if hasattr(sa, "dtype") else sa):
        if not np.array_equal(sa[name], sb[name]):
            problems.append(f"shared {name} differs")
    print(f"{label}: {len(ra)} records, {'SAME' if not problems else 'DIFFERENT: ' + '; '.join(problems[:4])}", flush=True)
    return not problems


ok = True
here = __import__("pathlib").Path(__file__).resolve().parent.parent
for pipe in pipelines:
    old_c, new_c = load(f"{old_dir}/stages/{pipe}.xl"), load(here / "stages" / f"{pipe}.xl")
    if pipe == "xl_spec":  # (the scenarios are written for it)
        for name, (make, params, active) in T.SCENARIOS.items():
            ok &= compare_runs(f"{pipe} {name}", old_c, new_c, params, make(new_c.sim_module()), active)
        for seed in range(4):  # more: random pools and batch sizes
            rng = np.random.default_rng(seed)
            params = {"kv_cache": True, "pool_pages": int(rng.integers(8, 64)), "eviction_policy": int(rng.integers(0, 2))}
            inputs = T._inputs(new_c.sim_module(), int(rng.integers(8, 48)), (0.0, 1.0), seed=seed + 10)
            ok &= compare_runs(f"{pipe} random {seed} {params}", old_c, new_c, params, inputs, int(rng.integers(2, 16)))
print("ALL SAME" if ok else "SOME DIFFER")
sys.exit(0 if ok else 1)
