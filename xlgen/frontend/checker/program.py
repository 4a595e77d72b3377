"""The checker of a whole program: declarations first, then functions and stages, and the
typed IR (xlgen/core/ir.py) they make. Its rules are in the mixins it is built from."""

from __future__ import annotations
from .. import ast as A
from ...core import ir
from ...core.diagnostics import DiagnosticSink, Loc
from ..check_tooling import check_tooling
from .declarations import DeclarationRules
from .expressions import ExpressionRules
from .parallel import ParallelRules
from .procs import ProcRules
from .rules import Global
from .statements import StatementRules


class Checker(DeclarationRules, StatementRules, ParallelRules, ProcRules, ExpressionRules):
    """Checks modules into a typed IR program, collecting every error in `sink`."""

    def __init__(self, sink: DiagnosticSink, sources: dict[str, str], allow_library: bool = False):
        self.sink = sink
        self.sources = sources
        self.allow_library = allow_library
        self.globals: dict[str, Global] = {}
        self.members: dict[str, list[tuple[ir.EnumType, int]]] = {}
        self.types: dict[str, ir.Type] = dict(ir.SCALARS)
        self.consts: dict[str, ir.Const] = {}
        self.params: dict[str, ir.ParamDecl] = {}
        self.fields: dict[str, ir.FieldDecl] = {}
        self.shared: dict[str, ir.FieldDecl] = {}
        self.builtins: dict[str, ir.Builtin] = {}
        self.tensors: dict[str, ir.Tensor] = {}
        self.pools: dict[str, ir.Pool] = {}
        self.fn_sigs: dict[str, tuple[tuple[ir.FnParam, ...], ir.Type]] = {}
        self.call_graph: dict[str, set[str]] = {}
        self.used_globals: set[str] = set()
        self.rejected: set[str] = set()  # global names refused (reserved): their uses are not errors again
        self.procs: dict = {}  # name -> ProcSig (procs.py)
        self.said_in_procs: set = set()  # (loc, message) of errors in procs' bodies, said once
        self.proc_names_ok: dict[str, bool] = {}  # proc -> whether its body's names are all known (procs.py)
        # The uses of procs whose bodies are being checked: (proc, where, its locals' fresh names -> written)
        self.inline_stack: list[tuple[str, Loc, dict]] = []
        self.proc_uses = 0

    def error(self, loc: Loc, message: str) -> None:
        if self.inline_stack:
            self._in_proc_error(loc, message)
        else:
            self.sink.error(loc, message)

    def check(self, modules: list[A.Module]) -> ir.Program:
        main = modules[-1]
        self.main_file = main.file  # only it may declare a companion (check_tooling.py)
        items = [item for m in modules for item in m.items]
        # A headerless file with declarations and no `done when` is a library (only
        # when checked on its own); one with `done when` has forgotten its header.
        looks_like_library = bool(main.items) and not any(isinstance(i, A.DoneDecl) for i in main.items)
        library = self.allow_library and main.pipeline is None and looks_like_library
        if main.pipeline is None and not library:
            if looks_like_library:
                why = (" (this file is a library other files import: `xlgen check` it, and build the "
                       "pipeline that imports it)")
            else:
                why = "" if main.items else " (this file declares nothing)"
            self.error(Loc(main.file, 1, 1), f"the main file must start with 'pipeline NAME'{why}")
        self._declare(items)
        for item in items:
            if isinstance(item, A.EnumDecl):
                self._enum(item)
        for item in self._constants_in_order(items):
            if isinstance(item, A.Const):
                self._const(item)
            else:
                self._param(item)
        for item in items:
            if isinstance(item, A.StateBlock):
                for f in item.fields:
                    self._field(f, item.kind)
            elif isinstance(item, A.BuiltinDecl):
                self._builtin(item)
            elif isinstance(item, A.TensorDecl):
                self._tensor(item)
            elif isinstance(item, A.FnDecl):
                self._fn_signature(item)
            elif isinstance(item, A.ProcDecl):
                self._proc_signature(item)
        for item in items:  # after every field: a pool names its owner, a shared field
            if isinstance(item, A.PoolDecl):
                self._pool(item)
        functions = [self._function(item) for item in items if isinstance(item, A.FnDecl)]
        stage_nodes = [item for item in items if isinstance(item, A.StageDecl)]
        stages = [self._stage(node, i) for i, node in enumerate(stage_nodes)]
        traces = self._traces([i for i in items if isinstance(i, A.TraceDecl)], stages)
        done = self._done([i for i in items if isinstance(i, A.DoneDecl)], main)
        tooling = check_tooling(self, items, stages, traces)  # output, progress, metric, companion
        ordered = self._order_functions(functions)
        if not stages and main.pipeline is not None:
            self.sink.warning(Loc(main.file, 1, 1), f"pipeline '{main.pipeline}' declares no stages")
        if main.pipeline is not None:  # without the whole pipeline, "never used" means nothing
            self._unused_warnings(items)
            self._unused_procs(items)
        return ir.Program(
            name=main.pipeline or "pipeline",
            library=library,
            main_file=main.file,
            consts=dict(self.consts),
            params=tuple(self.params.values()),
            enums=tuple(t for t in self.types.values() if isinstance(t, ir.EnumType)),
            request_fields=tuple(self.fields.values()),
            shared_fields=tuple(self.shared.values()),
            builtins=dict(self.builtins),
            functions=tuple(ordered),
            stages=tuple(stages),
            traces=tuple(traces),
            done=done,
            sources=self.sources,
            tensors=tuple(self.tensors.values()),
            pools=tuple(self.pools.values()),
            tooling=tooling,
        )
