"""Compare two runs of one pipeline (simulator, CPU build, GPU) bit for bit.

The first difference is reported the way a person debugs it: which request,
which round, which stage and field, both values, and the .xl line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core import ir
from ...core.subjects import subject
from ...semantics import ops
from ...semantics.ops import ERR_WATCHDOG, ERROR_NAMES, ERROR_WORDS, bits_f32
from ...runtime.sim import KIND_DONE, KIND_ERROR, NO_STAGE, REC_HEADER, RunResult, canonical_words
from ...semantics.ops import CANONICAL_NAN_BITS


@dataclass
class Divergence:
    summary: str
    details: list[str]

    def render(self) -> str:
        return "\n".join([self.summary, *("  " + d for d in self.details)])


def _trace_fields(program: ir.Program, trace_index: int) -> list[tuple[str, ir.Type]]:
    """(label, element type) of each value word of a trace record."""
    trace = program.traces[trace_index]
    out = []
    for name in trace.fields:
        f = program.field(name)
        if isinstance(f.type, ir.ArrayType):
            out.extend((f"{name}[{i}]", f.type.elem) for i in range(f.type.length))
        else:
            out.append((name, f.type))
    return out


def show_word(word: int, t) -> str:
    kind = ir.storage_word(t)
    if kind == "f":
        return f"{bits_f32(word)!r} (0x{word:08x})"
    if kind == "i":
        value = word - (1 << 32) if word >= 1 << 31 else word
        if isinstance(t, ir.EnumType) and 0 <= value < len(t.members):
            return f"{t.name}.{t.members[value]}"
        return str(value)
    if t == ir.BOOL:
        return "true" if word else "false"
    return str(word)


# The words of an error record after its header (docs/semantics.md §12).
ERROR_WORD_NAMES = ("code", "line", "subject", "position", "value", "bound", "word")
# How a builtin's argument must be, by the bound its error record carries (builtins.py).
BUILTIN_RANGES = {"verify_prefix": "in 0..{bound} (the shorter array's length)",
                  "target_token": "at least {bound}", "draft_token": "at least {bound}"}


def error_value(word: int, how: int) -> int | float:
    """An error record's value as its `word` says it reads (ops.WORD_I, WORD_U, WORD_F)."""
    if how == ops.WORD_F:
        return bits_f32(word)
    return word - (1 << 32) if how == ops.WORD_I and word >= 1 << 31 else word


def error_fields(program: ir.Program, words) -> dict:
    """An error record's words after the header, by name, the subject named and the value read."""
    fields = dict(zip(ERROR_WORD_NAMES, (int(w) for w in words[:ERROR_WORDS])))
    fields["value"] = error_value(fields["value"], fields["word"])
    fields["bound"] = fields["bound"] - (1 << 32) if fields["bound"] >= 1 << 31 else fields["bound"]  # an i32
    named = subject(program, fields["subject"])
    fields["subject"] = None if named is None else {"kind": named.kind, "name": named.name}
    return fields


def explain_error(program: ir.Program, words) -> str:
    """What failed, in words: `index 9 out of range for 'draft' (length 8)`."""
    f = error_fields(program, words)
    code, position, value, bound = f["code"], f["position"], f["value"], f["bound"]
    named = subject(program, int(words[2]))
    what = named.describe() if named is not None else "an array"
    if code == ops.ERR_INDEX:
        if named is not None and len(named.dims) > 1:
            what = f"dimension {position} of {what}"
        return f"index {value} out of range for {what} (length {bound})"
    if code == ops.ERR_DIV_ZERO:
        return f"division by zero: {value} {'%' if position == ops.OP_REM else '/'} 0"
    if code == ops.ERR_SHIFT:
        return f"shift amount {value} out of range 0..31 ({'>>' if position == ops.OP_SHR else '<<'})"
    if code == ops.ERR_CAST:
        return f"f32 value {value!r} out of range for {'u32' if position == ops.TO_U32 else 'i32'}"
    if code == ops.ERR_BUILTIN and named is not None and named.kind == "builtin":
        param = named.params[position] if position < len(named.params) else f"#{position}"
        rule = BUILTIN_RANGES.get(named.name, "within {bound}").format(bound=bound)
        return f"argument '{param}' of {named.name} is {value}; it must be {rule}"
    if code == ops.ERR_NOT_OWNER and named is not None:
        owner = f"request {bound}" if bound >= 0 else f"no request (owner {bound})"
        return f"page {value} of {what} is owned by {owner}, not by this one"
    if code == ops.ERR_CONFLICT and named is not None:
        element = f"[{value}]" if named.dims else ""
        return f"another request also wrote '{named.name}{element}' in this collective stage"
    return ERROR_NAMES.get(code, f"error {code}")


def describe_record(program: ir.Program, rec: np.ndarray) -> str:
    req, rnd, kind, stage = (int(x) for x in rec[:REC_HEADER])
    if kind == KIND_DONE:
        return f"request {req} done in round {rnd}"
    if kind == KIND_ERROR:
        code, line = int(rec[REC_HEADER]), int(rec[REC_HEADER + 1])
        if code == ERR_WATCHDOG:  # not an error of any stage: the run's round limit
            return (f"request {req} stopped by the max_iterations watchdog: unfinished after {rnd} rounds "
                    "(launch max_rounds)")
        where = "'done when'" if stage == NO_STAGE else f"stage {program.stages[stage].name}"
        return f"request {req} round {rnd}: runtime error in {where} ({line_site(program, stage, line)}): " \
               f"{explain_error(program, rec[REC_HEADER:])}"
    fields = _trace_fields(program, kind)
    values = ", ".join(f"{label}={show_word(int(w), t)}" for (label, t), w in zip(fields, rec[REC_HEADER:]))
    return f"request {req} round {rnd} stage {program.stages[stage].name}: {values}"


def line_file(program: ir.Program, stage: int, line: int) -> str:
    """The file of line `line` of a runtime error in `stage` (NO_STAGE: 'done when'). An error
    record keeps the line only: this is the stage's own file, unless only code of another file
    that the stage runs is on that line (a proc's body or a function, imported)."""
    code, own = _stage_code(program, stage)
    files = {loc.file for loc in _locs(code, {f.name: f for f in program.functions}) if loc.line == line}
    return own if not files or own in files else " or ".join(sorted(files))


def line_site(program: ir.Program, stage: int, line: int) -> str:
    """`line N`, or `line N of FILE` where the line is in another file than the stage's (line_file)."""
    file = line_file(program, stage, line)
    return f"line {line}" if file == _stage_code(program, stage)[1] else f"line {line} of {file}"


def _stage_code(program: ir.Program, stage: int):
    """The code a stage runs (NO_STAGE: 'done when') and the file it is declared in."""
    if stage == NO_STAGE or stage >= len(program.stages):
        return (program.done,), program.main_file
    s = program.stages[stage]
    return (s.guard, s.body), s.loc.file


def _locs(code, functions: dict):
    """The locations of every IR node under `code`, and of the functions it calls (each once)."""
    stack, seen = [code], set()
    while stack:
        n = stack.pop()
        if isinstance(n, (tuple, list)):
            stack.extend(n)
            continue
        if not hasattr(n, "__dataclass_fields__"):
            continue
        loc = getattr(n, "loc", None)
        if loc is not None:
            yield loc
        if isinstance(n, ir.Call) and not n.builtin and n.func in functions and n.func not in seen:
            seen.add(n.func)
            stack.append(functions[n.func].body)
        stack.extend(getattr(n, f) for f in n.__dataclass_fields__ if f not in ("loc", "type"))


def _stage_line(program: ir.Program, stage: int) -> str:
    if stage == NO_STAGE or stage >= len(program.stages):
        return f"{program.main_file} ('done when')"
    s = program.stages[stage]
    return f"{s.loc.file}:{s.loc.line}"


def compare(program: ir.Program, a: RunResult, b: RunResult, check_state: bool = True) -> Divergence | None:
    """None when the runs agree bit for bit; otherwise the first divergence."""
    names = f"{a.backend} vs {b.backend}"
    n = min(len(a.records), len(b.records))
    for i in range(n):
        ra, rb = a.records[i], b.records[i]
        if np.array_equal(ra, rb):
            continue
        req, rnd, kind, stage = (int(x) for x in ra[:REC_HEADER])
        details = [f"{a.backend}: {describe_record(program, ra)}", f"{b.backend}: {describe_record(program, rb)}"]
        if np.array_equal(ra[:REC_HEADER], rb[:REC_HEADER]) and kind < len(program.traces):
            for (label, t), wa, wb in zip(_trace_fields(program, kind), ra[REC_HEADER:], rb[REC_HEADER:]):
                if wa != wb:
                    details.insert(0, f"field {label}: {a.backend}={show_word(int(wa), t)} "
                                      f"{b.backend}={show_word(int(wb), t)}")
                    break
            details.append(f"source: {_stage_line(program, stage)}")
        elif np.array_equal(ra[:REC_HEADER], rb[:REC_HEADER]) and kind == KIND_ERROR:
            for label, wa, wb in zip(ERROR_WORD_NAMES, ra[REC_HEADER:], rb[REC_HEADER:]):
                if wa != wb:
                    details.insert(0, f"error {label}: {a.backend}={int(wa)} {b.backend}={int(wb)}")
                    break
            details.append(f"source: {_stage_line(program, stage)}")
        return Divergence(f"traces differ ({names}) at record {i}: request {req}, round {rnd}", details)
    if len(a.records) != len(b.records):
        longer, other = (a, b) if len(a.records) > len(b.records) else (b, a)
        extra = longer.records[n]
        return Divergence(
            f"traces differ ({names}): {a.backend} has {len(a.records)} records, {b.backend} {len(b.records)}",
            [f"first extra record in {longer.backend}: {describe_record(program, extra)}"],
        )
    if check_state:
        for label, xa, xb in (("request", a.requests, b.requests), ("shared", a.shared, b.shared)):
            wa, wb = canonical_words(xa), canonical_words(xb)
            if not np.array_equal(wa, wb):
                row = int(np.argwhere((wa != wb).any(axis=1))[0][0])
                field = _first_field_diff(xa, xb, row)
                return Divergence(f"final {label} state differs ({names})",
                                  [f"{'request ' + str(row) if label == 'request' else 'shared'}: field {field}"])
        return compare_pools(a, b)
    return None


def pool_words(values: np.ndarray) -> np.ndarray:
    """A pool's contents as u32 words, NaNs canonicalised (backends may differ in NaN bits)."""
    words = np.ascontiguousarray(values).view(np.uint32).copy()
    if values.dtype == np.float32:
        words[np.isnan(values.view(np.float32))] = CANONICAL_NAN_BITS
    return words


def compare_pools(a: RunResult, b: RunResult) -> Divergence | None:
    """The final contents of every pool, bit for bit (deterministic mode: §13.3)."""
    for name in sorted(set(a.pools) | set(b.pools)):
        if name not in a.pools or name not in b.pools:
            missing = a.backend if name not in a.pools else b.backend
            return Divergence(f"final pool contents differ ({a.backend} vs {b.backend})",
                              [f"{missing} did not report pool '{name}'"])
        va, vb = a.pools[name], b.pools[name]
        wa, wb = pool_words(va), pool_words(vb)
        if wa.shape != wb.shape or not np.array_equal(wa, wb):
            if wa.shape != wb.shape:
                return Divergence(f"final pool contents differ ({a.backend} vs {b.backend})",
                                  [f"pool '{name}': shape {wa.shape} vs {wb.shape}"])
            at = tuple(int(i) for i in np.argwhere(wa != wb)[0])
            count = int((wa != wb).sum())
            return Divergence(f"final pool contents differ ({a.backend} vs {b.backend})",
                              [f"pool '{name}'{list(at)}: {a.backend}={va[at]!r} {b.backend}={vb[at]!r} "
                               f"({count} element{'s' if count != 1 else ''} differ)"])
    return None


def _first_field_diff(xa: np.ndarray, xb: np.ndarray, row: int) -> str:
    for name in xa.dtype.names:
        va, vb = xa[name][row], xb[name][row]
        if not np.array_equal(np.asarray(va).view(np.uint32), np.asarray(vb).view(np.uint32)):
            return f"{name}: {va!r} vs {vb!r}"
    return "?"


def compare_results(program: ir.Program, a: RunResult, b: RunResult, fields=None) -> Divergence | None:
    """For fast mode, whose traces depend on the schedule: compare final request state
    only, and only `fields` when given (e.g. the declared output, when other fields
    legitimately depend on the schedule)."""
    from numpy.lib.recfunctions import repack_fields

    names = list(fields) if fields else list(a.requests.dtype.names)
    for name in names:
        # repacked: a multi-field index keeps the whole record's bytes (the other fields as padding)
        wa = canonical_words(repack_fields(a.requests[[name]]))
        wb = canonical_words(repack_fields(b.requests[[name]]))
        if not np.array_equal(wa, wb):
            row = int(np.argwhere((wa != wb).any(axis=1))[0][0])
            return Divergence(f"final request state differs ({a.backend} vs {b.backend})",
                              [f"request {row}: field {name}: {a.requests[name][row]!r} vs {b.requests[name][row]!r}"])
    return None


def committed_output_fields(program: ir.Program) -> list[str] | None:
    """The schedule-independent result fast mode is compared on: the fields of the pipeline's
    `output FIELD[COUNT]` declaration; None (the whole request state) without one."""
    out = program.tooling.output
    return [out.field, out.count] if out is not None else None
