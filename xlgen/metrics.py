"""Metrics computed from traces: per-request series of a traced field, and the
bundled pipeline's speculation summary (acceptance, block sizes) by profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ir
from .runtime.sim import REC_HEADER, RunResult


def _word_offset(program: ir.Program, trace: ir.Trace, name: str) -> tuple[int, ir.Type]:
    offset = 0
    for f in trace.fields:
        decl = program.field(f)
        if f == name:
            return offset, decl.type
        offset += decl.type.length if isinstance(decl.type, ir.ArrayType) else 1
    raise KeyError(f"field '{name}' is not traced at stage '{trace.stage}'")


def decode_words(words: np.ndarray, t: ir.Type) -> np.ndarray:
    words = np.asarray(words, dtype=np.uint32)
    kind = ir.storage_word(t)
    if kind == "f":
        return words.view(np.float32)
    if kind == "i":
        return words.view(np.int32)
    return words


def trace_series(program: ir.Program, result: RunResult, stage: str, field: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{request id: (rounds, values)} of `field` each time `stage` ran (its trace)."""
    trace = next((t for t in program.traces if t.stage == stage), None)
    if trace is None:
        raise KeyError(f"stage '{stage}' is not traced")
    offset, t = _word_offset(program, trace, field)
    rows = result.records[result.records[:, 2] == trace.index]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if len(rows) == 0:
        return out
    values = decode_words(rows[:, REC_HEADER + offset], t)
    ids = rows[:, 0].astype(np.int64)
    for req in np.unique(ids):
        mask = ids == req
        out[int(req)] = (rows[mask, 1].astype(np.int64), values[mask])
    return out


@dataclass
class ProfileRow:
    profile: str
    requests: int
    tokens: int
    proposed: int
    accepted: int
    steps: int
    mean_block: float
    var_block: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def speculation_summary(program: ir.Program, result: RunResult) -> list[ProfileRow]:
    """The bundled pipeline's per-profile summary (needs its fields and traces)."""
    profile_type = program.field("profile").type
    blocks = trace_series(program, result, "spec_verify", "current_block_size")
    reqs = result.requests
    rows = []
    for value, name in enumerate(profile_type.members):
        ids = np.nonzero(reqs["profile"] == value)[0]
        if len(ids) == 0:
            continue
        history = np.concatenate([blocks[i][1] for i in ids if i in blocks] or [np.zeros(0)])
        rows.append(ProfileRow(
            profile=name,
            requests=len(ids),
            tokens=int(reqs["n_out"][ids].sum()),
            proposed=int(reqs["total_proposed"][ids].sum()),
            accepted=int(reqs["total_accepted"][ids].sum()),
            steps=int(reqs["iterations"][ids].sum()),
            mean_block=float(history.mean()) if len(history) else 0.0,
            var_block=float(history.var()) if len(history) else 0.0,
        ))
    return rows


def format_summary(rows: list[ProfileRow]) -> str:
    header = f"{'profile':<11} {'requests':>8} {'tokens':>8} {'accept':>7} {'mean acc len':>12} {'mean B':>7} {'var B':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r.profile:<11} {r.requests:>8} {r.tokens:>8} {r.acceptance_rate:>7.3f} "
                     f"{r.mean_accepted_length:>12.2f} {r.mean_block:>7.2f} {r.var_block:>7.2f}")
    return "\n".join(lines)


def block_size_trajectories(program: ir.Program, result: RunResult, req_ids) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{request: (answer progress 0..1 at each speculation step, block size chosen there)}."""
    blocks = trace_series(program, result, "spec_verify", "current_block_size")
    commits = trace_series(program, result, "commit", "n_out")
    out = {}
    for i in req_ids:
        if i not in blocks:
            continue
        rounds, b = blocks[i]
        c_rounds, n_out = commits.get(i, (np.zeros(0, np.int64), np.zeros(0, np.int32)))
        # Tokens committed before each step: the last commit of an earlier round.
        before = np.searchsorted(c_rounds, rounds, side="left") - 1
        done = np.where(before >= 0, n_out[np.clip(before, 0, None)] if len(n_out) else 0, 0)
        limit = max(int(result.requests["token_limit"][i]), 1)
        out[i] = (done / limit, b)
    return out


# ---- what a run's records say about the run as a whole --------------------------------

@dataclass
class RunCounts:
    """One count per kind of record and of outcome (a record is a trace, done or error record)."""
    requests: int
    trace_records: int
    done_records: int
    error_records: int
    runtime_errors: int  # requests stopped by a runtime error (in a stage or in `done when`)
    watchdog: int  # requests stopped by the max_iterations watchdog (max_rounds)

    @property
    def done(self) -> int:
        return self.done_records

    @property
    def failed(self) -> int:
        return self.runtime_errors + self.watchdog

    @property
    def unfinished(self) -> int:
        """Requests with neither a done nor an error record (a backend that stopped early)."""
        return self.requests - self.done - self.failed


def run_counts(result: RunResult) -> RunCounts:
    from .runtime.ops import ERR_WATCHDOG
    from .runtime.sim import KIND_DONE, KIND_ERROR

    table = result.record_table
    errors = table[table["kind"] == KIND_ERROR]
    watchdog = int((errors["words"][:, 0] == ERR_WATCHDOG).sum()) if len(errors) else 0
    done = int((table["kind"] == KIND_DONE).sum())
    return RunCounts(requests=len(result.requests), trace_records=len(table) - done - len(errors),
                     done_records=done, error_records=len(errors), runtime_errors=len(errors) - watchdog,
                     watchdog=watchdog)


@dataclass
class SlotUtilisation:
    busy: int  # request-rounds: rounds in which a request held a slot of the batch
    capacity: int  # max_active: slots of the batch
    rounds: int

    @property
    def fraction(self) -> float:
        total = self.capacity * self.rounds
        return self.busy / total if total else 0.0

    def __str__(self) -> str:
        return (f"slot utilisation {100 * self.fraction:.1f}% ({self.busy} busy request-rounds of "
                f"{self.capacity} slots x {self.rounds} rounds)")


def slot_utilisation(result: RunResult, max_active: int) -> SlotUtilisation:
    """Busy request-rounds over capacity x rounds, for the deterministic round model
    (docs/semantics.md): requests are admitted in id order into free slots at the start
    of a round, hold their slot through the round in which they finish (done or a runtime
    error), and a slot freed in round r is taken in round r + 1. The watchdog's error
    records carry the round after the last one run, in which no request was busy.
    Reconstructed from the records, so it holds for every deterministic backend."""
    from .runtime.ops import ERR_WATCHDOG
    from .runtime.sim import KIND_DONE, KIND_ERROR

    n, rounds = len(result.requests), int(result.rounds)
    table = result.record_table
    watchdog = (table["kind"] == KIND_ERROR) & (table["words"][:, 0] == ERR_WATCHDOG)
    ended = np.isin(table["kind"], [KIND_DONE, KIND_ERROR]) & ~watchdog
    end = np.full(n, rounds - 1, dtype=np.int64)  # unfinished (watchdog): busy through the last round run
    end[table["req_id"][ended]] = table["round"][ended]
    finished = np.zeros(n, dtype=bool)
    finished[table["req_id"][ended]] = True
    # Request i is admitted at the start of the first round r with i < max_active + (requests
    # finished by the end of round r - 1); finishes in a round are counted with np.bincount.
    freed = np.bincount(end[finished] + 1, minlength=rounds + 1)[: rounds + 1] if rounds else np.zeros(1, np.int64)
    slots_by_round = max_active + np.cumsum(freed)  # slots ever opened by the start of each round
    admitted_at = np.searchsorted(slots_by_round, np.arange(n), side="right")
    busy = np.clip(end - admitted_at + 1, 0, None)
    return SlotUtilisation(int(busy.sum()), int(max_active), rounds)
