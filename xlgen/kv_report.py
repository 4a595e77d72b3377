"""The KV cache's residency report (stages/kv.xl), computed from a run's traces and state.

`trace kv_manage: kv_snap_live, kv_snap_committed, kv_snap_draft, kv_snap_free,
kv_snap_used, ...` records the pool after each request's kv_manage turn; the last
turn of a round (the highest request id that ran it) is the pool at the end of
that round. From it:

- `residency(program, result)`: per round, live / committed / draft / free pages
  and the tokens stored in them;
- `fragmentation_ratio(...)`: the share of allocated token slots (live pages x
  page_tokens) holding no committed token, averaged over the rounds (weighted by
  live pages): partly filled last pages plus draft reservations;
- `kv_hit_rate(result)`: decode steps that found their pages intact over all
  steps that checked them (`kv_hits / (kv_hits + kv_misses)`, summed over requests);
- `evictions_by_cause(result)`: evictions to grant draft pages for a block, to
  recompute a missed page, and voluntary yields (no-deadlock rule). A prompt never
  evicts: admission waits for free pages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ir
from .metrics import trace_series
from .runtime.sim import RunResult

SNAP_FIELDS = ("kv_snap_live", "kv_snap_committed", "kv_snap_draft", "kv_snap_free", "kv_snap_used")


@dataclass
class Residency:
    rounds: np.ndarray  # round numbers with at least one kv_manage turn
    live: np.ndarray
    committed: np.ndarray
    draft: np.ndarray
    free: np.ndarray
    used_tokens: np.ndarray


def residency(program: ir.Program, result: RunResult) -> Residency:
    """The pool at the end of each round (the last kv_manage turn of the round)."""
    series = {name: trace_series(program, result, "kv_manage", name) for name in SNAP_FIELDS}
    rows: dict[int, tuple[int, list[int]]] = {}  # round -> (request id, values)
    first = series[SNAP_FIELDS[0]]
    for req, (rounds, _) in first.items():
        for j, rnd in enumerate(rounds.tolist()):
            if rnd not in rows or rows[rnd][0] < req:
                rows[rnd] = (req, [int(series[name][req][1][j]) for name in SNAP_FIELDS])
    order = sorted(rows)
    cols = np.array([rows[r][1] for r in order], dtype=np.int64).reshape(len(order), len(SNAP_FIELDS))
    return Residency(np.array(order, dtype=np.int64), *(cols[:, k] for k in range(len(SNAP_FIELDS))))


def fragmentation_ratio(res: Residency, page_tokens: int) -> float:
    slots = int(res.live.sum()) * max(int(page_tokens), 1)
    return 1.0 - float(res.used_tokens.sum()) / slots if slots else 0.0


def kv_hit_rate(result: RunResult) -> float:
    hits = int(result.requests["kv_hits"].sum())
    misses = int(result.requests["kv_misses"].sum())
    return hits / (hits + misses) if hits + misses else 1.0


def evictions_by_cause(result: RunResult) -> dict[str, int]:
    sh = result.shared[0]
    return {"decode": int(sh["kv_evict_decode"]),
            "recompute": int(sh["kv_evict_recompute"]), "yield": int(sh["kv_yields"])}


@dataclass
class KvReport:
    rounds: int
    peak_live: int
    mean_live: float
    fragmentation_ratio: float
    kv_hit_rate: float
    misses: int
    miss_pages: int
    waits: int
    evictions: dict[str, int]
    oversize: int


def report(program: ir.Program, result: RunResult, page_tokens: int = 16) -> KvReport:
    res = residency(program, result)
    reqs = result.requests
    return KvReport(
        rounds=len(res.rounds),
        peak_live=int(res.live.max()) if len(res.live) else 0,
        mean_live=float(res.live.mean()) if len(res.live) else 0.0,
        fragmentation_ratio=fragmentation_ratio(res, page_tokens),
        kv_hit_rate=kv_hit_rate(result),
        misses=int(reqs["kv_misses"].sum()),
        miss_pages=int(reqs["kv_miss_pages"].sum()),
        waits=int(reqs["kv_waits"].sum()),
        evictions=evictions_by_cause(result),
        oversize=int(reqs["kv_oversize"].sum()),
    )


def format_report(r: KvReport) -> str:
    ev = ", ".join(f"{k} {v}" for k, v in r.evictions.items())
    return (f"rounds {r.rounds}  peak live {r.peak_live}  mean live {r.mean_live:.1f}  "
            f"fragmentation {r.fragmentation_ratio:.3f}  kv_hit_rate {r.kv_hit_rate:.3f}  "
            f"misses {r.misses} ({r.miss_pages} pages)  waits {r.waits}  evictions: {ev}  oversize {r.oversize}")
