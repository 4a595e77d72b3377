"""Differential fuzzing at scale: the programs of tests/test_fuzz_backends.py (xlgen/tools/check/fuzzgen/),
simulator against the CPU build, over a range of seeds, one process per core.

    python3 scripts/fuzz_many.py FIRST COUNT result.json      # e.g. 0 10000; JOBS=N to set the processes
    BACKENDS=cpu,gpu python3 scripts/fuzz_many.py ...          # also the GPU (deterministic mode)
    BACKENDS=gpu-fast SCHEDULE_FREE=1 python3 scripts/fuzz_many.py ...  # fast mode against sim.run_interleaved
                                                               # (without SCHEDULE_FREE: what every schedule holds)
    GROUPED=1 python3 scripts/fuzz_many.py ...                 # only programs with a weight-once loop
                                                               # (backends/grouping.py: ~8% of them)
    ROWS=1 python3 scripts/fuzz_many.py ...                    # only programs with a loop run in tiles of
                                                               # rows (grouping.rows_plan)
    PROCS=1 python3 scripts/fuzz_many.py ...                   # only programs using procs (~22% of them)
    POOL_ROWS=1 python3 scripts/fuzz_many.py ...               # only programs whose lanes loops write a row
                                                               # of a pool per iteration (~6% of them)
    RAGGED=1 python3 scripts/fuzz_many.py ...                  # only programs with a weight-once tile whose sums
                                                               # stop each on its own, or whose elements may fail
    PARTS=1 python3 scripts/fuzz_many.py ...                   # only programs whose tiles hoist several parts
                                                               # or a pool read's page (grouping.invariant_parts)
    PAGE_ONCE=1 python3 scripts/fuzz_many.py ...               # only programs with a loop whose pool page is
                                                               # checked once before it (emit_cpp._page_checked_once)
    PRELUDES=1 python3 scripts/fuzz_many.py ...                # only programs whose tiles compute a position's
                                                               # reductions and lets first (grouping.Rows.preludes)
    TILE_PRELUDES=1 python3 scripts/fuzz_many.py ...           # only programs whose tiles' preludes read a let
                                                               # the same over the tile's rows
                                                               # (grouping.Rows.preludes_per_tile)
    RUNS=1 python3 scripts/fuzz_many.py ...                    # only programs with reductions side by side
                                                               # taken in one pass (ir.reduction_runs)
    READS_AHEAD=1 python3 scripts/fuzz_many.py ...             # only programs whose passes read shared state
                                                               # ahead (emit_cpp._reads_ahead: ~12% of them)
    COLLECTIVES=1 python3 scripts/fuzz_many.py ...             # only programs with a collective stage (~70%:
                                                               # their crowd launch runs phase 2 over the grid)

Progress every 100 programs on stdout; result.json lists every failing seed with what failed, and
how many of the programs declared pools (about half do: docs/semantics.md §13.3).
Reproduce one: `python -c "from xlgen.tools.check.fuzzgen import generate; print(generate(SEED).source)"`.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from multiprocessing import Pool

# A pool row written by a lanes loop's iteration (fuzzgen's pool_row_store): an inner loop of 2 or 3
# whose store moves an index other than the lanes-form one.
# A tile's shared parts: several (a struct), or a pool read's checked page alone (emit_cpp._tile_sums).
HOISTED_PARTS = re.compile(r"xl_[wac]\.p\d|-> int32_t \{ [^}]*return xl_pool_page")
POOL_ROW = re.compile(r"for \w+ in 0\.\.[23] \{\n(\s+if own\d+\[.*\] == req_id \{\n)?\s+pl\d+\[")
# A tile's preludes (emit_cpp._preludes): the tile's own error record.
PRELUDE = "[[maybe_unused]] XlErr err = {0, 0, 0};"
RAGGED_TILE = re.compile(r"const auto xl_hi = \[&\]\(int32_t xl_ri, int32_t xl_g\)|xl_sum_tile<\w+, xl_R, \d+, true>")


def preludes_per_tile(compiled) -> bool:
    """Whether a loop's tiles (weight-once or of rows) have preludes reading a let the same over the
    tile's rows (grouping.Rows.preludes_per_tile)."""
    from xlgen.backends import grouping
    from xlgen.core import ir

    loops = [s for st in compiled.program.stages for s in ir.statements(st.body) if isinstance(s, ir.Lanes)]
    return any(h is not None and h.preludes_per_tile(s.var)
               for s in loops for h in (grouping.rows_plan(s), grouping.plan(s, 1 << 20)))


def one(seed: int):
    """(seed, None, has pools, ran) when the simulator and the CPU build agree on every launch; else
    (seed, what failed, has pools, ran). ran: False for a program GROUPED=1, ROWS=1, RUNS=1, READS_AHEAD=1,
    PARTS=1, PAGE_ONCE=1, PRELUDES=1, TILE_PRELUDES=1, PROCS=1, POOL_ROWS=1 or COLLECTIVES=1 skips."""
    from xlgen.backends.build import load_text
    from xlgen.runtime import gpu
    from xlgen.tools.check.fuzzgen import generate, run_case

    cache = tempfile.mkdtemp(prefix="xlgen-fuzz-")
    os.environ["XLGEN_CACHE"] = cache  # one compiled program per seed: do not fill the user's cache
    case = generate(seed, schedule_free=os.environ.get("SCHEDULE_FREE") == "1")
    pools = " owned by " in case.source
    if os.environ.get("PROCS") == "1" and "\nproc " not in case.source:
        return seed, None, pools, False
    if os.environ.get("POOL_ROWS") == "1" and not POOL_ROW.search(case.source):
        return seed, None, pools, False
    if os.environ.get("COLLECTIVES") == "1" and "\ncollective " not in case.source:
        return seed, None, pools, False
    try:
        compiled = load_text(case.source, name="fuzz.xl")
        source = gpu.single_source(compiled)
        if os.environ.get("GROUPED") == "1" and "xl_sum_tile<" not in source:
            return seed, None, pools, False
        if os.environ.get("RAGGED") == "1" and not RAGGED_TILE.search(source):
            return seed, None, pools, False
        if os.environ.get("ROWS") == "1" and "xl_sum_rows<" not in source:
            return seed, None, pools, False
        if os.environ.get("RUNS") == "1" and "xl_reduce_pass(xl_lo, xl_hi" not in source:
            return seed, None, pools, False
        if os.environ.get("READS_AHEAD") == "1" and "const auto xl_read0 = " not in source:
            return seed, None, pools, False
        if os.environ.get("PARTS") == "1" and not HOISTED_PARTS.search(source):
            return seed, None, pools, False
        if os.environ.get("PAGE_ONCE") == "1" and "const int32_t xl_page" not in source:
            return seed, None, pools, False
        if os.environ.get("PRELUDES") == "1" and PRELUDE not in source:
            return seed, None, pools, False
        if os.environ.get("TILE_PRELUDES") == "1" and not preludes_per_tile(compiled):
            return seed, None, pools, False
        problems = run_case(case, backends=os.environ.get("BACKENDS", "cpu").split(","), compiled=compiled)
        return seed, ("diverged: " + str(problems[0][2])[:2000]) if problems else None, pools, True
    except Exception:
        return seed, "error: " + traceback.format_exc()[-3000:], pools, True
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    first, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    started, done, ran, with_pools, failures = time.time(), 0, 0, 0, []
    with Pool(int(os.environ.get("JOBS", os.cpu_count() or 1))) as pool:
        for seed, problem, pools, run in pool.imap_unordered(one, range(first, first + count), chunksize=4):
            done += 1
            ran += run
            with_pools += pools and run
            if problem:
                failures.append({"seed": seed, "problem": problem})
            if done % 100 == 0 or done == count:
                with open(out, "w") as f:
                    json.dump({"first": first, "count": count, "done": done, "ran": ran, "with_pools": with_pools,
                               "failures": failures, "seconds": round(time.time() - started, 1)}, f, indent=1)
                print(f"{done} programs, {ran} run, {len(failures)} failing, {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
