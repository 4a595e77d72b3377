"""The bundled pipeline's companion (`companion "xl_spec_tools.py"` in xl_spec.xl): what
speculative decoding with a paged KV cache needs beyond the language, loaded by the tools
through the same mechanism as any pipeline's companion (xlgen/tools/pipeline/companion.py).

- the KV cache's invariants (design.md section 6), checked after every round and after
  the run: `check_pool`, `check_final`, `PoolObserver`, `assert_invariants`;
- the KV cache's residency report, metrics and occupancy plot (`xlgen sim --report kv
  --plot kv=PATH`, also `--kv-report --kv-plot PATH`; docs/kv_cache.md);
- the plain-decoding reference: greedy decoding with the target model alone, what
  speculative decoding must reproduce token for token (`greedy_tokens`);
- the block-size plot of `xlgen demo` (`block_sizes`), and the demo itself (`asbs`): the
  standard demo on a mixed workload.

Usable on its own too: `tools = xlgen.companion.load("stages/xl_spec_tools.py").module`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from xlgen.companion import Unavailable, demo, invariant, metrics, plot, reference, report
from xlgen.semantics.builtins import b_target_token
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR

# Request fields that hold another request's id (prefix grafting): `xlgen run --gpus N` keeps
# linked requests on one GPU and renumbers these values with the requests (xlgen/tools/measure/multigpu.py).
REQUEST_ID_FIELDS = ("graft_source_id",)

FREE, DRAFT, COMMITTED = 0, 1, 2  # enum PageKind (kv_state.xl)
ORPHAN = -2  # const ORPHAN
PINNED_BIT = 1 << 1  # flags ReqFlag { KV_PRESSURE, PINNED, GRAFTED }
MAX_PAGES = 16384  # const MAX_PAGES: capacity of the pool arrays; pool_pages is clamped to it
MAX_OUT = 512  # const MAX_OUT: the capacity of out_tokens


# ==== the scale workloads of the GPU measurements ===========================================

# Request count -> (requests at once, choices of new tokens): scripts/gpu_measure.py,
# kv_scale_check.py, grid_phase2_check.py and profile_kv_rounds.py run these.
SCALE_SIZES = {1000: (1024, [64, 128, 256]), 100_000: (4096, [8, 16])}


def scale_workload(module, count: int, kv_cache: bool = True, max_active: int | None = None,
                   tokens: list[int] | None = None):
    """`count` requests (seed 3) of every profile and three acceptance levels, prompts of 16-128
    tokens, the KV cache on or off with the ample default pool."""
    from xlgen.tools.pipeline.workload import from_dict

    default_active, default_tokens = SCALE_SIZES.get(count, (1024, [64, 128]))
    return from_dict({"seed": 3, "launch": {"max_active": max_active or default_active, "max_rounds": 1_000_000},
                      "params": {"kv_cache": kv_cache},
                      "generate": {"count": count, "fields": {
                          "seed": {"counter": 5}, "prompt_len": {"uniform": [16, 128]},
                          "max_new_tokens": {"choice": tokens or default_tokens},
                          "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
                          "base_acceptance": {"choice": [0.3, 0.6, 0.9]}}}}, module)


# ==== the plain-decoding reference ==========================================================

def greedy_tokens(seed: int, prompt_len: int, max_new_tokens: int, vocab: int, eos_token: int,
                  max_out: int = MAX_OUT) -> list[int]:
    """The tokens plain greedy decoding with the target model commits for one request.

    It shares nothing with the pipeline but the model itself (the simulator's
    `target_token` builtin) and the rules the pipeline states for a request:

    - the answer starts after the prompt's last token, `seed % vocab` (models.xl);
    - the prompt occupies positions 0..prompt_len-1, so the k-th generated token is at
      position prompt_len + k and follows the token before it (decode.xl, verify.xl);
    - the answer holds at most clamp(max_new_tokens, 0, MAX_OUT) tokens, and ends after
      EOS, which is kept (prefill.xl, commit.xl).

        >>> greedy_tokens(seed=3, prompt_len=8, max_new_tokens=5, vocab=50, eos_token=0)
        [39, 27, 35, 9, 37]
    """
    seed &= 0xFFFFFFFF  # a u32 request field
    limit = min(max(max_new_tokens, 0), max_out)
    prev = seed % vocab
    out: list[int] = []
    while len(out) < limit:
        tok = b_target_token(seed, prompt_len + len(out), prev, vocab)
        out.append(tok)
        if tok == eos_token:
            break
        prev = tok
    return out


@reference
def greedy(request, params) -> list[int]:
    """What `output out_tokens[n_out]` must hold: plain greedy decoding of the request."""
    return greedy_tokens(int(request["seed"]), int(request["prompt_len"]), int(request["max_new_tokens"]),
                         int(params["vocab"]), int(params["eos_token"]), max_out=len(request["out_tokens"]))


# ==== the KV cache's invariants =============================================================

class InvariantViolation(AssertionError):
    pass


def _get(obj, name):
    return getattr(obj, name) if not isinstance(obj, (np.void, np.ndarray)) else obj[name]


def pool_size(pool_pages: int) -> int:
    return max(1, min(int(pool_pages), MAX_PAGES))


def check_pool(shared, requests, active, pool_pages: int) -> list[str]:
    """Bookkeeping of the pool against the page tables of the `active` requests, at a round
    boundary (after phase 2): every referenced page is referenced by exactly `page_refs` valid
    table entries and owned by at most one request (its owner, or ORPHAN when only borrowers
    hold it); free pages are exactly the free stack plus the never-used tail; the shared
    counters match; pinned requests' pages and borrowed pages were never evicted."""
    out: list[str] = []
    pool = pool_size(pool_pages)
    fresh = int(_get(shared, "kv_fresh"))
    top = int(_get(shared, "kv_free_top"))
    if not 0 <= fresh <= pool:
        out.append(f"kv_fresh {fresh} outside 0..{pool}")
        fresh = max(0, min(fresh, pool))
    owner_all, kind_all, refs_all = (_get(shared, n) for n in ("page_owner", "page_kind", "page_refs"))
    owner, kind, refs = list(owner_all[:fresh]), list(kind_all[:fresh]), list(refs_all[:fresh])
    gen = _get(shared, "page_gen")
    stack = [int(x) for x in list(_get(shared, "kv_free_stack"))[:top]]
    held = Counter()
    owned_by: dict[int, list[int]] = {}
    for i in active:
        r = requests[i]
        n_held = int(_get(r, "kv_held"))
        borrowed = int(_get(r, "kv_borrowed"))
        pages = _get(r, "kv_pages")
        gens = _get(r, "kv_gens")
        pinned = int(_get(r, "req_flags")) & PINNED_BIT
        for k in range(n_held):
            pg = int(pages[k])
            if pg < 0:
                if k < borrowed:
                    out.append(f"request {i}: borrowed entry {k} lost")
                continue
            if int(gen[pg]) != int(gens[k]):  # evicted since: the owner notices at its next turn
                if k < borrowed:
                    out.append(f"request {i}: borrowed page {pg} (entry {k}) was evicted")
                if pinned:
                    out.append(f"request {i}: pinned page {pg} (entry {k}) was evicted")
                continue
            held[pg] += 1
            if k >= borrowed:
                owned_by.setdefault(pg, []).append(i)
        tail = [int(x) for x in list(pages[n_held:])]
        if any(x != -1 for x in tail):
            k = n_held + next(j for j, x in enumerate(tail) if x != -1)
            out.append(f"request {i}: entry {k} beyond kv_held={n_held} is {pages[k]}")
    live = committed = draft = 0
    for pg in range(fresh):
        o, kd, rc = int(owner[pg]), int(kind[pg]), int(refs[pg])
        if rc != held[pg]:
            out.append(f"page {pg}: refcount {rc}, but {held[pg]} valid table entries")
        owners = owned_by.get(pg, [])
        if len(owners) > 1:
            out.append(f"page {pg}: owned by {owners}")
        if kd == FREE:
            if o != -1 or rc != 0:
                out.append(f"page {pg}: free, but owner {o}, refcount {rc}")
            continue
        live += 1
        committed += kd == COMMITTED
        draft += kd == DRAFT
        if owners and owners[0] != o:
            out.append(f"page {pg}: page_owner {o}, but held as own by request {owners[0]}")
        if not owners and o != ORPHAN:
            out.append(f"page {pg}: owner {o} does not hold it (refcount {rc})")
    # Pages from kv_fresh on were never used: free, unowned, unreferenced (checked in bulk).
    beyond = [pg for pg in held if pg >= fresh]
    if beyond:
        out.append(f"page {beyond[0]}: held by a table entry, but beyond kv_fresh {fresh}")
    if any(int(x) != FREE for x in kind_all[fresh:pool]):
        pg = fresh + next(j for j, x in enumerate(kind_all[fresh:pool]) if int(x) != FREE)
        out.append(f"page {pg}: in use beyond kv_fresh {fresh}")
    elif any(int(x) != -1 for x in owner_all[fresh:pool]) or any(int(x) != 0 for x in refs_all[fresh:pool]):
        out.append(f"a page beyond kv_fresh {fresh} is free, but has an owner or references")
    pages = np.arange(pool)
    orphans = np.asarray(_get(shared, "kv_orphans"), dtype=np.int64) & 0xFFFFFFFF
    marked = np.flatnonzero(orphans[pages >> 5] >> (pages & 31) & 1).tolist()
    orphaned = [pg for pg in range(fresh) if int(kind[pg]) != FREE and int(owner[pg]) == ORPHAN]
    if marked != orphaned:
        out.append(f"kv_orphans marks {len(marked)} pages (first {marked[:3]}), but {len(orphaned)} pages are "
                   f"ORPHAN (first {orphaned[:3]})")
    free_pages = [pg for pg in range(fresh) if int(kind[pg]) == FREE]
    if sorted(stack) != free_pages:
        out.append(f"free stack ({len(stack)} pages, {len(set(stack))} distinct) != free pages below kv_fresh "
                   f"({len(free_pages)})")
    for name, want in (("kv_live", live), ("kv_committed", committed), ("kv_draft", draft)):
        if int(_get(shared, name)) != want:
            out.append(f"{name} = {int(_get(shared, name))}, counted {want}")
    return out


def check_final(result, pool_pages: int) -> list[str]:
    """After a run: nothing leaked (every page free, except pages of requests that stopped
    with a reported error), every request DONE or reported with an error."""
    out: list[str] = []
    recs = result.records
    done = set(recs[recs[:, 2] == KIND_DONE][:, 0].tolist())
    errored = set(recs[recs[:, 2] == KIND_ERROR][:, 0].tolist())
    n = len(result.requests)
    missing = [i for i in range(n) if i not in done and i not in errored]
    if missing:
        out.append(f"requests neither DONE nor reported with an error: {missing[:10]}")
    sh = result.shared[0]
    pool = pool_size(pool_pages)
    owner = sh["page_owner"][:pool]
    kind = sh["page_kind"][:pool]
    leaked = [pg for pg in range(pool) if kind[pg] != FREE and int(owner[pg]) not in errored]
    if leaked:
        out.append(f"{len(leaked)} pages leaked, e.g. page {leaked[0]} (owner {int(owner[leaked[0]])})")
    if not errored:
        if int(sh["kv_live"]) or int(sh["kv_committed"]) or int(sh["kv_draft"]) or int(sh["kv_used_tokens"]):
            out.append(f"counters not zero at the end: live {sh['kv_live']} committed {sh['kv_committed']} "
                       f"draft {sh['kv_draft']} used tokens {sh['kv_used_tokens']}")
        if int(sh["kv_free_top"]) != int(sh["kv_fresh"]):
            out.append(f"free stack holds {sh['kv_free_top']} pages, {sh['kv_fresh']} were used")
        if np.any(sh["page_refs"][:pool] != 0):
            out.append("non-zero refcounts at the end")
        if np.any(sh["kv_orphans"] != 0):
            out.append("kv_orphans marks pages at the end")
        held = result.requests["kv_held"]
        if np.any(held[sorted(done)] != 0) if done else False:
            out.append("a DONE request still holds page-table entries")
    return out


class PoolObserver:
    """A `sim.run` observer that checks `check_pool` after every round."""

    def __init__(self, pool_pages: int, every: int = 1):
        self.pool_pages = pool_pages
        self.every = every
        self.violations: list[str] = []
        self.rounds = 0

    def __call__(self, rnd, reqs, sh, active) -> None:
        self.rounds += 1
        if rnd % self.every == 0 and len(self.violations) < 20:
            self.violations += [f"round {rnd}: {v}" for v in check_pool(sh, reqs, active, self.pool_pages)]


def assert_invariants(result, pool_pages: int, observer: PoolObserver | None = None) -> None:
    problems = (observer.violations if observer else []) + check_final(result, pool_pages)
    if problems:
        raise InvariantViolation("; ".join(problems[:8]))


@invariant
def kv_pool_bookkeeping(state):
    """The pool's bookkeeping is exact after every round (nothing to check with the cache off)."""
    if state.params["kv_cache"]:
        return check_pool(state.shared, state.requests, state.active, state.params["pool_pages"])
    return None


@invariant(at="end")
def kv_nothing_leaked(run):
    """Every request ended, and no page leaked (with the cache off, none was used)."""
    return check_final(run.result, run.params["pool_pages"])


# ==== the KV cache's residency report =======================================================
#
# `trace kv_manage: kv_snap_live, kv_snap_committed, kv_snap_draft, kv_snap_free, kv_snap_used,
# ...` records the pool as the round's kv_manage found it (the highest request id's record of
# a round is taken). From it: residency per round; fragmentation_ratio (the share of allocated
# token slots, live pages x page_tokens, holding no committed token, averaged over the rounds,
# weighted by live pages: partly filled last pages plus draft reservations); kv_hit_rate (decode
# steps that found their pages intact over all that checked them); evictions by cause (draft
# pages for a block, recomputing a missed page, voluntary no-deadlock yields).

SNAP_FIELDS = ("kv_snap_live", "kv_snap_committed", "kv_snap_draft", "kv_snap_free", "kv_snap_used")
REQUEST_FIELDS = ("kv_hits", "kv_misses", "kv_miss_pages", "kv_waits", "kv_oversize")
SHARED_FIELDS = ("kv_evict_decode", "kv_evict_recompute", "kv_yields")
KV_STAGE = "kv_manage"


@dataclass
class Residency:
    rounds: np.ndarray  # round numbers with at least one kv_manage turn
    live: np.ndarray
    committed: np.ndarray
    draft: np.ndarray
    free: np.ndarray
    used_tokens: np.ndarray


def _series(program, result, field):
    from xlgen.tools.pipeline.metrics import trace_series

    return trace_series(program, result, KV_STAGE, field)


def residency(program, result) -> Residency:
    """The pool at each round, as its kv_manage found it (the highest request id's record)."""
    series = {name: _series(program, result, name) for name in SNAP_FIELDS}
    rows: dict[int, tuple[int, list[int]]] = {}  # round -> (request id, values)
    for req, (rounds, _) in series[SNAP_FIELDS[0]].items():
        for j, rnd in enumerate(rounds.tolist()):
            if rnd not in rows or rows[rnd][0] < req:
                rows[rnd] = (req, [int(series[name][req][1][j]) for name in SNAP_FIELDS])
    order = sorted(rows)
    cols = np.array([rows[r][1] for r in order], dtype=np.int64).reshape(len(order), len(SNAP_FIELDS))
    return Residency(np.array(order, dtype=np.int64), *(cols[:, k] for k in range(len(SNAP_FIELDS))))


def fragmentation_ratio(res: Residency, page_tokens: int) -> float:
    slots = int(res.live.sum()) * max(int(page_tokens), 1)
    return 1.0 - float(res.used_tokens.sum()) / slots if slots else 0.0


def kv_hit_rate(result) -> float:
    hits = int(result.requests["kv_hits"].sum())
    misses = int(result.requests["kv_misses"].sum())
    return hits / (hits + misses) if hits + misses else 1.0


def evictions_by_cause(result) -> dict[str, int]:
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


def kv_report(program, result, page_tokens: int = 16) -> KvReport:
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


def kv_settings(params: dict) -> KvSettings:
    """The KV launch parameters of a run, from its parameters by name (xlgen.companion.params_by_name)."""
    return KvSettings(
        kv_cache=bool(params["kv_cache"]),
        page_tokens=max(int(params["page_tokens"]), 1),
        pool_pages=min(max(int(params["pool_pages"]), 1), MAX_PAGES),
        pressure_threshold=float(params["kv_pressure_threshold"]),
        eviction_policy=int(params["eviction_policy"]),
    )


def no_report_reason(program, result) -> str | None:
    """Why there is no residency report for this run (one line), or None when there is."""
    trace = next((t for t in program.traces if t.stage == KV_STAGE), None)
    if trace is None or len(result.records) == 0 or not (result.records[:, 2] == trace.index).any():
        return "no kv_manage trace records in this run: the KV cache was off, or no request ran"
    return None


def kv_metrics(program, result, page_tokens: int = 16) -> dict:
    """The report as flat benchmark metrics; {} when the run has no KV cache activity."""
    if no_report_reason(program, result) is not None:
        return {}
    r = kv_report(program, result, page_tokens)
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
    """The pool at the end of each round: committed, draft and free pages stacked (they add up
    to pool_pages), and a line at the pressure threshold, `threshold` (the kv_pressure_threshold
    fraction) x pool_pages. Writes a PNG (matplotlib, Agg backend)."""
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


def kv_available(program, params) -> str | None:
    """Checked before a run asked for the KV report or plot: the cache must be on."""
    if not params["kv_cache"]:
        return "the KV cache is off in this run (launch param kv_cache is false; --param kv_cache=true turns it on)"
    return None


def _run_report(run) -> tuple[KvSettings, KvReport]:
    why = no_report_reason(run.program, run.result)
    if why is not None:
        raise Unavailable(why)
    kv = kv_settings(run.params)
    return kv, kv_report(run.program, run.result, kv.page_tokens)


@report("kv", check=kv_available)
def kv_text(run) -> str:
    """The residency report: hit rate, fragmentation, misses, waits, evictions by cause."""
    kv, r = _run_report(run)
    policy = {0: "LRU", 1: "priority-aware"}.get(kv.eviction_policy, str(kv.eviction_policy))
    ev = r.evictions
    return "\n".join([
        f"KV cache: pool of {kv.pool_pages} pages x {kv.page_tokens} tokens, pressure above "
        f"{kv.threshold_pages:.1f} live pages, eviction {policy}",
        f"  {format_report(r)}",
        f"  evictions by cause: decode {ev['decode']} (draft pages for a block), recompute {ev['recompute']} "
        f"(missed pages got back), yield {ev['yield']} (no-deadlock yields)",
    ])


@plot("kv", check=kv_available)
def kv_plot(run, path) -> None:
    """The pool's occupancy per round: committed, draft and free pages, and the pressure threshold."""
    kv, r = _run_report(run)
    title = (f"KV occupancy, {run.workload}: kv_hit_rate {r.kv_hit_rate:.3f}, "
             f"fragmentation_ratio {r.fragmentation_ratio:.3f}")
    plot_occupancy(residency(run.program, run.result), kv.pool_pages, kv.pressure_threshold, path, title=title)


@metrics
def kv_cache(run) -> dict:
    """kv_hit_rate, fragmentation_ratio, kv_misses, kv_waits, evictions by cause, peak_live_pages."""
    return kv_metrics(run.program, run.result, kv_settings(run.params).page_tokens)


# ==== xlgen demo's plot: block sizes chosen by ASBS =========================================

PROFILE_COLORS = {"CONSTANT": "#1f77b4", "STRUCTURED": "#d62728", "BURSTY": "#2ca02c"}


def block_size_trajectories(run, req_ids) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{request: (answer progress 0..1 at each speculation step, block size chosen there)}."""
    blocks = run.series("spec_verify", "current_block_size")
    commits = run.series("commit", "n_out")
    out = {}
    for i in req_ids:
        if i not in blocks:
            continue
        rounds, b = blocks[i]
        c_rounds, n_out = commits.get(i, (np.zeros(0, np.int64), np.zeros(0, np.int32)))
        # Tokens committed before each step: the last commit of an earlier round.
        before = np.searchsorted(c_rounds, rounds, side="left") - 1
        done = np.where(before >= 0, n_out[np.clip(before, 0, None)] if len(n_out) else 0, 0)
        limit = max(int(run.requests["token_limit"][i]), 1)
        out[i] = (done / limit, b)
    return out


def _spread_by_acceptance(ids, base, k):
    """Up to k requests whose base acceptance rates are spread over the range."""
    ordered = sorted(ids, key=lambda i: float(base[i]))
    if len(ordered) <= k:
        return ordered
    picks = np.linspace(0, len(ordered) - 1, k).round().astype(int)
    return [ordered[p] for p in picks]


@plot("block_sizes")
def block_sizes(run, path) -> None:
    """Block size chosen at each speculation step against answer progress, one panel per
    acceptance profile (the longer half of the answers, four requests spread by agreement)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = run.program.field("profile").type.members
    reqs = run.requests
    if len(reqs) == 0:
        raise Unavailable("no requests ran")
    longest = reqs["token_limit"] >= np.quantile(reqs["token_limit"], 0.5)
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 4), sharey=True)
    for ax, (value, name) in zip(np.atleast_1d(axes), enumerate(profiles)):
        ids = [int(i) for i in np.nonzero((reqs["profile"] == value) & longest)[0]]
        chosen = _spread_by_acceptance(ids, reqs["base_acceptance"], 4)
        for k, (i, (x, b)) in enumerate(block_size_trajectories(run, chosen).items()):
            alpha = float(reqs["base_acceptance"][i])
            offset = 0.12 * (k - 1.5)  # a small vertical offset keeps overlapping lines apart
            ax.step(x, b + offset, where="post", lw=1.4, label=f"req {i}: agreement {alpha:.2f}",
                    color=plt.cm.plasma(0.85 * alpha))
        ax.set_title(name.lower())
        ax.set_xlabel("answer progress (tokens committed / limit)")
        ax.set_xlim(0, 1)
        ax.set_yticks([1, 2, 4, 8])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    np.atleast_1d(axes)[0].set_ylabel("block size B chosen by ASBS")
    fig.suptitle("Adaptive speculative block sizes per request, by acceptance profile (simulator trace; "
                 "lines offset slightly)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@demo
def asbs(ctx, workload: str = "mixed") -> bool:
    """`xlgen demo`: the pipeline end to end on `workload`: simulated, the CPU build (and the GPU)
    diff-tested against the simulator, the metrics by acceptance profile, every plot above."""
    return ctx.standard(workload)
