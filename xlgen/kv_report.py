"""The KV cache's residency report (stages/kv.xl), computed from a run's traces and state.

`trace kv_manage: kv_snap_live, kv_snap_committed, kv_snap_draft, kv_snap_free,
kv_snap_used, ...` records the pool as the round's kv_manage found it (the
highest request id's record of a round is taken). From it:

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
    """The pool at each round, as its kv_manage found it (the highest request id's record)."""
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


# ---- the report of one run: availability, launch settings, metrics, occupancy plot ----

# Request and shared fields the report reads besides the kv_manage trace.
REQUEST_FIELDS = ("kv_hits", "kv_misses", "kv_miss_pages", "kv_waits", "kv_oversize")
SHARED_FIELDS = ("kv_evict_decode", "kv_evict_recompute", "kv_yields")
MAX_PAGES = 16384  # stages/kv_state.xl: capacity of the pool arrays; pool_pages is clamped to it


@dataclass
class KvSettings:
    """The KV cache's launch parameters as a run used them, as the arbiter reads them."""
    kv_cache: bool
    page_tokens: int  # at least 1
    pool_pages: int  # clamped to 1..MAX_PAGES
    pressure_threshold: float  # kv_pressure_threshold: a fraction of the pool
    eviction_policy: int  # 0 LRU, 1 priority-aware

    @property
    def threshold_pages(self) -> float:
        """KV_PRESSURE is set while live pages exceed this many (binary32, as kv_manage computes it)."""
        return float(np.float32(self.pressure_threshold) * np.float32(self.pool_pages))


def kv_settings(module, params=None) -> KvSettings:
    """The KV launch parameters of a run: `params` is a dict of overrides (a workload's
    `params`) or the simulator module's `Params`; the rest keep their declared defaults
    (stages/kv_state.xl's defaults where the pipeline does not declare them)."""
    from .names import py
    from .runtime.sim import make_params

    p = params if isinstance(params, module.Params) else make_params(module, params)

    def get(name, default):
        return getattr(p, py(name)) if name in module.Params.TYPES else default

    return KvSettings(
        kv_cache=bool(get("kv_cache", False)),
        page_tokens=max(int(get("page_tokens", 16)), 1),
        pool_pages=min(max(int(get("pool_pages", MAX_PAGES)), 1), MAX_PAGES),
        pressure_threshold=float(get("kv_pressure_threshold", 0.85)),
        eviction_policy=int(get("eviction_policy", 0)),
    )


def no_report_reason(program: ir.Program, result: RunResult) -> str | None:
    """Why there is no residency report for this run (one line), or None when there is."""
    trace = next((t for t in program.traces if t.stage == "kv_manage"), None)
    if trace is None:
        return f"pipeline {program.name} has no traced kv_manage stage: there is no KV cache to report on"
    missing = [f for f in SNAP_FIELDS if f not in trace.fields]
    missing += [f for f in REQUEST_FIELDS if f not in (result.requests.dtype.names or ())]
    missing += [f for f in SHARED_FIELDS if f not in (result.shared.dtype.names or ())]
    if missing:
        return (f"pipeline {program.name}'s kv_manage is not the bundled KV cache's "
                f"(the report reads {', '.join(missing)}; see stages/kv.xl)")
    if len(result.records) == 0 or not (result.records[:, 2] == trace.index).any():
        return "no kv_manage trace records in this run: the KV cache was off, or no request ran"
    return None


def kv_metrics(program: ir.Program, result: RunResult, page_tokens: int = 16) -> dict:
    """The report as flat benchmark metrics; {} when the run has no KV cache activity."""
    if no_report_reason(program, result) is not None:
        return {}
    r = report(program, result, page_tokens)
    return {
        "kv_hit_rate": r.kv_hit_rate,
        "fragmentation_ratio": r.fragmentation_ratio,
        "kv_misses": r.misses,
        "kv_waits": r.waits,
        **{f"evictions_{cause}": n for cause, n in r.evictions.items()},
        "peak_live_pages": r.peak_live,
    }


COLORS = {"committed": "#1f77b4", "draft": "#ff7f0e", "free": "#e0e0e0", "threshold": "#d62728"}


def plot_occupancy(res: Residency, pool_pages: int, threshold: float, path, title: str | None = None) -> None:
    """The pool at the end of each round: committed, draft and free pages stacked (they
    add up to pool_pages), and a line at the pressure threshold, `threshold` (the
    kv_pressure_threshold fraction) x pool_pages. Writes a PNG (matplotlib, Agg backend);
    raises ImportError when matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    ax.stackplot(res.rounds, res.committed, res.draft, res.free, step="post",
                 labels=["committed pages", "draft pages", "free pages"],
                 colors=[COLORS["committed"], COLORS["draft"], COLORS["free"]])
    limit = float(np.float32(threshold) * np.float32(pool_pages))
    ax.axhline(limit, color=COLORS["threshold"], ls="--", lw=1.2,
               label=f"pressure threshold {threshold:.2f} x {pool_pages} = {limit:.1f} pages")
    ax.set_xlim(int(res.rounds[0]) if len(res.rounds) else 0, int(res.rounds[-1]) if len(res.rounds) > 1 else 1)
    ax.set_ylim(0, pool_pages * 1.04)
    ax.set_xlabel("round")
    ax.set_ylabel("pages (pool as the round's KV stage found it)")
    ax.set_title(title or "KV cache occupancy")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
