"""Results as data: the `--json FILE` document of `xlgen sim`, `diff`, `run` and `bench`.

One writer for the four commands, so the CPU tests of sim and diff cover what run and
bench write on a GPU. The schema, `xlgen.result/1`, is documented in docs/results_json.md;
a change that removes or renames a key, or changes a key's meaning, bumps the number
(adding a key does not).

Numbers are written at full precision: integers as they are; floats (f32 values widened
exactly to binary64, metrics in binary64) as JSON numbers in Python's shortest repr, which
reads back to the same double; a float that JSON cannot hold (NaN, +-infinity) as the
string "NaN", "Infinity" or "-Infinity". The file is written atomically (a temporary
file beside it, then a rename) and never through a symbolic link.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

SCHEMA = "xlgen.result/1"

OUTCOMES = {0: "ok", 1: "mismatch", 2: "usage", 3: "stopped", 4: "requests_failed", 130: "interrupted"}


def new_document(command: str, file, argv: list[str] | None = None) -> dict:
    """The document's head; the command fills `pipeline`, `workload`, `runs`, ... and
    `finish` sets the exit status."""
    from ... import __version__

    return {
        "schema": SCHEMA,
        "xlgen_version": __version__,
        "command": command,
        "argv": list(sys.argv[1:] if argv is None else argv),
        "source": str(file) if file is not None else None,
        "exit_status": None,
        "outcome": None,
        "pipeline": None,
        "workload": None,
        "runs": [],
        "comparisons": [],
        "checks": {},
    }


def describe_launch(doc: dict, compiled, module, workload) -> None:
    """The pipeline and the workload as run: name, request count, batch capacity, launch parameters."""
    from ..pipeline.companion import params_by_name

    doc["pipeline"] = {"name": compiled.name, "main_file": str(compiled.program.main_file)}
    params = params_by_name(module, workload.params)
    doc["workload"] = {"name": workload.name, "requests": len(workload.inputs),
                       "max_active": int(workload.config.max_active),
                       "max_rounds": _plain(getattr(workload.config, "max_rounds", None)),
                       "params": {name: _param_value(compiled, name, value) for name, value in params.items()}}


def run_entry(compiled, module, workload, result, metrics: bool = True) -> dict:
    """One backend's run: outcome counts, records by kind (trace records per stage), slot
    utilisation, every metric, and one entry per request."""
    from ..pipeline.metrics import collect_metrics, run_counts, slot_utilisation
    from ..pipeline.tool_options import make_run

    program = compiled.program
    c = run_counts(result)
    entry = {
        "backend": result.backend,
        "rounds": int(result.rounds),
        "counts": {"requests": c.requests, "done": c.done, "failed": c.failed, "runtime_errors": c.runtime_errors,
                   "watchdog": c.watchdog, "unfinished": c.unfinished},
        "records": records_by_kind(program, result),
    }
    in_rounds = "fast" not in result.backend and "interleaved" not in result.backend
    if in_rounds:
        u = slot_utilisation(result, workload.config.max_active)
        entry["slot_utilisation"] = {"busy_request_rounds": u.busy, "capacity": u.capacity, "rounds": u.rounds,
                                     "fraction": u.fraction}
    if metrics:
        values = collect_metrics(program, result, workload.config.max_active,
                                 make_run(compiled, module, workload, result), result.extra.get("round_end_ns"))
        entry["metrics"] = {str(k): _plain(v) for k, v in values.items()}
    timing = result.extra.get("timing")
    if timing is not None:
        entry["timing"] = _plain(timing)
    entry["requests"] = request_entries(program, result)
    return entry


def records_by_kind(program, result) -> dict:
    """{"trace": n, "done": n, "error": n, "trace_by_stage": {stage: n}} (stages in declared order)."""
    from ...runtime.sim import KIND_DONE, KIND_ERROR

    kinds = result.record_table["kind"]
    done, error = int((kinds == KIND_DONE).sum()), int((kinds == KIND_ERROR).sum())
    by_stage = {t.stage: 0 for t in program.traces}
    values, counts = np.unique(kinds[(kinds != KIND_DONE) & (kinds != KIND_ERROR)], return_counts=True)
    for kind, n in zip(values.tolist(), counts.tolist()):
        stage = program.traces[kind].stage if kind < len(program.traces) else f"trace {kind}"
        by_stage[stage] = by_stage.get(stage, 0) + int(n)
    return {"trace": int(len(kinds)) - done - error, "done": done, "error": error, "trace_by_stage": by_stage}


def request_entries(program, result) -> list[dict]:
    """Per request: status (done, error, watchdog, unfinished), the round it ended in, the
    error (message, code, .xl line, stage, and what failed: subject, position, value, bound), every scalar request field's final value, and the
    declared output (`output FIELD[COUNT]`: its first COUNT elements)."""
    from ...core import ir
    from ...semantics.ops import ERR_WATCHDOG, ERROR_NAMES
    from ...runtime.sim import KIND_DONE, KIND_ERROR, NO_STAGE
    from ..check.diff import describe_record, error_fields, line_file

    table = result.record_table
    n = len(result.requests)
    last_row: dict[int, int] = {}
    if len(table):
        ids = table["req_id"]
        ends = np.flatnonzero(np.r_[ids[1:] != ids[:-1], True])
        last_row = {int(ids[k]): int(k) for k in ends}
    scalars = [f for f in program.request_fields if not isinstance(f.type, ir.ArrayType)]
    output = program.tooling.output
    entries = []
    for i in range(n):
        row = last_row.get(i)
        rec = table[row] if row is not None else None
        kind = None if rec is None else int(rec["kind"])
        entry = {"id": i, "status": "unfinished", "ended_round": None, "error": None}
        if kind == KIND_DONE:
            entry["status"], entry["ended_round"] = "done", int(rec["round"])
        elif kind == KIND_ERROR:
            code, line, stage = int(rec["words"][0]), int(rec["words"][1]), int(rec["stage"])
            entry["status"] = "watchdog" if code == ERR_WATCHDOG else "error"
            entry["ended_round"] = int(rec["round"])
            in_stage = code != ERR_WATCHDOG and stage != NO_STAGE and stage < len(program.stages)
            what = error_fields(program, rec["words"])  # what failed (docs/semantics.md §12)
            entry["error"] = {"message": describe_record(program, result.records[row]), "code": code,
                              "name": ERROR_NAMES.get(code, f"error {code}"),
                              "line": line if code != ERR_WATCHDOG else None,
                              "file": line_file(program, stage, line) if code != ERR_WATCHDOG else None,
                              "stage": program.stages[stage].name if in_stage else None,
                              **{key: what[key] for key in ("subject", "position", "value", "bound")}}
        entry["fields"] = {f.name: _field_value(f.type, result.requests[f.name][i]) for f in scalars}
        if output is not None:
            count = int(result.requests[output.count][i])
            values = np.asarray(result.requests[output.field][i]).reshape(-1)
            elem = program.field(output.field).type.elem
            entry["output"] = [_field_value(elem, v) for v in values[:max(0, min(count, len(values)))]]
        entries.append(entry)
    return entries


def finish(doc: dict, exit_status: int) -> dict:
    doc["exit_status"] = int(exit_status)
    doc["outcome"] = "error" if doc.get("error") else OUTCOMES.get(int(exit_status), "error")
    return doc


def dumps(doc: dict) -> str:
    return json.dumps(_plain(doc), indent=1, allow_nan=False, ensure_ascii=False) + "\n"


def check_path(path: Path) -> None:
    """Before the run: a FileProblem when `path` is a link, a directory or a special file."""
    from ...core.files import check_target

    check_target(Path(path))


def write(path: Path, doc: dict) -> None:
    """Write the document at `path` atomically, never through a symbolic link."""
    from ...core.files import check_target, write_atomically

    path = Path(path)
    exists = check_target(path)
    write_atomically(path, dumps(doc), keep_mode_of=path if exists else None)


def load(path: Path) -> dict:
    """Read a document back, checking its schema."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise ValueError(f"{path}: not an {SCHEMA} document (schema {found!r})")
    return doc


# ---- values ----------------------------------------------------------------------------------


def _field_value(t, value):
    """A request field's value: an enum by member name (a flag set as its bits), a bool as a bool,
    an f32 as the exact double it widens to, an integer as an integer."""
    from ...core import ir

    if t == ir.BOOL:
        return bool(value)
    if isinstance(t, ir.EnumType) and not t.is_flags and 0 <= int(value) < len(t.members):
        return t.members[int(value)]
    return _plain(value)


def _param_value(compiled, name, value):
    decl = next((p for p in compiled.program.params if p.name == name), None)
    return _plain(value) if decl is None else _field_value(decl.type, value)


def _plain(value):
    """Anything a result holds as JSON-ready data: numpy scalars and arrays, dataclasses, dicts,
    non-finite floats as strings."""
    import dataclasses

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        return x
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    return str(value)
