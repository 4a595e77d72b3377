"""The simulator's execution engine: the deterministic round model of docs/semantics.md.

Every backend produces the same `RunResult`: trace records (rows of u32 words,
per request in execution order), the final request and shared state as numpy
structured arrays, and the number of rounds.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field

import numpy as np

from ..backends.names import py
from .tensors import bind
from ..semantics.ops import (CANONICAL_NAN_BITS, ERR_CONFLICT, ERR_WATCHDOG, ERROR_WORDS, SharedWrites, XlRuntimeError, collective, f32, wrap_i32)

REC_HEADER = 4  # req_id, round, kind, stage
KIND_ERROR = 0xFFFFFFFF
KIND_DONE = 0xFFFFFFFE
NO_STAGE = 0xFFFFFFFF
_LINE_MARK = re.compile(r"# @xl:(\d+)")


LAUNCH_MAX = (1 << 31) - 1  # the CPU build and the GPU kernel hold launch settings as int32


@dataclass
class LaunchConfig:
    max_active: int = 64  # batch capacity: requests resident at once
    max_rounds: int = 100_000  # the max_iterations watchdog

    def validate(self) -> None:
        """One range for every backend: 1..LAUNCH_MAX, refused rather than truncated to 32 bits."""
        for name in ("max_active", "max_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= LAUNCH_MAX:
                raise ValueError(f"launch {name} = {value!r}: give an integer in 1..{LAUNCH_MAX}")


@dataclass
class RunResult:
    records: np.ndarray  # (n, width) uint32, stably sorted by request id
    requests: np.ndarray  # structured array, one element per request
    shared: np.ndarray  # structured array of one element
    rounds: int
    backend: str = "sim"
    extra: dict = field(default_factory=dict)
    pools: dict = field(default_factory=dict)  # pool name -> its final contents, shaped like the pool

    def per_request(self, req_id: int) -> np.ndarray:
        return self.records[self.records[:, 0] == req_id]

    def errors(self) -> np.ndarray:
        return self.records[self.records[:, 2] == KIND_ERROR]

    @property
    def record_table(self) -> np.ndarray:
        """`records` as a structured array (a view, no copy): `req_id`, `round`, `kind` (a trace
        index, KIND_DONE or KIND_ERROR), `stage` (NO_STAGE for `done when` and the watchdog) and
        `words` (a trace's values as u32 words; an error's code, .xl line and what failed)."""
        return as_record_table(self.records)


def record_dtype(width: int) -> np.dtype:
    return np.dtype([("req_id", "<u4"), ("round", "<u4"), ("kind", "<u4"), ("stage", "<u4"),
                     ("words", "<u4", (max(width - REC_HEADER, 0),))])


def as_record_table(records: np.ndarray) -> np.ndarray:
    records = np.ascontiguousarray(records, dtype=np.uint32)
    width = records.shape[1] if records.ndim == 2 else REC_HEADER
    return records.reshape(-1, width).view(record_dtype(width)).reshape(-1)


def pool_table(module) -> list:
    """(xl name, attribute, element word, dims) of each pool of a generated simulator."""
    return getattr(module, "POOLS", [])


def record_width(module) -> int:
    widths = [ERROR_WORDS]
    for index, stage, fields in module.TRACES:
        n = 0
        for name in fields:
            entry = next(e for e in module.REQUEST_LAYOUT if e[0] == name)
            n += entry[3]
        widths.append(n)
    return REC_HEADER + max(widths)


def error_record(req_id: int, rnd: int, stage: int, exc: XlRuntimeError, module_file: str) -> tuple:
    return (req_id, rnd, KIND_ERROR, stage, exc.code, _error_line(exc, module_file), *exc.detail_words())


def _bare_error(req_id: int, rnd: int, stage: int, code: int, line: int) -> tuple:
    """An error record that says no more than its code and line (the watchdog, a conflict)."""
    return (req_id, rnd, KIND_ERROR, stage, code, line, *XlRuntimeError(code).detail_words())


def _error_line(exc: BaseException, module_file: str) -> int:
    """The .xl line of the innermost generated statement that raised (or the line the error
    carries: lane-parallel code raises the failing iteration's own)."""
    if getattr(exc, "line", 0):
        return exc.line
    tb = exc.__traceback__
    line = 0
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename == module_file and tb.tb_lineno is not None:  # None: stopped between lines
            text = linecache.getline(module_file, tb.tb_lineno)
            match = _LINE_MARK.search(text)
            if match:
                line = int(match.group(1))
        tb = tb.tb_next
    return line


def coerce(value, word: str):
    """A workload value as the simulator stores it (checked for range)."""
    if word == "f":
        return f32(float(value))
    v = int(value)
    if word == "i":
        if wrap_i32(v) != v:
            raise ValueError(f"{value} does not fit in i32")
        return v
    if not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{value} does not fit in u32")
    return v


def make_requests(module, params, inputs: list[dict]):
    """Initial request state: the declared initial values, then each request's overrides."""
    layout = {e[0]: e for e in module.REQUEST_LAYOUT}
    reqs = []
    for req_id, overrides in enumerate(inputs):
        r = module.init_request(req_id, params)
        for name, value in overrides.items():
            if name not in layout:
                raise KeyError(f"request {req_id}: unknown field '{name}'")
            _, attr, word, count, is_array = layout[name]
            if is_array:
                values = [coerce(v, word) for v in value]
                if len(values) > count:
                    raise ValueError(f"request {req_id}: '{name}' holds {count} values, got {len(values)}")
                current = getattr(r, attr)
                current[: len(values)] = values
            else:
                setattr(r, attr, coerce(value, word))
        reqs.append(r)
    return reqs


def param_word(type_name: str) -> str:
    """How a launch parameter is stored: only i32 is signed (a flag set's member 31 is bit 31)."""
    return "f" if type_name == "f32" else ("i" if type_name == "i32" else "u")


def make_params(module, overrides: dict | None):
    """Launch parameters from overrides by name; tensors (runtime/tensors.py) are bound here
    too, from arrays given under their names."""
    overrides = dict(overrides or {})
    kwargs = {}
    declared = getattr(module.Params, "TENSORS", {})
    if declared:
        arrays = {name: overrides.pop(name) for name in list(overrides) if name in declared}
        for name, flat in bind(declared, arrays).items():
            kwargs[py(name)] = flat
    for name, t in module.Params.TYPES.items():
        if name in overrides:
            value = overrides.pop(name)
            # keyed by the attribute name: a param named `pass` is `xl_pass` in Python
            kwargs[py(name)] = coerce(value, param_word(t)) if t != "bool" else bool(value)
    if overrides:
        raise KeyError(f"unknown launch parameter(s): {', '.join(sorted(overrides))}")
    return module.Params(**kwargs)


def to_array(objs, layout, dtype: np.dtype) -> np.ndarray:
    out = np.zeros(len(objs), dtype=dtype)
    if not objs:  # a run of no requests (numpy cannot shape an empty column of arrays)
        return out
    for name, attr, word, count, is_array in layout:
        if word == "f":
            column = [getattr(o, attr) for o in objs]
            out[name] = np.array(column, dtype=np.float64).astype(np.float32)
        else:
            column = [getattr(o, attr) for o in objs]
            out[name] = np.array(column, dtype=np.int64).astype(out.dtype[name].base)
    return out


def _start(module, params, inputs, config):
    """A run's launch config, params, initial requests and shared state."""
    config = config or LaunchConfig()
    config.validate()
    p = params if isinstance(params, module.Params) else make_params(module, params)
    reqs = make_requests(module, p, inputs if inputs is not None else [{}])
    return config, p, reqs, module.init_shared(p)


def _finish(module, records: list[list], reqs, sh, rounds: int, backend: str) -> RunResult:
    """Per-request record lists, final state -> RunResult (records grouped by request id)."""
    from ..backends.layout import module_dtypes

    req_dtype, shared_dtype = module_dtypes(module)
    flat = [rec for per in records for rec in per]
    table = np.zeros((len(flat), record_width(module)), dtype=np.uint32)
    for i, rec in enumerate(flat):
        table[i, : len(rec)] = rec
    return RunResult(records=table, requests=to_array(reqs, module.REQUEST_LAYOUT, req_dtype),
                     shared=to_array([sh], module.SHARED_LAYOUT, shared_dtype), rounds=rounds, backend=backend,
                     pools={name: getattr(sh, attr).reshape(dims) for name, attr, _, dims in pool_table(module)})


def _run_stage(module, stage, r, sh, p, rnd: int, out: list) -> bool:
    """One stage for one request (if its guard holds), appending its trace or error
    record to the request's records `out`; False when it failed."""
    name, index, _, guard, body, trace_index, trace = stage[:7]
    try:
        if guard(r, sh, p):
            body(r, sh, p)
            if trace is not None:
                out.append((r.xl_id, rnd, trace_index, index, *trace(r)))
    except XlRuntimeError as exc:
        out.append(error_record(r.xl_id, rnd, index, exc, module.__file__))
        return False
    return True


def _round_of(rnd: int | dict[int, int], req_id: int) -> int:
    """The round a record of `req_id` carries: the round's, or (fast mode's epochs) its own iteration."""
    return rnd[req_id] if isinstance(rnd, dict) else rnd


def _run_collective(module, stage, req_ids: list[int], reqs, sh, p, rnd: int | dict[int, int], records: list[list],
                    failed: set[int]) -> None:
    """A collective stage (docs/semantics.md §13.1) for the requests `req_ids` (ascending
    id): each one whose guard holds runs the body up to its next collective; the collective
    combines the contributions in id order and every participant resumes with its result.
    Shared writes take effect when the stage ends. Failed requests are added to `failed`.
    `rnd`: the round of the records, or each request's (a dict)."""
    index, trace_index, trace, line = stage[1], stage[5], stage[6], stage[8]
    guard, body = stage[3], stage[4]
    writes = SharedWrites()
    bodies, finished = {}, []

    def fail(req_id: int, exc: XlRuntimeError) -> None:
        records[req_id].append(error_record(req_id, _round_of(rnd, req_id), index, exc, module.__file__))
        failed.add(req_id)

    for req_id in req_ids:
        r = reqs[req_id]
        try:
            if guard(r, sh, p):
                gen = body(r, sh, p, writes.writer(req_id))
                if gen is None:  # a body without collectives is a plain function: already run
                    finished.append(req_id)
                else:
                    bodies[req_id] = gen
        except XlRuntimeError as exc:
            fail(req_id, exc)
    results = {req_id: None for req_id in bodies}
    while results:
        reached = {}  # req_id -> (op, word, contribution), in id order
        for req_id, result in results.items():
            try:
                reached[req_id] = bodies[req_id].send(result)
            except StopIteration:
                finished.append(req_id)
            except XlRuntimeError as exc:
                fail(req_id, exc)
        if not reached:
            break
        (op, word, _), = {(op, word, None) for op, word, _ in reached.values()}  # one collective, reached by all
        ids = list(reached)
        results = dict(zip(ids, collective(op, word, [(i, reached[i][2]) for i in ids])))
    conflicted = writes.apply(sh)
    for req_id in sorted(finished):
        if req_id in conflicted:
            records[req_id].append(_bare_error(req_id, _round_of(rnd, req_id), index, ERR_CONFLICT, line))
            failed.add(req_id)
        elif trace is not None:
            records[req_id].append((req_id, _round_of(rnd, req_id), trace_index, index, *trace(reqs[req_id])))


def _run_phase2(module, phase2, active: list[int], reqs, sh, p, rnd: int | dict[int, int], records: list[list],
                failed: set[int]):
    """Arbiters (serially, in request-id order) and collective stages, in declaration order,
    for the requests `active` (ascending id); `rnd` as _run_collective's."""
    for stage in phase2:
        if stage[7] == "collective":
            _run_collective(module, stage, [i for i in active if i not in failed], reqs, sh, p, rnd, records, failed)
            continue
        for req_id in active:
            if req_id not in failed and not _run_stage(module, stage, reqs[req_id], sh, p, _round_of(rnd, req_id),
                                                       records[req_id]):
                failed.add(req_id)


def _retire_check(module, r, sh, p, rnd: int, out: list) -> bool | None:
    """`done when` for one request: True done (record appended), False still running,
    None failed (error record appended)."""
    try:
        done = module.is_done(r, sh, p)
    except XlRuntimeError as exc:
        out.append(error_record(r.xl_id, rnd, NO_STAGE, exc, module.__file__))
        return None
    if done:
        out.append((r.xl_id, rnd, KIND_DONE, NO_STAGE))
    return bool(done)


def run(module, params=None, inputs: list[dict] | None = None, config: LaunchConfig | None = None,
        progress=None, observer=None) -> RunResult:
    """Run the simulator: the reference every other backend is compared against.

    `observer(round, requests, shared, active_ids)`, when given, is called after the
    arbiters of every round (before retirement), e.g. to check invariants of shared
    state; it must not modify what it is given."""
    config, p, reqs, sh = _start(module, params, inputs, config)
    n = len(reqs)
    per_request = [s for s in module.STAGES if not s[2]]
    phase2 = [s for s in module.STAGES if s[2]]
    records: list[list] = [[] for _ in range(n)]
    active: list[int] = []
    failed: set[int] = set()
    queue_head = 0
    rnd = 0

    while True:
        while len(active) < config.max_active and queue_head < n:  # admit, in id order
            active.append(queue_head)
            queue_head += 1
        if not active:
            break
        if rnd >= config.max_rounds:
            for req_id in active + list(range(queue_head, n)):
                records[req_id].append(_bare_error(req_id, rnd, NO_STAGE, ERR_WATCHDOG, 0))
            break
        for req_id in active:  # phase 1: per-request stages (parallel on the GPU)
            if not all(_run_stage(module, stage, reqs[req_id], sh, p, rnd, records[req_id]) for stage in per_request):
                failed.add(req_id)
        _run_phase2(module, phase2, active, reqs, sh, p, rnd, records, failed)  # arbiters, collective stages
        if observer is not None:
            observer(rnd, reqs, sh, [i for i in active if i not in failed])
        still_active = []
        for req_id in active:  # retire
            if req_id in failed:
                continue
            done = _retire_check(module, reqs[req_id], sh, p, rnd, records[req_id])
            if done is None:
                failed.add(req_id)
            elif not done:
                still_active.append(req_id)
        active = still_active
        rnd += 1
        if progress is not None:
            progress(queue_head - len(active), n)

    return _finish(module, records, reqs, sh, rnd, "sim")


class SimHang(Exception):
    """The simulator was stopped (a timeout, Ctrl-C) before every request ended; `report` says
    where each active request was, like the GPU's HangError."""

    def __init__(self, report: str, interrupted: bool = False):
        super().__init__(report)
        self.report = report
        self.interrupted = interrupted


class _Deadline(BaseException):
    """Raised by the timer inside whatever the simulator runs (generated code catches only XlRuntimeError)."""


def run_stoppable(module, params=None, inputs: list[dict] | None = None, config: LaunchConfig | None = None,
                  timeout: float | None = None, **kwargs) -> RunResult:
    """run(), but stopped after `timeout` seconds or by Ctrl-C with a SimHang and its report.

    A stage can loop 2^40 times legally, so the timer interrupts wherever the simulator is
    (SIGALRM; the main thread only), not just between rounds."""
    import signal
    import time

    in_run = [True]

    def expire(signum, frame):
        if in_run[0]:  # not once run() has returned
            raise _Deadline()

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire) if timeout else None
    try:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        result = run(module, params, inputs, config, **kwargs)
        in_run[0] = False
        return result
    except (_Deadline, KeyboardInterrupt) as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        why = "interrupted (Ctrl-C)" if interrupted else f"--timeout {timeout:g} s reached"
        raise SimHang(hang_report(module, exc, f"simulator stopped: {why} after {time.monotonic() - start:.1f} s"),
                      interrupted) from None
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def hang_report(module, exc: BaseException, headline: str, limit: int = 64) -> str:
    """Where run() was when `exc` stopped it: its round, and each active request's stage.

    Read from the stopped frames (run's locals and the stage turn's), so run() itself
    needs no bookkeeping."""
    run_frame = turn = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is run.__code__:
            run_frame = tb.tb_frame
        elif code in (_run_stage.__code__, _retire_check.__code__, _run_collective.__code__):
            turn = tb.tb_frame
        tb = tb.tb_next
    if run_frame is None:
        return f"{headline}, before the first round"
    at = run_frame.f_locals
    rnd, active, n = at.get("rnd", 0), list(at.get("active", [])), at.get("n", 0)
    queued = n - at.get("queue_head", 0)
    lines = [f"{headline}; stopped in round {rnd} ({len(active)} active requests, {queued} queued, "
             f"{n - len(active) - queued} ended)",
             "request  round  stage             source"]
    running, done_before = None, set()
    if turn is not None:
        running = getattr(turn.f_locals.get("r"), "xl_id", None)
        if turn.f_code is _run_collective.__code__:  # the participant it was running
            running = turn.f_locals.get("req_id")
        stage = turn.f_locals.get("stage")
        name = stage[0] if stage is not None else "(done when)"
        line = _error_line(exc, module.__file__) or (stage[8] if stage is not None else 0)
        file = stage[9] if stage is not None else module.SOURCE  # the stage's own file (imported stages)
        lines.append(f"{running:>7}  {rnd:>5}  {name:<16}  {file}:{line}  (running)")
        if stage is not None and not stage[2] and running in active:  # phase 1: those before it are through
            done_before = set(active[: active.index(running)])
    others = [req_id for req_id in active if req_id != running]
    for req_id in others[: max(0, limit - 1)]:
        where = "this round's stages done" if req_id in done_before else "waiting for its turn"
        lines.append(f"{req_id:>7}  {rnd:>5}  {'-':<16}  ({where})")
    if len(others) > limit - 1:
        lines.append(f"  ... and {len(others) - (limit - 1)} more")
    return "\n".join(lines)


def run_interleaved(module, params=None, inputs: list[dict] | None = None, config: LaunchConfig | None = None,
                    workers: int | None = None, seed: int = 0) -> RunResult:
    """Fast mode's semantics (docs/semantics.md §15), one schedule of many: `workers` warps
    (default: one per request) each take the next request in id order and run it to the
    end, one iteration at a time: its per-request stages; then, if the program has arbiters
    or collective stages, it waits for the next *epoch*, which runs them (declaration order)
    for every request waiting at that moment together, ids ascending, as a round's phase 2
    does; then `done when`. A seeded random choice decides, step by step, whose per-request
    stages run next or whether the waiting requests' epoch runs. The round in a record is
    the request's own iteration. Fast-mode results that depend on the schedule show up here
    as a difference between seeds, without a GPU."""
    import random

    config, p, reqs, sh = _start(module, params, inputs, config)
    n = len(reqs)
    stages = module.STAGES  # per-request stages, then phase 2's: declaration order within each
    per_request = [s for s in stages if not s[2]]
    phase2 = [s for s in stages if s[2]]
    records: list[list] = [[] for _ in range(n)]
    iteration = [0] * n
    rng = random.Random(seed)
    running = list(range(min(n, workers or n)))  # requests in their per-request stages
    waiting: list[int] = []  # requests waiting for an epoch
    queue_head = len(running)

    def next_request() -> None:
        nonlocal queue_head
        if queue_head < n:
            running.append(queue_head)
            queue_head += 1

    def finish_iteration(req_id: int) -> None:
        """`done when`; the request goes on or its worker takes the next one."""
        r, rnd = reqs[req_id], iteration[req_id]
        if _retire_check(module, r, sh, p, rnd, records[req_id]) is False:  # not done, not failed
            iteration[req_id] += 1
            running.append(req_id)
        else:
            next_request()

    while running or waiting:
        if waiting and (not running or rng.randrange(len(running) + 1) == 0):
            epoch, waiting = sorted(waiting), []
            failed: set[int] = set()
            _run_phase2(module, phase2, epoch, reqs, sh, p, {i: iteration[i] for i in epoch}, records, failed)
            for req_id in epoch:
                if req_id in failed:
                    next_request()
                else:
                    finish_iteration(req_id)
            continue
        req_id = running.pop(rng.randrange(len(running)))
        r, rnd = reqs[req_id], iteration[req_id]
        if rnd >= config.max_rounds:
            records[req_id].append(_bare_error(req_id, rnd, NO_STAGE, ERR_WATCHDOG, 0))
            next_request()
        elif not all(_run_stage(module, stage, r, sh, p, rnd, records[req_id]) for stage in per_request):
            next_request()
        elif phase2:
            waiting.append(req_id)
        else:
            finish_iteration(req_id)

    return _finish(module, records, reqs, sh, max(iteration, default=0), "sim-interleaved")


def canonical_words(arr: np.ndarray) -> np.ndarray:
    """A structured array as raw u32 words with NaNs canonicalised (for bitwise comparison)."""
    if arr.dtype.names is None:
        return arr.view(np.uint32)
    words = np.ascontiguousarray(arr).view(np.uint32).reshape(len(arr), -1).copy()
    offset = 0
    for name in arr.dtype.names:
        sub = arr.dtype[name]
        count = int(np.prod(sub.shape)) if sub.shape else 1
        if sub.base == np.float32:
            block = words[:, offset:offset + count]
            as_float = block.view(np.float32)
            block[np.isnan(as_float)] = CANONICAL_NAN_BITS
        offset += count
    return words
