"""Checker rules for the declarations the tools read (`output`, `progress`, `metric`,
`companion`; docs/language.md, "Declarations for the tools").

They change no generated code: the checker only makes sure that what they name
exists and has a type the tools can use, and carries them in `ir.Program.tooling`.
Called by `Checker.check` once stages and traces are known; every problem is a
diagnostic at the name it is about.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import ast as A
from ..core import ir
from ..core.diagnostics import Loc, did_you_mean

TOOLING_NODES = (A.OutputDecl, A.ProgressDecl, A.MetricDecl, A.CompanionDecl)
_NUMBERS = (ir.I32, ir.U32, ir.F32, ir.BOOL)


def check_tooling(checker, items, stages: list[ir.Stage], traces: list[ir.Trace]) -> ir.Tooling:
    """The program's `ir.Tooling`, with an error for each declaration that does not fit the program."""
    nodes = [i for i in items if isinstance(i, TOOLING_NODES)]
    rules = _Rules(checker, {t.stage: t for t in traces}, [s.name for s in stages])
    output = rules.output(_single(checker, nodes, A.OutputDecl, "output"))
    progress = rules.progress(_single(checker, nodes, A.ProgressDecl, "progress"), output)
    metrics = rules.metrics([n for n in nodes if isinstance(n, A.MetricDecl)])
    companion = _single(checker, nodes, A.CompanionDecl, "companion")
    return ir.Tooling(output=output, progress=progress, metrics=metrics,
                      companion=rules.companion(companion) if companion else None,
                      companion_loc=companion.loc if companion else Loc("", 0, 0))


def _single(checker, nodes, kind, word: str):
    found = [n for n in nodes if isinstance(n, kind)]
    for extra in found[1:]:
        checker.error(extra.loc, f"'{word}' is declared twice (first at {found[0].loc})")
    return found[0] if found else None


class _Rules:
    def __init__(self, checker, traces: dict[str, ir.Trace], stage_names: list[str]):
        self.c = checker
        self.traces = traces
        self.stage_names = stage_names

    def _request_field(self, ident: A.Ident, what: str) -> ir.FieldDecl | None:
        decl = self.c.fields.get(ident.name)
        if decl is None:
            where = " (it is a shared field)" if ident.name in self.c.shared else did_you_mean(ident.name, self.c.fields)
            self.c.error(ident.loc, f"{what}: '{ident.name}' is not a request field{where}")
            return None
        self.c.used_globals.add(ident.name)
        return decl

    def _traced_stage(self, ident: A.Ident, what: str) -> ir.Trace | None:
        if ident.name not in self.stage_names:
            self.c.error(ident.loc, f"{what}: unknown stage '{ident.name}'{did_you_mean(ident.name, self.stage_names)}")
            return None
        trace = self.traces.get(ident.name)
        if trace is None:
            self.c.error(ident.loc, f"{what}: stage '{ident.name}' is not traced (declare `trace {ident.name}: ...`)")
        return trace

    # ---- output FIELD[COUNT]
    def output(self, node: A.OutputDecl | None) -> ir.Output | None:
        if node is None:
            return None
        field = self._request_field(node.field, "output")
        count = self._request_field(node.count, "output count")
        ok = field is not None and count is not None
        if field is not None and not (isinstance(field.type, ir.ArrayType) and field.type.elem in (ir.I32, ir.U32)):
            self.c.error(node.field.loc, f"output: '{field.name}' is {field.type}; an output is an array of i32 or "
                                         "u32 (e.g. the tokens a request produced)")
            ok = False
        if count is not None and count.type != ir.I32:
            self.c.error(node.count.loc, f"output count: '{count.name}' is {count.type}; the count of valid output "
                                         "elements is an i32 request field")
            ok = False
        return ir.Output(field.name, count.name, node.loc) if ok else None

    # ---- progress STAGE
    def progress(self, node: A.ProgressDecl | None, output: ir.Output | None) -> str | None:
        if node is None:
            return None
        trace = self._traced_stage(node.stage, "progress")
        if trace is None:
            return None
        if output is None:
            self.c.error(node.stage.loc, "progress needs an `output FIELD[COUNT]` declaration: its trace records "
                                         "give the output count over time")
            return None
        if output.count not in trace.fields:
            self.c.error(node.stage.loc, f"progress: the trace of stage '{trace.stage}' must record the output count "
                                         f"'{output.count}' (add it to `trace {trace.stage}: ...`)")
            return None
        return trace.stage

    # ---- metric NAME[GROUP] = AGG(...) [/ AGG(...)]
    def metrics(self, nodes: list[A.MetricDecl]) -> tuple[ir.Metric, ...]:
        out: list[ir.Metric] = []
        seen: dict[str, Loc] = {}
        for node in nodes:
            if node.name in seen:
                self.c.error(node.loc, f"metric '{node.name}' is already declared (at {seen[node.name]})")
                continue
            seen[node.name] = node.loc
            metric = self._metric(node)
            if metric is not None:
                out.append(metric)
        return tuple(out)

    def _metric(self, node: A.MetricDecl) -> ir.Metric | None:
        ok = True
        if node.op is not None and node.op != "/":
            self.c.error(node.terms[1].loc, f"metric '{node.name}': two aggregates combine only by '/' (a ratio), "
                                            f"not '{node.op}'")
            ok = False
        group = None
        if node.group is not None:
            decl = self._request_field(node.group, f"metric '{node.name}' grouped by")
            if decl is not None and not (isinstance(decl.type, ir.EnumType) and not decl.type.is_flags):
                kind = f"the flag set {decl.type}" if isinstance(decl.type, ir.EnumType) else str(decl.type)
                self.c.error(node.group.loc, f"metric '{node.name}' grouped by '{decl.name}': a group is a request "
                                             f"field of an enum type (one value per member), not {kind}")
                ok = False
            ok = ok and decl is not None
            group = node.group.name
        terms = [self._term(node, t) for t in node.terms]
        if not ok or None in terms:
            return None
        if group is not None and any(t.shared for t in terms):
            shared = next(t.field for t in terms if t.shared)
            self.c.error(node.group.loc, f"metric '{node.name}': '{shared}' is shared state, one value for all "
                                         "requests; it cannot be grouped by a request field")
            return None
        return ir.Metric(node.name, tuple(terms), group, node.loc)

    def _term(self, metric: A.MetricDecl, term: A.MetricTerm) -> ir.MetricTerm | None:
        what = f"metric '{metric.name}'"
        agg = term.agg.name
        if agg not in ir.METRIC_AGGREGATES:
            self.c.error(term.agg.loc, f"{what}: unknown aggregate '{agg}'{did_you_mean(agg, ir.METRIC_AGGREGATES)} "
                                       f"(one of {', '.join(ir.METRIC_AGGREGATES)})")
            return None
        name = term.field.name
        if term.stage is not None:  # AGG(STAGE.FIELD): over the stage's trace records
            trace = self._traced_stage(term.stage, what)
            if trace is None:
                return None
            if name not in trace.fields:
                self.c.error(term.field.loc, f"{what}: '{name}' is not traced at stage '{trace.stage}' "
                                             f"(its trace records {', '.join(trace.fields)})")
                return None
            decl, shared = self.c.fields[name], False
        elif name in self.c.fields:
            decl, shared = self.c.fields[name], False
        elif name in self.c.shared:
            decl, shared = self.c.shared[name], True
        else:
            known = list(self.c.fields) + list(self.c.shared)
            self.c.error(term.field.loc, f"{what}: '{name}' is not a request or shared field{did_you_mean(name, known)}")
            return None
        self.c.used_globals.add(name)
        if decl.type not in _NUMBERS:
            self.c.error(term.field.loc, f"{what}: '{name}' is {decl.type}; a metric aggregates a scalar number "
                                         "(i32, u32, f32 or bool)")
            return None
        return ir.MetricTerm(agg, name, term.stage.name if term.stage is not None else None, shared)

    # ---- companion "FILE.py"
    def companion(self, node: A.CompanionDecl) -> str | None:
        """The companion's real path. Running a pipeline runs its companion's Python, so it is
        confined to the main file's folder (docs/language.md, "The companion's trust model"):
        only the main file declares one, by a relative path without `..` that stays in the folder."""
        path = Path(node.path)
        main_file = getattr(self.c, "main_file", node.loc.file)
        if node.loc.file != main_file:
            self.c.error(node.loc, f"companion \"{node.path}\" is declared in an imported file: only the pipeline's "
                                   f"main file ({Path(main_file).name}) may declare its companion; move the "
                                   "declaration there")
            return None
        if path.suffix != ".py":
            self.c.error(node.loc, f"companion \"{node.path}\": a companion is a Python module (a .py file)")
            return None
        if path.is_absolute() or node.path.startswith("~") or ".." in path.parts or "\0" in node.path:
            self.c.error(node.loc, f"companion \"{node.path}\": a companion must be inside the pipeline's folder; "
                                   f"give a path relative to {Path(node.loc.file).name}'s folder, without '..' (copy "
                                   "or move the module there)")
            return None
        full = Path(node.loc.file).parent / path
        try:
            folder = os.path.realpath(Path(node.loc.file).parent)
            inside = os.path.commonpath([folder, os.path.realpath(full)]) == folder
        except (OSError, ValueError):
            inside = False
        if not inside:
            self.c.error(node.loc, f"companion \"{node.path}\": leads out of the pipeline's folder through a "
                                   "symbolic link; a companion must be inside the folder (copy the module there)")
            return None
        try:
            is_file = full.is_file()
        except (OSError, ValueError):
            is_file = False
        if not is_file:
            why = "is not a regular file" if full.exists() else "no such file"
            self.c.error(node.loc, f"companion \"{node.path}\": {why} ({full}; the path is relative to "
                                   f"{Path(node.loc.file).name}'s folder)")
            return None
        return os.path.realpath(full)
