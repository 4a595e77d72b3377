"""Phase 2's cycle counters (GPU, a measurement): a kernel built with -DXL_PROFILE_PHASE2 has thread 0
of block 0 add the clock cycles between phase 2's marks into `xl_prof[stage * 32 + part]`
(xl_runtime.cuh; a collective stage's part 0 its guards, odd parts its segments, even parts its
groups of collectives, 30 its settling, 31 its trace records). scripts/profile_kv_rounds.py and
scripts/real_phase2.py read them with these."""

from __future__ import annotations

COUNTERS = 1024  # xl_prof's length in xl_runtime.cuh (XL_PROF_MARK keeps a mark below it)
PARTS = {0: "guards", 30: "settle", 31: "traces"}


def counters(module):
    """The module's counters, a CuPy view of `xl_prof` (uint64, COUNTERS of them)."""
    import cupy

    memory = cupy.cuda.UnownedMemory(module.get_global_var("xl_prof"), COUNTERS * 8, None)
    return cupy.ndarray((COUNTERS,), dtype=cupy.uint64, memptr=cupy.cuda.MemoryPointer(memory, 0))


def mark_name(mark: int, stage_names: dict[int, str]) -> str:
    """`stage.part` of counter `mark`: guards, segment k, collectives k (a group: ir.collective_groups),
    settle or traces."""
    stage, part = divmod(int(mark), 32)
    what = PARTS.get(part) or (f"segment {(part - 1) // 2}" if part % 2 else f"collectives {(part - 2) // 2}")
    return f"{stage_names.get(stage, stage)}.{what}"


def per_round(counts, stage_names: dict[int, str], rounds: int) -> list[tuple[str, float]]:
    """(mark_name, cycles per round) of every counter that counted, in mark order."""
    return [(mark_name(mark, stage_names), int(c) / max(rounds, 1)) for mark, c in enumerate(counts) if c]
