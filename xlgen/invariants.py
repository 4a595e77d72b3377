"""Invariants of the bundled pipeline's paged KV cache (stages/kv.xl), design.md section 6.

Two checks:

- `check_pool(shared, requests, active)`: the pool's bookkeeping is exact at a
  round boundary (after the arbiters): every referenced page is referenced by
  exactly `page_refs` valid table entries, owned by at most one request (its
  owner, or ORPHAN when only borrowers hold it), free pages are exactly the free
  stack plus the never-used tail, the shared counters match, and pinned
  requests' pages and borrowed pages were never evicted (their table entries
  are still valid). Use it as a simulator observer: `sim.run(..., observer=
  PoolObserver(module, pool_pages))` checks it after every round.
- `check_final(result, pool_pages)`: after a run, no page is leaked (every page
  is free, except pages of requests that stopped with a reported error), and
  every request is DONE or reported with an error.

Each returns a list of violations (empty when all hold); `assert_invariants`
raises with the first few.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .runtime.sim import KIND_DONE, KIND_ERROR, RunResult

FREE, DRAFT, COMMITTED = 0, 1, 2  # enum PageKind
ORPHAN = -2
PINNED_BIT = 1 << 1  # flags ReqFlag { KV_PRESSURE, PINNED, GRAFTED }
MAX_PAGES = 16384


class InvariantViolation(AssertionError):
    pass


def _get(obj, name):
    return getattr(obj, name) if not isinstance(obj, (np.void, np.ndarray)) else obj[name]


def pool_size(pool_pages: int) -> int:
    return max(1, min(int(pool_pages), MAX_PAGES))


def check_pool(shared, requests, active, pool_pages: int) -> list[str]:
    """Bookkeeping of the pool against the page tables of the `active` requests."""
    out: list[str] = []
    pool = pool_size(pool_pages)
    owner = list(_get(shared, "page_owner"))
    kind = list(_get(shared, "page_kind"))
    refs = list(_get(shared, "page_refs"))
    gen = list(_get(shared, "page_gen"))
    fresh = int(_get(shared, "kv_fresh"))
    top = int(_get(shared, "kv_free_top"))
    stack = [int(x) for x in list(_get(shared, "kv_free_stack"))[:top]]
    if not 0 <= fresh <= pool:
        out.append(f"kv_fresh {fresh} outside 0..{pool}")
    held = Counter()
    owned_by: dict[int, list[int]] = {}
    for i in active:
        r = requests[i]
        n_held = int(_get(r, "kv_held"))
        borrowed = int(_get(r, "kv_borrowed"))
        pages = list(_get(r, "kv_pages"))
        gens = list(_get(r, "kv_gens"))
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
        for k in range(n_held, len(pages)):
            if int(pages[k]) != -1:
                out.append(f"request {i}: entry {k} beyond kv_held={n_held} is {pages[k]}")
                break
    live = committed = draft = 0
    for pg in range(pool):
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
        if pg >= fresh:
            out.append(f"page {pg}: in use beyond kv_fresh {fresh}")
    free_pages = [pg for pg in range(fresh) if int(kind[pg]) == FREE]
    if sorted(stack) != free_pages:
        out.append(f"free stack ({len(stack)} pages, {len(set(stack))} distinct) != free pages below kv_fresh "
                   f"({len(free_pages)})")
    for name, want in (("kv_live", live), ("kv_committed", committed), ("kv_draft", draft)):
        if int(_get(shared, name)) != want:
            out.append(f"{name} = {int(_get(shared, name))}, counted {want}")
    return out


def check_final(result: RunResult, pool_pages: int) -> list[str]:
    """After a run: nothing leaked, every request DONE or reported with an error."""
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


def assert_invariants(result: RunResult, pool_pages: int, observer: PoolObserver | None = None) -> None:
    problems = (observer.violations if observer else []) + check_final(result, pool_pages)
    if problems:
        raise InvariantViolation("; ".join(problems[:8]))
