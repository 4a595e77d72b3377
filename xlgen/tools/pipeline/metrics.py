"""Metrics computed from a run's records and final state, for any pipeline: per-request
series of a traced field, the metrics a pipeline declares (`metric`), its output count
(`output`), trace-based timing (latency, and TTFT / inter-token latency with `progress`),
and counts of records and outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core import ir
from ...runtime.sim import REC_HEADER, RunResult


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


# ---- what the pipeline declares (docs/language.md, "Declarations for the tools") ---------

def finished_requests(result: RunResult) -> list[int]:
    """Ids of the requests with a done record (not stopped by an error or the watchdog)."""
    from ...runtime.sim import KIND_DONE

    table = result.record_table
    return sorted(set(table["req_id"][table["kind"] == KIND_DONE].tolist()))


def output_count(program: ir.Program, result: RunResult) -> int | None:
    """The `output` declaration's count summed over the requests (tokens, for a decoder); None
    when the pipeline declares no output."""
    out = program.tooling.output
    if out is None:
        return None
    if len(result.requests) == 0:
        return 0
    length = result.requests.dtype[out.field].shape[0]
    return int(np.clip(result.requests[out.count].astype(np.int64), 0, length).sum())


def _aggregate(agg: str, values: np.ndarray):
    if agg == "sum":
        return int(values.sum()) if values.dtype.kind in "iub" else float(values.astype(np.float64).sum())
    if len(values) == 0:
        return None  # no value: a mean, min, max or variance of nothing
    if agg == "mean":
        return float(values.astype(np.float64).mean())
    if agg == "var":
        return float(values.astype(np.float64).var())
    pick = values.min() if agg == "min" else values.max()
    return float(pick) if values.dtype.kind == "f" else int(pick)


def _term_values(program: ir.Program, result: RunResult, term: ir.MetricTerm, ids: np.ndarray | None):
    if term.shared:
        return np.asarray(result.shared[term.field]).reshape(-1)[:1]
    if term.stage is None:
        column = result.requests[term.field]
        return column if ids is None else column[ids]
    trace = next(t for t in program.traces if t.stage == term.stage)
    offset, t = _word_offset(program, trace, term.field)
    rows = result.records[result.records[:, 2] == trace.index] if len(result.records) else result.records
    if ids is not None:
        rows = rows[np.isin(rows[:, 0], ids)]
    return decode_words(rows[:, REC_HEADER + offset], t) if len(rows) else np.zeros(0)


def metric_value(program: ir.Program, result: RunResult, metric: ir.Metric, ids: np.ndarray | None = None):
    """One declared metric over the requests `ids` (all when None): a number, or None when it
    has no value (a mean of nothing, a ratio over 0)."""
    values = [_aggregate(t.agg, _term_values(program, result, t, ids)) for t in metric.terms]
    if len(values) == 1:
        return values[0]
    num, den = values
    if num is None or den is None or den == 0:
        return None
    return float(num) / float(den)


def declared_metrics(program: ir.Program, result: RunResult) -> dict:
    """Every `metric` of the pipeline: {name: value}, and for `metric NAME[GROUP]` also
    {NAME[MEMBER]: value} for each member of GROUP's enum that some request has."""
    out: dict = {}
    for m in program.tooling.metrics:
        out[m.name] = metric_value(program, result, m)
        for member, ids in _groups(program, result, m.group):
            out[f"{m.name}[{member}]"] = metric_value(program, result, m, ids)
    return out


def _groups(program: ir.Program, result: RunResult, group: str | None):
    if group is None:
        return []
    members = program.field(group).type.members
    column = result.requests[group]
    return [(name, ids) for value, name in enumerate(members) if len(ids := np.nonzero(column == value)[0])]


def metric_groups(program: ir.Program, result: RunResult) -> dict[str, list[tuple[str, int]]]:
    """{group field: [(member, requests with it)]} for the fields the metrics are grouped by."""
    out = {}
    for m in program.tooling.metrics:
        if m.group is not None and m.group not in out:
            out[m.group] = [(name, len(ids)) for name, ids in _groups(program, result, m.group)]
    return out


def format_metrics(program: ir.Program, values: dict) -> str:
    """Metrics as lines of `name value`; a grouped metric's members as a table per group field."""
    def show(v) -> str:
        if v is None:
            return "n/a"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    grouped = {m.name: m.group for m in program.tooling.metrics if m.group is not None}
    plain = {k: v for k, v in values.items() if "[" not in k}
    width = max((len(k) for k in plain), default=0)
    lines = [f"  {k:<{width}}  {show(v)}" for k, v in plain.items()]
    for group in dict.fromkeys(grouped.values()):
        names = [n for n, g in grouped.items() if g == group]
        members = [k.split("[", 1)[1][:-1] for k in values if k.startswith(f"{names[0]}[")]
        if not members:
            continue
        cols = [max(len(n), 8) for n in names]
        head = max(len(group), *(len(m) for m in members))
        lines.append(f"  by {group}:")
        lines.append(f"    {'':<{head}}  " + "  ".join(f"{n:>{c}}" for n, c in zip(names, cols)))
        for member in members:
            cells = "  ".join(f"{show(values.get(f'{n}[{member}]')):>{c}}" for n, c in zip(names, cols))
            lines.append(f"    {member:<{head}}  {cells}")
    return "\n".join(lines)


def collect_metrics(program: ir.Program, result: RunResult, max_active: int, run=None, stamps=None) -> dict:
    """Everything a run's metrics say, for any pipeline: output elements (with `output`), the
    declared metrics, trace-based timing, and the companion's @metrics (given `run`, an
    xlgen.companion.Run)."""
    out: dict = {}
    count = output_count(program, result)
    if count is not None:
        out["output_elements"] = count
    out.update(declared_metrics(program, result))
    if "fast" not in result.backend and "interleaved" not in result.backend:  # rounds of the whole batch
        out.update(timing_metrics(program, result, max_active, stamps))
    if run is not None:
        from .companion import of_program

        companion = of_program(program)
        for hook in companion.of("metrics") if companion else ():
            out.update(companion.call(hook, run) or {})
    return out


def _admitted_and_ended(result: RunResult, max_active: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request, in the deterministic round model: the round it was admitted in, the round
    it ended in (done or an error; the last round run when unfinished) and whether it ended."""
    from ...semantics.ops import ERR_WATCHDOG
    from ...runtime.sim import KIND_DONE, KIND_ERROR

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
    return admitted_at, end, finished


def _percentiles(prefix: str, values, qs=(50, 95, 99)) -> dict:
    if len(values) == 0:
        return {}
    return {f"{prefix}_p{q}": float(np.percentile(values, q)) for q in qs}


def timing_metrics(program: ir.Program, result: RunResult, max_active: int, stamps=None) -> dict:
    """Trace-based timing, in rounds (every pipeline), and in microseconds when `stamps`
    (the GPU's round_end_ns: stamps[k] is when round k - 1 ended, from the launch) are given:

    every time is counted from the launch, when every request of a workload arrives (a request
    that waits for a slot of the batch waits on the clock):

    - latency: to the end of the round the request finished in (done or an error);
    - with `output` and `progress` declared, ttft (to the end of the round of the first
      progress record that raised the output count) and itl (inter-token: the time between
      two such records, shared by the elements the later one added)."""
    out: dict = {}
    if len(result.requests) == 0 or result.rounds == 0:
        return out
    _admitted, end, finished = _admitted_and_ended(result, max_active)
    out.update(_percentiles("latency_rounds", (end + 1)[finished], (50, 99)))
    have_stamps = stamps is not None and len(stamps) >= 2
    if have_stamps:
        t = np.asarray(stamps, dtype=np.float64) / 1e3  # µs from the launch
        out.update(_percentiles("latency_us", t[np.clip(end + 1, 0, len(t) - 1)][finished], (50, 99)))
    tooling = program.tooling
    if tooling.output is None or tooling.progress is None:
        return out
    series = trace_series(program, result, tooling.progress, tooling.output.count)
    for unit, clock in (("rounds", lambda r: (r + 1).astype(np.float64)),
                        ("us", (lambda r: t[np.clip(r + 1, 0, len(t) - 1)]) if have_stamps else None)):
        if clock is None:
            continue
        ttft, itl = [], []
        for _req, (rounds, counts) in series.items():
            times = clock(rounds.astype(np.int64))
            gained = np.diff(np.concatenate([[0], counts.astype(np.int64)]))
            first = np.nonzero(gained > 0)[0]
            if len(first) == 0:
                continue
            ttft.append(times[first[0]])
            previous = first[0]
            for k in first[1:]:  # each element of a step waited (t_k - t_previous) / elements
                itl.extend([(times[k] - times[previous]) / gained[k]] * int(gained[k]))
                previous = k
        out.update(_percentiles(f"ttft_{unit}", ttft, (50, 99)))
        out.update(_percentiles(f"itl_{unit}", itl))
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
    from ...semantics.ops import ERR_WATCHDOG
    from ...runtime.sim import KIND_DONE, KIND_ERROR

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
    admitted_at, end, _finished = _admitted_and_ended(result, max_active)
    busy = np.clip(end - admitted_at + 1, 0, None)
    return SlotUtilisation(int(busy.sum()), int(max_active), int(result.rounds))
