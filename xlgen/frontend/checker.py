"""AST -> typed IR. Resolves names, checks types, folds constants, and collects
every error (never stopping at the first) as `file:line:col` diagnostics.

Entry point: `load_program(path)` (reads the file and its imports) or
`check_modules(modules, sources)`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import ast as A
from ..core import ir
from ..core.diagnostics import CompileError, DiagnosticSink, Loc, did_you_mean
from ..core.files import FileProblem, read_source_bytes
from ..core.ir import BOOL, F32, I32, U32
from .check_tooling import check_tooling
from .parser import KEYWORDS, ParseFailure, parse_text
from ..semantics.py_ops import evaluate_const
from ..core.resources import runtime_dir
from ..semantics import ops

PRELUDE_NAME = "<prelude>"
MAX_LOOP_TRIP = 1 << 20  # a bound this large is almost certainly a mistake
# Longest chain of function calls (f calls g calls h ...). The simulator runs a call as a Python
# call and the GPU inlines it; a chain this long is a generated program gone wrong.
MAX_CALL_DEPTH = 100
RESERVED = {"req_id", "min", "max", "abs", "clamp", "sqrt"} | set(ir.SCALARS)
# KEYWORDS (the grammar's): the LALR lexer reads some of them as names in some
# positions (`request { flags: F }` parses, a second field named `flags` does
# not), so the checker rejects them as names everywhere, for one consistent rule.

ARITH_OPS = {"+", "-", "*", "/", "%"}
BIT_OPS = {"&", "|", "^"}
SHIFT_OPS = {"<<", ">>"}
ORDER_OPS = {"<", "<=", ">", ">="}
EQ_OPS = {"==", "!="}
LOGIC_OPS = {"&&", "||"}
MAX_TENSOR_ELEMENTS = 1 << 28  # 1 GiB of f32: more is a mistake in a declaration
# Reductions (`let x = sum(j in 0..n: e)`): the element types each takes, and the result's
# type (None: the element's).
REDUCE_TYPES = {"sum": ((I32, U32, F32), None), "max": ((I32, U32, F32), None), "min": ((I32, U32, F32), None),
                "argmax": ((I32, U32, F32), I32), "argmin": ((I32, U32, F32), I32)}
assert set(REDUCE_TYPES) == set(ir.REDUCE_OPS)
INTRINSIC_ARITY = {"min": 2, "max": 2, "abs": 1, "clamp": 3, "sqrt": 1}
# Collectives (`let x = scan(e)` at the top level of a collective stage): the types a
# contribution may have, and the result's type (None: the contribution's).
COLLECTIVE_TYPES = {
    "scan": ((I32, U32), None), "sum": ((I32, U32), None), "count": ((BOOL,), I32),
    "min_of": ((I32, U32, F32), None), "max_of": ((I32, U32, F32), None),
    "argmin": ((I32, U32, F32), I32), "argmax": ((I32, U32, F32), I32),
}
assert set(COLLECTIVE_TYPES) == set(ir.COLLECTIVE_OPS)


# ---- loading files ------------------------------------------------------------------


def read_source(path: Path, sink: DiagnosticSink, sources: dict, at: Loc | None) -> str | None:
    name = str(path)
    where = at or Loc(name, 0, 0)
    try:
        data = read_source_bytes(path)
    except FileProblem as problem:
        sink.error(where, problem.message)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        sources[name] = before + "\n"
        sink.error(Loc(name, line, col), f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x})")
        return None
    sources[name] = text
    return text


def load_modules(path: str | Path) -> tuple[list[A.Module], dict[str, str], DiagnosticSink]:
    """Parse the prelude, the main file and everything it imports (imports first)."""
    sink = DiagnosticSink()
    sources: dict[str, str] = {}
    modules: list[A.Module] = []
    prelude_text = (runtime_dir() / "prelude.xl").read_text()
    sources[PRELUDE_NAME] = prelude_text
    modules.append(parse_text(prelude_text, PRELUDE_NAME))

    done: set[Path] = set()
    # Depth first without Python recursion (an import chain may be thousands of files long):
    # one frame per file being loaded, holding the imports it has left to visit.
    frames: list[tuple[Path, Path, A.Module, object]] = []
    active: set[Path] = set()

    def enter(p: Path, at: Loc | None) -> None:
        p = _resolved(p)
        if p in active:
            path = [f[0] for f in frames]
            cycle = " -> ".join(str(_display(q)) for q in path[path.index(p):] + [p])
            sink.error(at, f"import cycle: {cycle}")
            return
        if p in done:
            return
        shown = _display(p)
        text = read_source(Path(shown) if not Path(shown).is_absolute() else p, sink, sources, at)
        if text is None:
            return
        try:
            module = parse_text(text, str(shown))
        except ParseFailure as failure:
            sink.items.append(failure.diagnostic)
            done.add(p)
            return
        frames.append((p, shown, module, iter([i for i in module.items if isinstance(i, A.Import)])))
        active.add(p)

    enter(Path(path), None)
    while frames:
        p, shown, module, imports = frames[-1]
        item = next(imports, None)
        if item is not None:
            enter(p.parent / item.path, item.loc)
            continue
        frames.pop()
        active.discard(p)
        if frames and module.pipeline is not None:
            sink.error(module.loc, f"imported file '{shown}' must not declare 'pipeline'")
        done.add(p)
        modules.append(module)
    return modules, sources, sink


def _resolved(p: Path) -> Path:
    """`p` with links resolved where they resolve; as given when it cannot be (missing, a link loop)."""
    try:
        return Path(os.path.realpath(p)) if p.exists() else p
    except (OSError, ValueError):  # ValueError: a NUL character in an import path
        return p


def _display(p: Path) -> Path:
    """Paths in diagnostics: relative to the working directory when below it."""
    try:
        return Path(os.path.realpath(p)).relative_to(os.path.realpath(Path.cwd()))
    except (ValueError, OSError):
        return p


def load_program(path: str | Path, allow_library: bool = False) -> tuple[ir.Program, list]:
    """Read, parse and check a pipeline. Returns (program, warnings); raises CompileError.

    With allow_library, a file without `pipeline NAME` (and without `done when`)
    is checked as a library: a file other pipelines import (`xlgen check` on stages/*.xl).
    """
    modules, sources, sink = load_modules(path)
    if sink.has_errors:
        raise CompileError(sink.items, sources)
    return check_modules(modules, sources, sink, allow_library)


def check_modules(modules: list[A.Module], sources: dict[str, str], sink: DiagnosticSink | None = None,
                  allow_library: bool = False):
    sink = sink or DiagnosticSink()
    program = Checker(sink, sources, allow_library).check(modules)
    if sink.has_errors:
        raise CompileError(sink.items, sources)
    warnings = [d for d in sink.items if d.severity == "warning"]
    return program, warnings


# ---- checking ---------------------------------------------------------------------------


@dataclass
class Global:
    kind: str  # const, param, type, member, field, shared, builtin, fn, stage
    loc: Loc
    node: object = None


@dataclass
class Local:
    type: ir.Type
    loc: Loc
    mutable: bool = True
    used: bool = False
    value_range: tuple[int, int] | None = None  # known (min, max) of a loop variable


@dataclass
class LanesScope:
    """The `lanes for` loop being checked: its variable, where its body's scope starts, and
    the elements its iterations write (array name -> index expressions)."""

    var: str
    scope_depth: int
    loop_depth: int
    writes: dict[str, list] = field(default_factory=dict)


@dataclass
class Context:
    """What the code being checked may touch."""

    kind: str  # "stage", "arbiter", "collective", "fn", "guard", "done", "const", "init"
    ret: ir.Type | None = None
    scopes: list[dict[str, Local]] = field(default_factory=list)
    loop_depth: int = 0
    callees: set[str] = field(default_factory=set)
    # In a collective stage: how each shared field is written ("=" or "+=") and where first.
    shared_modes: dict[str, tuple[str, Loc]] = field(default_factory=dict)
    lanes: LanesScope | None = None  # inside a `lanes for` body
    reduction: str | None = None  # inside a reduction's element expression: its operation

    @property
    def lane_parallel(self) -> bool:
        """Code that runs once per lane (a lanes iteration or a reduction element)."""
        return self.lanes is not None or self.reduction is not None

    @property
    def sees_request(self) -> bool:
        return self.kind in ("stage", "arbiter", "collective", "guard", "done")

    @property
    def at_stage_top(self) -> bool:
        """Directly in a stage body: not inside an `if` or a loop."""
        return len(self.scopes) == 1 and self.loop_depth == 0

    @property
    def is_constant(self) -> bool:
        return self.kind in ("const", "init")

    def lookup(self, name: str) -> Local | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None


def _parse_int(text: str) -> tuple[int | None, bool]:
    """The value of an integer literal (None when it has no digits, as in `0x_`)."""
    unsigned = text.endswith("u")
    body = text[:-1] if unsigned else text
    body = body.replace("_", "")
    base = 16 if body[:2].lower() == "0x" else 10
    digits = body[2:] if base == 16 else body
    if not digits:
        return None, unsigned
    if len(digits.lstrip("0")) > 20:  # far beyond 32 bits (and int() refuses very long strings)
        return 1 << 80, unsigned
    return int(digits, base), unsigned


MAX_FLOAT_DIGITS = 1000


def _float_literal(text: str) -> float | None:
    """The f32 value of a float literal (None: too many digits to round exactly).

    Magnitudes far outside f32 are decided from the exponent alone, so that
    `1e999999999` costs nothing (exact rounding would build a 10**999999999).
    """
    mantissa, _, exp_text = text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    significant = (whole + frac).lstrip("0")
    if not significant:
        return 0.0
    if len(whole) + len(frac) > MAX_FLOAT_DIGITS:
        return None
    exp_digits = exp_text.lstrip("+-").lstrip("0")
    if len(exp_digits) > 6:
        return math.inf if not exp_text.startswith("-") else 0.0
    exp = int(exp_text) if exp_text else 0
    whole_digits = whole.lstrip("0")
    if whole_digits:
        order = len(whole_digits) - 1 + exp  # the value is about 10**order
    else:
        order = exp - (len(frac) - len(frac.lstrip("0")) + 1)
    if order > 39:  # f32's largest finite value is about 3.4e38
        return math.inf
    if order < -46:  # below half the smallest subnormal (about 1.4e-45): rounds to zero
        return 0.0
    return ops.decimal_to_f32(text)


def _short(text: str) -> str:
    """A literal as quoted in a message (very long ones abbreviated)."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]}"


def _reserved(name: str) -> str | None:
    """Why `name` cannot be declared, or None."""
    if name.startswith("xl_"):
        return "names starting with 'xl_' are reserved for generated code"
    if name in KEYWORDS:
        return f"'{name}' is a keyword and cannot be used as a name"
    if name in RESERVED:
        return f"'{name}' is a reserved name"
    return None


def _flexible_int(node: A.Node) -> bool:
    """An unsuffixed integer literal (maybe negated): it takes i32 or u32 from context."""
    if isinstance(node, A.IntLit):
        return not node.text.endswith("u")
    if isinstance(node, A.Unary) and node.op == "-":
        return _flexible_int(node.operand)
    return False


class Checker:
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
        self.fn_sigs: dict[str, tuple[tuple[ir.FnParam, ...], ir.Type]] = {}
        self.call_graph: dict[str, set[str]] = {}
        self.used_globals: set[str] = set()
        self.rejected: set[str] = set()  # global names refused (reserved): their uses are not errors again

    def error(self, loc: Loc, message: str) -> None:
        self.sink.error(loc, message)

    # ---- top level -----------------------------------------------------------------

    def check(self, modules: list[A.Module]) -> ir.Program:
        main = modules[-1]
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
            tooling=tooling,
        )

    def _declare(self, items) -> None:
        def add(name: str, kind: str, loc: Loc, node=None) -> None:
            why = _reserved(name)
            if why is None and name in COLLECTIVE_TYPES and kind in ("function", "builtin"):  # calls mean the collective
                why = f"'{name}' is a collective operation; a function cannot have its name"
            if why is not None:
                self.error(loc, why)
                self.rejected.add(name)
                return
            prev = self.globals.get(name)
            if prev is not None:
                self.error(loc, f"'{name}' is already defined (as a {prev.kind} at {prev.loc})")
                return
            self.globals[name] = Global(kind, loc, node)

        for item in items:
            if isinstance(item, A.Const):
                add(item.name, "const", item.loc, item)
            elif isinstance(item, A.Param):
                add(item.name, "param", item.loc, item)
            elif isinstance(item, A.EnumDecl):
                add(item.name, "flags" if item.is_flags else "enum", item.loc, item)
            elif isinstance(item, A.StateBlock):
                for f in item.fields:
                    add(f.name, "request field" if item.kind == "request" else "shared field", f.loc, f)
            elif isinstance(item, A.BuiltinDecl):
                add(item.name, "builtin", item.loc, item)
            elif isinstance(item, A.TensorDecl):
                add(item.name, "tensor", item.loc, item)
            elif isinstance(item, A.FnDecl):
                add(item.name, "function", item.loc, item)
            elif isinstance(item, A.StageDecl):
                add(item.name, "stage", item.loc, item)

    def _enum(self, node: A.EnumDecl) -> None:
        names = []
        for m in node.members:
            if m.name in names:
                self.error(m.loc, f"duplicate member '{m.name}' in {node.name}")
                continue
            why = _reserved(m.name)
            if why is not None:
                self.error(m.loc, why)
                continue
            if m.name in self.globals and self.globals[m.name].kind != "member":
                g = self.globals[m.name]
                self.error(m.loc, f"member '{m.name}' clashes with the {g.kind} defined at {g.loc}")
                continue
            names.append(m.name)
        if node.is_flags and len(names) > 32:
            self.error(node.loc, f"flag set {node.name} has {len(names)} members; at most 32 fit in a u32")
        if not node.members:  # (the grammar needs one; members rejected above are reported already)
            self.error(node.loc, f"{'flag set' if node.is_flags else 'enum'} {node.name} has no members")
        t = ir.EnumType(node.name, tuple(names), node.is_flags)
        if node.name in self.globals and self.globals[node.name].node is node:
            self.types[node.name] = t
        for i, name in enumerate(names):
            self.members.setdefault(name, []).append((t, i))

    def _resolve_type(self, ref: A.TypeRef, allow_open: bool = False, allow_array: bool = True):
        base = self.types.get(ref.name)
        if base is None:
            candidates = list(self.types)
            self.error(ref.loc, f"unknown type '{ref.name}'{did_you_mean(ref.name, candidates)}")
            return None
        if ref.open_array:
            if not allow_open:
                self.error(ref.loc, "arrays of unspecified length ('T[]') are only allowed as builtin parameters")
                return None
            return ir.ArrayType(base, None)
        if ref.length is None:
            return base
        if not allow_array:
            self.error(ref.loc, "an array type is not allowed here (only fields and function parameters are arrays)")
            return None
        n = self._const_int(ref.length, "array length")
        if n is None:
            return None
        if n <= 0:
            self.error(ref.length.loc, f"array length must be positive, not {n}")
            return None
        if n > 1 << 16:
            self.error(ref.length.loc, f"array length {n} is larger than the limit of 65536")
            return None
        return ir.ArrayType(base, n)

    def _const_int(self, node: A.Node, what: str) -> int | None:
        e = self.expr(node, Context("const"), I32)
        if e is None:
            return None
        if not isinstance(e, ir.Const):
            self.error(node.loc, _not_constant(e, f"{what}"))
            return None
        if not ir.is_int(e.type):
            self.error(node.loc, f"{what} must be an integer, not {e.type}")
            return None
        return int(e.value)

    def _const(self, node: A.Const) -> None:
        t = self._resolve_type(node.type, allow_array=False)
        e = self.expr(node.value, Context("const"), t)
        if t is None or e is None:
            return
        if not isinstance(e, ir.Const):
            self.error(node.value.loc, _not_constant(e, f"the value of const '{node.name}'"))
            return
        if not self._same(t, e.type, node.value.loc, f"const '{node.name}'"):
            return
        if self.globals.get(node.name, Global("", node.loc)).node is node:  # not a duplicate
            self.consts[node.name] = ir.Const(e.value, t, node.loc, node.name)

    def _constants_in_order(self, items) -> list:
        """Consts and params, each after the consts its value uses (a const may be used before
        the line that declares it). A cycle is an error; its consts are left undefined."""
        decls = [i for i in items if isinstance(i, (A.Const, A.Param))]
        consts = {i.name: i for i in decls if isinstance(i, A.Const) and self.globals.get(i.name)
                  and self.globals[i.name].node is i}
        order, state = [], {}
        for root in decls:
            if state.get(id(root)):
                continue
            stack = [(root, iter(sorted(_names_in(root.value) & set(consts))))]
            state[id(root)] = "active"
            path = [root]
            while stack:
                node, deps = stack[-1]
                dep = next(deps, None)
                if dep is None:
                    stack.pop()
                    path.pop()
                    state[id(node)] = "done"
                    order.append(node)
                    continue
                target = consts[dep]
                if state.get(id(target)) == "active":
                    cycle = [n.name for n in path[path.index(target):]] + [dep]
                    self.error(target.loc, f"const '{dep}' is defined in terms of itself: {' -> '.join(cycle)}")
                    for n in path[path.index(target):]:
                        state[id(n)] = "cyclic"
                    continue
                if state.get(id(target)):
                    continue
                state[id(target)] = "active"
                path.append(target)
                stack.append((target, iter(sorted(_names_in(target.value) & set(consts)))))
        return [n for n in order if state.get(id(n)) != "cyclic"]

    def _param(self, node: A.Param) -> None:
        t = self._resolve_type(node.type, allow_array=False)
        e = self.expr(node.value, Context("const"), t)
        if t is None or e is None:
            return
        if not isinstance(e, ir.Const):
            self.error(node.value.loc, _not_constant(e, f"the default of param '{node.name}'"))
            return
        registered = self.globals.get(node.name, Global("", node.loc)).node is node  # not a duplicate
        if self._same(t, e.type, node.value.loc, f"param '{node.name}'") and registered:
            self.params[node.name] = ir.ParamDecl(node.name, t, e.value, node.loc)

    def _field(self, node: A.Field, kind: str) -> None:
        if self.globals.get(node.name, Global("", node.loc)).node is not node:
            return  # a duplicate, already reported
        t = self._resolve_type(node.type)
        if t is None:
            return
        init = None
        if node.init is not None:
            elem = t.elem if isinstance(t, ir.ArrayType) else t
            init = self.expr(node.init, Context("init"), elem)
            if init is None:
                return
            self._same(elem, init.type, node.init.loc, f"the initial value of '{node.name}'")
            if not isinstance(init, ir.Const) and not _mentions_params(init):
                # Folding left it alone, so evaluating it fails: say why now, not at launch.
                self.error(node.init.loc, _not_constant(init, f"the initial value of '{node.name}'"))
                return
        decl = ir.FieldDecl(node.name, t, init, node.loc)
        (self.fields if kind == "request" else self.shared)[node.name] = decl

    def _tensor(self, node: A.TensorDecl) -> None:
        if self.globals.get(node.name, Global("", node.loc)).node is not node:
            return  # a duplicate, already reported
        if node.elem != "f32":
            self.error(node.loc, f"tensor '{node.name}' holds {node.elem}; tensors hold f32")
            return
        dims = [self._const_int(d, "a tensor dimension") for d in node.dims]
        if any(d is None for d in dims):
            return
        for d, ref in zip(dims, node.dims):
            if d <= 0:
                self.error(ref.loc, f"a tensor dimension must be positive, not {d}")
                return
        t = ir.Tensor(node.name, F32, tuple(dims), node.loc)
        if t.size > MAX_TENSOR_ELEMENTS:
            self.error(node.loc, f"tensor '{node.name}' has {t.size} elements; the limit is {MAX_TENSOR_ELEMENTS}")
            return
        self.tensors[node.name] = t

    def _params(self, params, allow_open: bool):
        out = []
        seen = set()
        for p in params:
            if p.name in seen:
                self.error(p.loc, f"duplicate parameter '{p.name}'")
            seen.add(p.name)
            t = self._resolve_type(p.type, allow_open=allow_open)
            out.append(ir.FnParam(p.name, t))
        return tuple(out)

    def _builtin(self, node: A.BuiltinDecl) -> None:
        if node.loc.file != PRELUDE_NAME:
            # Every backend implements each builtin (runtime/builtins.py, xl_runtime.cuh); a
            # declaration elsewhere would check, then fail when the generated code runs.
            self.error(node.loc, f"builtin '{node.name}' is not in the prelude; builtins are declared in "
                                 "xlgen/runtime/prelude.xl and implemented by every backend")
        params = self._params(node.params, allow_open=True)
        ret = self._resolve_type(node.ret, allow_array=False) if node.ret else None
        self.builtins[node.name] = ir.Builtin(node.name, params, ret, node.warp, node.loc)

    def _fn_signature(self, node: A.FnDecl) -> None:
        params = self._params(node.params, allow_open=False)
        ret = self._resolve_type(node.ret, allow_array=False)
        self.fn_sigs[node.name] = (params, ret)

    def _function(self, node: A.FnDecl) -> ir.Function:
        params, ret = self.fn_sigs[node.name]
        ctx = Context("fn", ret=ret)
        scope = {}
        for p, a in zip(params, node.params):
            scope[p.name] = Local(p.type, a.loc, mutable=False, used=True)  # type None: already reported
            self._check_local_name(p.name, a.loc)
        ctx.scopes.append(scope)
        body = self.block(node.body, ctx)
        self._pop_scope(ctx)
        if ret is not None and not _always_returns(node.body):
            self.error(node.loc, f"function '{node.name}' may end without returning a value")
        self.call_graph[node.name] = ctx.callees
        return ir.Function(node.name, params, ret, body, node.loc)

    def _stage(self, node: A.StageDecl, index: int) -> ir.Stage:
        guard = None
        if node.guard is not None:
            guard = self.expr(node.guard, Context("guard"), BOOL)
            if guard is not None and guard.type != BOOL:
                self.error(node.guard.loc, f"a stage guard must be bool, not {guard.type}")
        ctx = Context(node.kind)
        ctx.scopes.append({})
        body = self.block(node.body, ctx)
        self._pop_scope(ctx)
        self.call_graph[f"stage {node.name}"] = ctx.callees
        return ir.Stage(node.name, node.kind, guard, body, index, node.loc)

    def _traces(self, nodes: list[A.TraceDecl], stages: list[ir.Stage]) -> list[ir.Trace]:
        out = []
        seen: dict[str, Loc] = {}
        stage_names = [s.name for s in stages]
        for node in nodes:
            if node.stage not in stage_names:
                self.error(node.loc, f"trace of unknown stage '{node.stage}'{did_you_mean(node.stage, stage_names)}")
                continue
            if node.stage in seen:
                self.error(node.loc, f"stage '{node.stage}' is already traced (at {seen[node.stage]})")
                continue
            seen[node.stage] = node.loc
            names = []
            for ident in node.fields:
                if ident.name not in self.fields:
                    hint = did_you_mean(ident.name, self.fields)
                    self.error(ident.loc, f"'{ident.name}' is not a request field{hint}")
                elif ident.name in names:
                    self.error(ident.loc, f"field '{ident.name}' is listed twice")
                else:
                    names.append(ident.name)
                    self.used_globals.add(ident.name)
            out.append(ir.Trace(node.stage, tuple(names), len(out), node.loc))
        return out

    def _header_loc(self, main: A.Module) -> Loc:
        """Where `pipeline NAME` is written (the module keeps no location for it; line 1 may be a comment)."""
        for number, line in enumerate(self.sources.get(main.file, "").split("\n"), 1):
            stripped = line.lstrip()
            if stripped.startswith("pipeline") and stripped[8:9] in (" ", "\t"):
                return Loc(main.file, number, len(line) - len(stripped) + 1)
        return Loc(main.file, 1, 1)

    def _done(self, nodes: list[A.DoneDecl], main: A.Module) -> ir.Expr:
        if not nodes:
            if main.pipeline is not None:
                self.error(self._header_loc(main), f"pipeline '{main.pipeline}' has no 'done when' condition")
            return ir.Const(False, BOOL)
        for extra in nodes[1:]:
            self.error(extra.loc, f"'done when' is declared twice (first at {nodes[0].loc})")
        cond = self.expr(nodes[0].cond, Context("done"), BOOL)
        if cond is not None and cond.type != BOOL:
            self.error(nodes[0].cond.loc, f"'done when' needs a bool condition, not {cond.type}")
        return cond if cond is not None else ir.Const(False, BOOL)

    def _order_functions(self, functions: list[ir.Function]) -> list[ir.Function]:
        by_name = {f.name: f for f in functions}
        order: list[ir.Function] = []
        state: dict[str, str] = {}

        # Depth first over the call graph with an explicit stack (a call chain may be thousands
        # of functions long): each frame is a function and the callees it has left to visit.
        for f in functions:
            if state.get(f.name):
                continue
            state[f.name] = "active"
            stack = [(f.name, iter(sorted(self.call_graph.get(f.name, ()))))]
            while stack:
                name, callees = stack[-1]
                callee = next(callees, None)
                if callee is None:
                    stack.pop()
                    state[name] = "done"
                    order.append(by_name[name])
                elif callee not in by_name or state.get(callee) == "done":
                    continue
                elif state.get(callee) == "active":
                    path = [frame[0] for frame in stack]
                    cycle = path[path.index(callee):] + [callee]
                    self.error(by_name[callee].loc, "recursion is not allowed: " + " -> ".join(cycle))
                else:
                    state[callee] = "active"
                    stack.append((callee, iter(sorted(self.call_graph.get(callee, ())))))
        depth: dict[str, int] = {}  # callees come first in `order`
        for f in order:
            depth[f.name] = 1 + max((depth.get(c, 0) for c in self.call_graph.get(f.name, ()) if c in by_name),
                                    default=0)
            if depth[f.name] == MAX_CALL_DEPTH + 1:
                self.error(f.loc, f"function calls nest too deep: '{f.name}' starts a chain of more than "
                                  f"{MAX_CALL_DEPTH} functions, each calling the next; the limit is "
                                  f"{MAX_CALL_DEPTH}")
        return order

    def _unused_warnings(self, items) -> None:
        called = set().union(*self.call_graph.values()) if self.call_graph else set()
        for item in items:
            if isinstance(item, A.FnDecl) and item.name not in called:
                self.sink.warning(item.loc, f"function '{item.name}' is never called")
            elif isinstance(item, A.StateBlock):
                for f in item.fields:
                    registered = self.globals.get(f.name)
                    if registered is None or registered.node is not f:
                        continue  # a duplicate (or reserved) name, already reported
                    if f.name not in self.used_globals and f.loc.file != PRELUDE_NAME:
                        self.sink.warning(f.loc, f"field '{f.name}' is never used")

    # ---- statements --------------------------------------------------------------------

    def block(self, stmts, ctx: Context, new_scope: bool = False) -> tuple[ir.Stmt, ...]:
        if new_scope:
            ctx.scopes.append({})
        out = []
        ended = None
        for s in stmts:
            if ended is not None:
                self.sink.warning(s.loc, f"unreachable code after '{ended}'")
                ended = "warned"
            r = self.stmt(s, ctx)
            if r is not None:
                out.append(r)
            if ended is None and isinstance(s, (A.Return, A.Break, A.Continue)):
                ended = {A.Return: "return", A.Break: "break", A.Continue: "continue"}[type(s)]
        if new_scope:
            self._pop_scope(ctx)
        return tuple(out)

    def _pop_scope(self, ctx: Context) -> None:
        for name, local in ctx.scopes.pop().items():
            if not local.used and not name.startswith("_"):
                self.sink.warning(local.loc, f"unused variable '{name}'")

    def _check_local_name(self, name: str, loc: Loc, ctx: Context | None = None) -> bool:
        why = _reserved(name)
        if why is not None:
            self.error(loc, why)
            return False
        g = self.globals.get(name)
        if g is not None:
            self.error(loc, f"'{name}' shadows the {g.kind} defined at {g.loc}")
            return False
        if name in self.members:
            self.error(loc, f"'{name}' shadows an enum member")
            return False
        if ctx is not None and ctx.lookup(name) is not None:
            self.error(loc, f"'{name}' is already defined at {ctx.lookup(name).loc}")
            return False
        return True

    def stmt(self, s: A.Node, ctx: Context):
        method = getattr(self, "stmt_" + type(s).__name__)
        return method(s, ctx)

    def stmt_Let(self, s: A.Let, ctx: Context):
        declared = self._resolve_type(s.type, allow_array=False) if s.type else None
        if isinstance(s.value, A.Call) and s.value.func in COLLECTIVE_TYPES and ctx.kind == "collective" \
                and ctx.at_stage_top:
            return self._collective_let(s, ctx, declared)
        if isinstance(s.value, A.Reduction):
            return self._reduction_let(s, ctx, declared)
        value = self.expr(s.value, ctx, declared)
        ok = self._check_local_name(s.name, s.loc, ctx)
        if value is not None and isinstance(value.type, ir.ArrayType):
            self.error(s.value.loc, "local variables hold scalars; arrays live in request or shared state")
            value = None
        elif value is not None and declared is not None and not self._same(declared, value.type, s.value.loc,
                                                                           f"'{s.name}'"):
            value = None
        if value is None or not ok:
            known = declared if declared is not None else (value.type if value is not None else None)
            self._declare_quietly(ctx, s.name, s.loc, known)
            return None
        t = declared or value.type
        ctx.scopes[-1][s.name] = Local(t, s.loc)
        return ir.Let(s.name, t, value, s.loc)

    def _collective_let(self, s: A.Let, ctx: Context, declared) -> ir.Collective | None:
        """`let x = op(e)` in a collective stage: e is this request's contribution."""
        op = s.value.func
        allowed, result = COLLECTIVE_TYPES[op]
        ok = self._check_local_name(s.name, s.loc, ctx)
        value = None
        if len(s.value.args) != 1:
            self.error(s.value.loc, f"'{op}' takes 1 argument (this request's contribution), not {len(s.value.args)}")
        else:
            arg = s.value.args[0]
            value = self.expr(arg, ctx, declared if result is None else None)
            if value is not None and value.type not in allowed:
                why = " (a float sum would depend on the order of additions)" if value.type == F32 else ""
                kinds = ", ".join(str(t) for t in allowed)
                self.error(arg.loc, f"'{op}' takes {kinds}, not {value.type}{why}")
                value = None
        t = (result or value.type) if value is not None else None
        if t is not None and declared is not None and not self._same(declared, t, s.value.loc, f"'{s.name}'"):
            value = None
        if value is None or not ok:
            self._declare_quietly(ctx, s.name, s.loc, declared or t)
            return None
        ctx.scopes[-1][s.name] = Local(t, s.loc)
        return ir.Collective(s.name, op, value, t, s.loc)

    def _reduction_let(self, s: A.Let, ctx: Context, declared) -> ir.Reduce | None:
        """`let x = op(j in a..b: e)` in a per-request stage: the warp reduces e over j."""
        r = s.value
        allowed, result = REDUCE_TYPES[r.op] if r.op in REDUCE_TYPES else ((), None)
        ok = r.op in REDUCE_TYPES
        if not ok:
            self.error(r.loc, f"unknown reduction '{r.op}'{did_you_mean(r.op, list(REDUCE_TYPES))}; "
                              f"reductions are {', '.join(ir.REDUCE_OPS)}")
        elif not self._lane_place(ctx, r.loc, f"a reduction ('{r.op}')", inside_lanes=True):
            ok = False
        start, stop, scope = self._range(r.var, r.start, r.stop, r.loc, ctx)
        ctx.scopes.append(scope)
        outer, ctx.reduction = ctx.reduction, r.op
        value = self.expr(r.value, ctx, declared if result is None else None)
        ctx.reduction = outer
        self._pop_scope(ctx)
        if value is not None and ok and value.type not in allowed:
            self.error(r.value.loc, f"'{r.op}' reduces i32, u32 or f32 values, not {value.type}")
            value = None
        name_ok = self._check_local_name(s.name, s.loc, ctx)
        t = (result or value.type) if value is not None else None
        if t is not None and declared is not None and not self._same(declared, t, r.loc, f"'{s.name}'"):
            value = None
        if value is None or not ok or not name_ok or start is None or stop is None:
            self._declare_quietly(ctx, s.name, s.loc, declared or t)
            return None
        ctx.scopes[-1][s.name] = Local(t, s.loc)
        return ir.Reduce(s.name, r.op, r.var, start, stop, value, t, s.loc)

    def _lane_place(self, ctx: Context, loc: Loc, what: str, inside_lanes: bool = False) -> bool:
        """Lane-parallel code runs on the request's warp: only in per-request stages, and not
        inside other lane-parallel code (except a reduction in a lanes loop's iteration:
        the warp then runs the iterations one after another, its lanes sharing each
        reduction)."""
        if ctx.kind != "stage":
            where = {"fn": "a function", "arbiter": "an arbiter", "collective": "a collective stage"}.get(
                ctx.kind, "this place")
            self.error(loc, f"{what} runs on the request's warp: it is allowed in per-request stages, not in {where}")
            return False
        if ctx.reduction is not None or (ctx.lanes is not None and not inside_lanes):
            inner = "a reduction" if ctx.reduction is not None else "a lanes loop"
            self.error(loc, f"{what} cannot be nested inside {inner}")
            return False
        return True

    def _range(self, var: str, start_node, stop_node, loc: Loc, ctx: Context):
        """The bounds (i32, evaluated once) and the scope holding the index variable of a
        lanes loop or a reduction."""
        start, stop = (self.expr(n, ctx, I32) for n in (start_node, stop_node))
        for e, n in ((start, start_node), (stop, stop_node)):
            if e is not None and e.type != I32:
                self.error(n.loc, f"a range bound must be i32, not {e.type}")
        start = start if start is not None and start.type == I32 else None
        stop = stop if stop is not None and stop.type == I32 else None
        scope = {}
        if self._check_local_name(var, loc, ctx):
            rng = None
            if isinstance(start, ir.Const) and isinstance(stop, ir.Const):
                rng = (start.value, stop.value - 1)
            scope[var] = Local(I32, loc, mutable=False, value_range=rng, used=True)
        return start, stop, scope

    def stmt_Lanes(self, s: A.Lanes, ctx: Context):
        placed = self._lane_place(ctx, s.loc, "a lanes loop")
        start, stop, scope = self._range(s.var, s.start, s.stop, s.loc, ctx)
        ctx.scopes.append(scope)
        lanes = LanesScope(s.var, len(ctx.scopes), ctx.loop_depth)
        outer, ctx.lanes = ctx.lanes, lanes
        body = self.block(s.body, ctx)
        ctx.lanes = outer
        self._pop_scope(ctx)
        if not placed or start is None or stop is None:
            return None
        for load in _loads_in(body):
            written = lanes.writes.get(load.base.name)
            if written is not None and load.index not in written:
                self.error(load.loc, f"this iteration reads '{load.base.name}' at an index the loop does not write "
                                     f"it at; another iteration may write that element (read an element only where "
                                     f"this iteration writes it)")
        return ir.Lanes(s.var, start, stop, body, s.loc)

    def _lanes_write(self, s: A.Assign, ctx: Context, target: ir.Var, index) -> bool:
        """In a lanes loop an iteration writes its own locals and array elements no other
        iteration writes: at `i + k`, `k + i`, `i - k` or `c * i + k` with c odd (k the same in
        every iteration), which is one-to-one in i (odd c is invertible modulo 2^32)."""
        lanes = ctx.lanes
        if target.kind == ir.LOCAL:
            for depth, scope in enumerate(ctx.scopes):
                if target.name in scope:
                    if depth + 1 < lanes.scope_depth:
                        self.error(s.loc, f"a lanes loop's iteration cannot assign '{target.name}', declared outside "
                                          f"the loop (iterations are independent; write an array element instead)")
                        return False
            return True
        if index is None:
            self.error(s.loc, f"a lanes loop's iteration cannot assign '{target.name}' (every iteration would "
                              f"write it); write elements of an array at '{lanes.var}' instead")
            return False
        inner = {name for scope in ctx.scopes[lanes.scope_depth - 1:] for name in scope}
        if not _distinct_per_iteration(index, lanes.var, inner):
            self.error(s.index.loc, f"a lanes loop writes '{target.name}' at an index that may repeat across "
                                    f"iterations; write it at '{lanes.var}', '{lanes.var} + k' or "
                                    f"'c * {lanes.var} + k' (c odd, k the same in every iteration)")
            return False
        lanes.writes.setdefault(target.name, []).append(index)
        return True

    def _declare_quietly(self, ctx: Context, name: str, loc: Loc, t) -> None:
        """After a rejected declaration, make the name known (type None: unknown) so that
        its uses do not add an 'unknown name' error to the one already reported."""
        if ctx.lookup(name) is None and name not in self.globals and name not in self.members and name != "req_id":
            ctx.scopes[-1][name] = Local(t, loc, used=True)

    def stmt_Assign(self, s: A.Assign, ctx: Context):
        target = self._assign_target(s.target, s.loc, ctx)
        if target is None:
            self.expr(s.value, ctx)
            return None
        index = None
        checked = True
        elem = target.type
        if s.index is not None:
            if not isinstance(target.type, ir.ArrayType):
                self.error(s.loc, f"'{s.target}' is not an array")
                return None
            index, checked = self._index(s.index, target.type, s.target, ctx)
            elem = target.type.elem
            if index is None:
                return None
        elif isinstance(target.type, ir.ArrayType):
            self.error(s.loc, f"'{s.target}' is an array; assign its elements one by one")
            return None
        value = self.expr(s.value, ctx, elem)
        if value is None:
            return None
        if ctx.lanes is not None and not self._lanes_write(s, ctx, target, index):
            return None
        if target.kind == ir.SHARED and ctx.kind == "collective":
            return self._collective_write(s, ctx, target, index, checked, elem, value)
        if s.op != "=":
            op = s.op[:-1]
            current = ir.Load(target, index, elem, checked, s.loc) if index is not None else target
            value = self._binary_typed(op, current, value, s.loc, error_loc=s.value.loc)
            if value is None:
                return None
        if not self._same(elem, value.type, s.value.loc, f"'{s.target}'"):
            return None
        return ir.Assign(target, index, value, checked, s.loc)

    def _collective_write(self, s: A.Assign, ctx: Context, target: ir.Var, index, checked, elem, value):
        """A shared write in a collective stage: `=` claims the element (one writer per
        element per stage), `+=`/`-=` adds to it (integers: the order cannot matter)."""
        if not self._same(elem, value.type, s.value.loc, f"'{s.target}'"):
            return None
        if s.op not in ("=", "+=", "-="):
            self.error(s.loc, f"in a collective stage shared state is written with '=' (one request per element) "
                              f"or summed with '+=' / '-=', not '{s.op}'")
            return None
        mode = "=" if s.op == "=" else "+="
        if mode == "+=" and not ir.is_int(elem):
            self.error(s.loc, f"'{s.op}' on shared state in a collective stage needs i32 or u32, not {elem} "
                              "(a float sum would depend on the order of the requests)")
            return None
        first = ctx.shared_modes.setdefault(s.target, (mode, s.loc))
        if first[0] != mode:
            self.error(s.loc, f"shared field '{s.target}' is both assigned ('=') and summed ('+=', '-=') in this "
                              f"collective stage (first at {first[1]}); use one or the other")
            return None
        if s.op == "=":
            return ir.Assign(target, index, value, checked, s.loc)
        if s.op == "-=":
            value = ir.Unary("-", value, elem, value.loc)
        return ir.Accumulate(target, index, value, checked, s.loc)

    def _assign_target(self, name: str, loc: Loc, ctx: Context) -> ir.Var | None:
        local = ctx.lookup(name)
        if local is not None:
            if local.type is None:  # its declaration was rejected, with an error
                return None
            if not local.mutable:
                what = "loop variable" if local.value_range is not None else "parameter"
                self.error(loc, f"cannot assign to {what} '{name}'")
                return None
            return ir.Var(ir.LOCAL, name, local.type, loc)
        g = self.globals.get(name)
        if g is None and name in self.members:
            self.error(loc, f"cannot assign to enum member '{name}'")
            return None
        if g is None and name == "req_id":
            self.error(loc, "cannot assign to 'req_id'")
            return None
        if g is None and name in self.rejected:
            return None
        if g is None:
            self.error(loc, f"unknown variable '{name}'{did_you_mean(name, self._visible_names(ctx))}")
            return None
        if g.kind == "request field":
            if not ctx.sees_request:
                self.error(loc, f"a function cannot write request field '{name}'; functions are pure")
                return None
            self.used_globals.add(name)
            f = self.fields.get(name)
            return ir.Var(ir.FIELD, name, f.type, loc) if f else None
        if g.kind == "shared field":
            if ctx.kind not in ("arbiter", "collective"):
                self.error(loc, f"shared field '{name}' can only be written in an arbiter or a collective stage")
                return None
            self.used_globals.add(name)
            f = self.shared.get(name)
            return ir.Var(ir.SHARED, name, f.type, loc) if f else None
        self.error(loc, f"cannot assign to {g.kind} '{name}'")
        return None

    def stmt_If(self, s: A.If, ctx: Context):
        arms = []
        for cond_node, body in s.arms:
            cond = self.expr(cond_node, ctx, BOOL)
            if cond is not None and cond.type != BOOL:
                self.error(cond_node.loc, f"an 'if' condition must be bool, not {cond.type}")
            checked_body = self.block(body, ctx, new_scope=True)
            if cond is not None:
                arms.append((cond, checked_body))
        otherwise = self.block(s.otherwise, ctx, new_scope=True) if s.otherwise is not None else ()
        return ir.If(tuple(arms), otherwise, s.loc) if arms else None

    def stmt_For(self, s: A.For, ctx: Context):
        start = self._const_int(s.start, "a loop's start")
        stop = self._const_int(s.stop, "a loop's bound")
        ok = self._check_local_name(s.var, s.loc, ctx)
        if start is not None and stop is not None and stop - start > MAX_LOOP_TRIP:
            self.error(s.stop.loc, f"loop runs {stop - start} times; the limit is {MAX_LOOP_TRIP}")
        scope = {}
        if ok:
            rng = (start, stop - 1) if start is not None and stop is not None else (0, -1)
            scope[s.var] = Local(I32, s.loc, mutable=False, value_range=rng)
        ctx.scopes.append(scope)
        ctx.loop_depth += 1
        body = self.block(s.body, ctx)
        ctx.loop_depth -= 1
        self._pop_scope(ctx)
        if start is None or stop is None:
            return None
        return ir.For(s.var, start, stop, body, s.loc)

    def stmt_Break(self, s: A.Break, ctx: Context):
        if ctx.loop_depth == 0:
            self.error(s.loc, "'break' outside a loop")
            return None
        if ctx.lanes is not None and ctx.loop_depth == ctx.lanes.loop_depth:
            self.error(s.loc, "'break' cannot leave a lanes loop (its iterations are independent)")
            return None
        return ir.Break(s.loc)

    def stmt_Continue(self, s: A.Continue, ctx: Context):
        if ctx.loop_depth == 0:
            self.error(s.loc, "'continue' outside a loop")
            return None
        if ctx.lanes is not None and ctx.loop_depth == ctx.lanes.loop_depth:
            self.error(s.loc, "'continue' in a lanes loop: an iteration ends at its closing brace (use 'if')")
            return None
        return ir.Continue(s.loc)

    def stmt_Return(self, s: A.Return, ctx: Context):
        if ctx.kind != "fn":
            self.error(s.loc, "'return' is only allowed in functions; a stage ends at its closing brace")
            self.expr(s.value, ctx)
            return None
        value = self.expr(s.value, ctx, ctx.ret)
        if value is None or ctx.ret is None:
            return None
        if value.type != ctx.ret:
            hint = f"; convert with 'as {ctx.ret}'" if ir.is_numeric(ctx.ret) and ir.is_numeric(value.type) else ""
            self.error(s.value.loc, f"the function returns {ctx.ret}, but this value is {value.type}{hint}")
            return None
        return ir.Return(value, s.loc)

    def stmt_CallStmt(self, s: A.CallStmt, ctx: Context):
        call = self.expr(s.call, ctx)
        if call is None:
            return None
        if not isinstance(call, ir.Call):
            self.error(s.loc, f"the result of '{s.call.func}' is unused ('{s.call.func}' has no effect on its own)")
            return None
        if call.type is not None and not call.builtin:
            self.sink.warning(s.loc, f"the result of '{call.func}' is discarded")
        return ir.ExprStmt(call, s.loc)

    # ---- expressions ----------------------------------------------------------------

    def expr(self, node: A.Node, ctx: Context, expected: ir.Type | None = None) -> ir.Expr | None:
        """Type-check an expression; `expected` only steers unsuffixed integer literals."""
        method = getattr(self, "expr_" + type(node).__name__)
        result = method(node, ctx, expected)
        return _fold(result) if result is not None else None

    def expr_IntLit(self, node: A.IntLit, ctx, expected, negate: bool = False, loc: Loc | None = None):
        loc = loc or node.loc  # a negated literal: the '-'
        value, unsigned = _parse_int(node.text)
        if value is None:
            self.error(node.loc, f"integer literal {node.text} has no digits")
            return None
        t = U32 if unsigned or expected == U32 else I32
        if negate:
            value = -value
        lo, hi = (0, 0xFFFFFFFF) if t == U32 else (-(1 << 31), (1 << 31) - 1)
        if not lo <= value <= hi:
            if t == I32 and 0 <= value <= 0xFFFFFFFF:
                hint = "; add a 'u' suffix for u32"
            elif t == U32 and value < 0:
                hint = "; a u32 cannot be negative (all bits set is 0xFFFFFFFFu)"
            else:
                hint = ""
            text = ("-" if negate else "") + _short(node.text)
            self.error(loc, f"integer literal {text} does not fit in {t}{hint}")
            return None
        return ir.Const(value, t, loc)

    def expr_FloatLit(self, node: A.FloatLit, ctx, expected):
        value = _float_literal(node.text)
        if value is None:
            self.error(node.loc, f"float literal {_short(node.text)} has more than {MAX_FLOAT_DIGITS} digits")
            return None
        if value in (float("inf"), float("-inf")):
            self.error(node.loc, f"float literal {_short(node.text)} is too large for f32")
            return None
        return ir.Const(value, F32, node.loc)

    def expr_BoolLit(self, node: A.BoolLit, ctx, expected):
        return ir.Const(node.value, BOOL, node.loc)

    def expr_Name(self, node: A.Name, ctx: Context, expected):
        name = node.id
        local = ctx.lookup(name)
        if local is not None:
            local.used = True
            if local.type is None:  # its declaration was rejected, with an error
                return None
            return ir.Var(ir.LOCAL, name, local.type, node.loc)
        if name == "req_id":
            if not ctx.sees_request:
                self.error(node.loc, "'req_id' is only available in stages, guards and 'done when'")
                return None
            return ir.Var(ir.REQ_ID, name, I32, node.loc)
        g = self.globals.get(name)
        if g is None:
            if name in self.members:
                return self._member_by_name(name, node.loc)
            if name in self.rejected:
                return None
            hint = did_you_mean(name, self._visible_names(ctx))
            self.error(node.loc, f"unknown name '{name}'{hint}")
            return None
        self.used_globals.add(name)
        if g.kind == "const":
            c = self.consts.get(name)
            return ir.Const(c.value, c.type, node.loc, name) if c else None
        if g.kind == "param":
            if ctx.kind == "const":
                self.error(node.loc, f"param '{name}' is chosen at launch; it cannot be used in a compile-time constant")
                return None
            p = self.params.get(name)
            return ir.Var(ir.PARAM, name, p.type, node.loc) if p else None
        if g.kind in ("request field", "shared field"):
            if not ctx.sees_request:
                where = {"fn": "a function (functions are pure; pass it as an argument)",
                         "init": "an initial value (initial values may use consts and params)"}.get(
                    ctx.kind, "a constant expression")
                self.error(node.loc, f"{g.kind} '{name}' cannot be read in {where}")
                return None
            table = self.fields if g.kind == "request field" else self.shared
            f = table.get(name)
            kind = ir.FIELD if g.kind == "request field" else ir.SHARED
            return ir.Var(kind, name, f.type, node.loc) if f else None
        if g.kind == "tensor":
            t = self.tensors.get(name)
            shape = ", ".join("i" + str(k) for k in range(len(t.dims))) if t else "..."
            self.error(node.loc, f"tensor '{name}' is read one element at a time: '{name}[{shape}]'")
            return None
        self.error(node.loc, f"{g.kind} '{name}' is not a value")
        return None

    def _member_by_name(self, name: str, loc: Loc):
        options = self.members[name]
        if len(options) > 1:
            owners = ", ".join(f"{t.name}.{name}" for t, _ in options)
            self.error(loc, f"'{name}' is ambiguous; write one of {owners}")
            return None
        t, i = options[0]
        return ir.Const(1 << i if t.is_flags else i, t, loc, name)

    def expr_Member(self, node: A.Member, ctx, expected):
        t = self.types.get(node.base)
        if not isinstance(t, ir.EnumType):
            self.error(node.loc, f"'{node.base}' is not an enum or flag set")
            return None
        if node.member not in t.members:
            self.error(node.loc, f"{t.name} has no member '{node.member}'{did_you_mean(node.member, t.members)}")
            return None
        i = t.members.index(node.member)
        return ir.Const(1 << i if t.is_flags else i, t, node.loc, node.member)

    def _visible_names(self, ctx: Context):
        names = set(self.globals) | set(self.members)
        for scope in ctx.scopes:
            names |= set(scope)
        return names

    def _index(self, node: A.Node, array: ir.ArrayType, name: str, ctx: Context, what: str | None = None):
        index = self.expr(node, ctx, I32)
        if index is None:
            return None, True
        if not ir.is_int(index.type):
            self.error(node.loc, f"an index must be i32 or u32, not {index.type}")
            return None, True
        n = array.length
        if isinstance(index, ir.Const):
            if not 0 <= index.value < n:
                self.error(node.loc, f"index {index.value} is out of range for {what or repr(name)} (length {n})")
                return None, True
            return index, False
        if isinstance(index, ir.Var) and index.kind == ir.LOCAL:
            local = ctx.lookup(index.name)
            if local is not None and local.value_range is not None:
                lo, hi = local.value_range
                if lo > hi:  # the loop never runs
                    return index, True
                if 0 <= lo and hi < n:
                    return index, False
        return index, True

    def expr_Index(self, node: A.Index, ctx: Context, expected):
        if self.globals.get(node.base, Global("", node.loc)).kind == "tensor" and ctx.lookup(node.base) is None:
            return self._tensor_load(node.base, (node.index,), node.loc, ctx)
        base = self.expr_Name(A.Name(node.base, loc=node.loc), ctx, None)
        if base is None:
            self.expr(node.index, ctx)
            return None
        if not isinstance(base, ir.Var) or not isinstance(base.type, ir.ArrayType):
            self.error(node.loc, f"'{node.base}' is not an array")
            return None
        index, checked = self._index(node.index, base.type, node.base, ctx)
        if index is None:
            return None
        return ir.Load(base, index, base.type.elem, checked, node.loc)

    def expr_MultiIndex(self, node: A.MultiIndex, ctx: Context, expected):
        g = self.globals.get(node.base)
        if g is None or g.kind != "tensor" or ctx.lookup(node.base) is not None:
            for i in node.indices:
                self.expr(i, ctx)
            what = "an array: index it with one index" if g is not None and g.kind.endswith("field") else "a tensor"
            if g is None and ctx.lookup(node.base) is None:
                self.error(node.loc, f"unknown name '{node.base}'{did_you_mean(node.base, self._visible_names(ctx))}")
            else:
                self.error(node.loc, f"'{node.base}' is not {what}")
            return None
        return self._tensor_load(node.base, node.indices, node.loc, ctx)

    def _tensor_load(self, name: str, index_nodes, loc: Loc, ctx: Context):
        self.used_globals.add(name)
        t = self.tensors.get(name)
        if ctx.is_constant:
            self.error(loc, f"tensor '{name}' is bound at launch; it cannot be used in a compile-time constant")
            return None
        if t is None:  # its declaration was rejected, with an error
            for i in index_nodes:
                self.expr(i, ctx)
            return None
        if len(index_nodes) != len(t.dims):
            for i in index_nodes:
                self.expr(i, ctx)
            self.error(loc, f"tensor '{name}' has {len(t.dims)} dimension{'s' if len(t.dims) != 1 else ''} "
                            f"{list(t.dims)}, indexed with {len(index_nodes)}")
            return None
        indices, checked = [], []
        for k, (n, d) in enumerate(zip(index_nodes, t.dims)):
            index, check = self._index(n, ir.ArrayType(F32, d), name, ctx, f"dimension {k} of tensor '{name}'")
            if index is None:
                return None
            indices.append(index)
            checked.append(check)
        return ir.TensorLoad(name, tuple(indices), t.dims, tuple(checked), F32, loc)

    def expr_Reduction(self, node: A.Reduction, ctx: Context, expected):
        self.error(node.loc, f"a reduction is written as the whole value of a 'let' in a per-request stage: "
                             f"'let x = {node.op}({node.var} in ...: ...)'")
        return None

    def expr_Unary(self, node: A.Unary, ctx: Context, expected):
        if node.op == "-" and isinstance(node.operand, A.IntLit):
            return self.expr_IntLit(node.operand, ctx, expected, negate=True, loc=node.loc)
        operand = self.expr(node.operand, ctx, expected)
        if operand is None:
            return None
        t = operand.type
        ok = {
            "-": ir.is_numeric(t),
            "!": t == BOOL,
            "~": ir.is_int(t) or (isinstance(t, ir.EnumType) and t.is_flags),
        }[node.op]
        if not ok:
            self.error(node.loc, f"operator '{node.op}' does not apply to {t}")
            return None
        return ir.Unary(node.op, operand, t, node.loc)

    def expr_Binary(self, node: A.Binary, ctx: Context, expected):
        op = node.op
        if op in LOGIC_OPS or op == "has":
            left = self.expr(node.left, ctx)
            right = self.expr(node.right, ctx)
        elif _flexible_int(node.left) and not _flexible_int(node.right):
            right = self.expr(node.right, ctx, None if op in SHIFT_OPS else expected)
            hint = right.type if right is not None and op not in SHIFT_OPS else expected
            left = self.expr(node.left, ctx, hint)
        else:
            left = self.expr(node.left, ctx, None if op in EQ_OPS | ORDER_OPS else expected)
            hint = None if op in SHIFT_OPS else (left.type if left is not None else None)
            right = self.expr(node.right, ctx, hint if hint is not None else I32)
        if left is None or right is None:
            return None
        return self._binary_typed(op, left, right, node.loc)

    def _binary_typed(self, op: str, left: ir.Expr, right: ir.Expr, loc: Loc, error_loc: Loc | None = None):
        """`error_loc`: where a type error points (a compound assignment's value, not its statement)."""
        lt, rt = left.type, right.type
        flags = isinstance(lt, ir.EnumType) and lt.is_flags

        def bad(why: str = ""):
            self.error(error_loc or loc, f"operator '{op}' does not apply to {lt} and {rt}{why}")
            return None

        if isinstance(lt, ir.ArrayType) or isinstance(rt, ir.ArrayType):
            return bad(" (arrays are compared element by element)")
        if op in LOGIC_OPS:
            if lt != BOOL or rt != BOOL:
                return bad()
            return ir.Binary(op, left, right, BOOL, loc)
        if op == "has":
            if not flags or lt != rt:
                return bad("; 'has' tests a flag set against flags of the same set")
            return ir.Binary(op, left, right, BOOL, loc)
        if op in SHIFT_OPS:
            if not ir.is_int(lt) or not ir.is_int(rt):
                return bad()
            return ir.Binary(op, left, right, lt, loc)
        if lt != rt:
            hint = ""
            if ir.is_numeric(lt) and ir.is_numeric(rt):
                hint = f"; convert one side with 'as {lt}' or 'as {rt}'"
            return bad(hint)
        if op in EQ_OPS:
            return ir.Binary(op, left, right, BOOL, loc)
        if op in ORDER_OPS:
            if not ir.is_numeric(lt):
                return bad()
            return ir.Binary(op, left, right, BOOL, loc)
        if op in BIT_OPS:
            if not (ir.is_int(lt) or flags):
                return bad("; use '&&' / '||' for bool" if lt == BOOL else "")
            return ir.Binary(op, left, right, lt, loc)
        if op in ARITH_OPS:
            if op == "%" and lt == F32:
                return bad("; '%' is for integers")
            if not ir.is_numeric(lt):
                return bad()
            return ir.Binary(op, left, right, lt, loc)
        return bad()

    def expr_Conditional(self, node: A.Conditional, ctx, expected):
        cond = self.expr(node.cond, ctx, BOOL)
        then = self.expr(node.then, ctx, expected)
        otherwise = self.expr(node.otherwise, ctx, then.type if then is not None else expected)
        if cond is None or then is None or otherwise is None:
            return None
        if cond.type != BOOL:
            self.error(node.cond.loc, f"the condition of '?:' must be bool, not {cond.type}")
            return None
        if then.type != otherwise.type:
            self.error(node.loc, f"the branches of '?:' have different types: {then.type} and {otherwise.type}")
            return None
        if isinstance(then.type, ir.ArrayType):
            self.error(node.loc, "'?:' cannot choose between arrays")
            return None
        return ir.Select(cond, then, otherwise, then.type, node.loc)

    def expr_Cast(self, node: A.Cast, ctx, expected):
        target = self.types.get(node.to)
        if target is None:
            self.error(node.loc, f"unknown type '{node.to}'{did_you_mean(node.to, self.types)}")
            self.expr(node.operand, ctx)
            return None
        operand = self.expr(node.operand, ctx, target if ir.is_int(target) else None)
        if operand is None:
            return None
        src = operand.type
        allowed = (ir.is_numeric(target) and (ir.is_numeric(src) or src == BOOL)) or (
            ir.is_int(target) and isinstance(src, ir.EnumType)
        ) or src == target
        if not allowed:
            hint = "; compare with 0 instead" if target == BOOL and ir.is_numeric(src) else ""
            self.error(node.loc, f"cannot convert {src} to {target}{hint}")
            return None
        return ir.Cast(operand, target, node.loc)

    def expr_Call(self, node: A.Call, ctx: Context, expected):
        name = node.func
        if name in INTRINSIC_ARITY:
            return self._intrinsic(node, ctx, expected)
        if name in COLLECTIVE_TYPES and (ctx.kind == "collective" or name not in self.globals):
            for a in node.args:
                self.expr(a, ctx)
            self.error(node.loc, f"'{name}' is a collective: it can only be the whole value of a 'let' at the top "
                                 f"level of a collective stage ('let x = {name}(...)')")
            return None
        g = self.globals.get(name)
        if g is None or g.kind not in ("function", "builtin"):
            for a in node.args:
                self.expr(a, ctx)
            if g is None:
                callables = [n for n, x in self.globals.items() if x.kind in ("function", "builtin")]
                self.error(node.loc, f"unknown function '{name}'{did_you_mean(name, callables + list(INTRINSIC_ARITY))}")
            else:
                self.error(node.loc, f"{g.kind} '{name}' cannot be called")
            return None
        if ctx.is_constant:
            self.error(node.loc, f"'{name}' cannot be called in a constant expression")
            return None
        ctx.callees.add(name)
        if ctx.lane_parallel and (g.kind == "function" or self.builtins.get(name, None) and self.builtins[name].warp):
            what = "a lanes loop" if ctx.lanes is not None else "a reduction"
            kind = "function" if g.kind == "function" else "warp-wide builtin"
            self.error(node.loc, f"{kind} '{name}' cannot be called in {what}; lane-parallel code calls "
                                 f"builtins that take scalars only")
            for a in node.args:
                self.expr(a, ctx)
            return None
        if g.kind == "builtin":
            b = self.builtins.get(name)
            if b is None:
                return None
            if b.warp and ctx.kind != "stage":
                self.error(node.loc, f"'{name}' is a warp-wide builtin; call it directly in a per-request stage body")
                return None
            params, ret = b.params, b.ret
        else:
            params, ret = self.fn_sigs.get(name, ((), None))
            b = None
        if len(node.args) != len(params):
            self.error(node.loc, f"'{name}' takes {len(params)} argument{'s' if len(params) != 1 else ''}, not {len(node.args)}")
            return None
        args = []
        ok = True
        for a, p in zip(node.args, params):
            e = self.expr(a, ctx, p.type)
            if e is None or p.type is None:
                ok = False
                continue
            if not self._arg_fits(p.type, e.type):
                self.error(a.loc, f"argument '{p.name}' of '{name}' must be {p.type}, not {e.type}")
                ok = False
            args.append(e)
        if not ok:
            return None
        if ret is None and b is None:  # the function's return type was rejected, with an error
            return None
        return ir.Call(name, tuple(args), ret, builtin=b is not None, warp=bool(b and b.warp), loc=node.loc)

    @staticmethod
    def _arg_fits(param: ir.Type, arg: ir.Type) -> bool:
        if isinstance(param, ir.ArrayType) and param.length is None:
            return isinstance(arg, ir.ArrayType) and arg.elem == param.elem
        return param == arg

    def _intrinsic(self, node: A.Call, ctx: Context, expected):
        name = node.func
        arity = INTRINSIC_ARITY[name]
        if len(node.args) != arity:
            self.error(node.loc, f"'{name}' takes {arity} argument{'s' if arity != 1 else ''}, not {len(node.args)}")
            return None
        flexible_first = _flexible_int(node.args[0]) and len(node.args) > 1 and not _flexible_int(node.args[1])
        if flexible_first:
            second = self.expr(node.args[1], ctx, expected)
            first = self.expr(node.args[0], ctx, second.type if second else expected)
            args = [first, second] + [self.expr(a, ctx, second.type if second else expected) for a in node.args[2:]]
        else:
            first = self.expr(node.args[0], ctx, expected)
            hint = first.type if first is not None else expected
            args = [first] + [self.expr(a, ctx, hint) for a in node.args[1:]]
        if any(a is None for a in args):
            return None
        t = args[0].type
        if name == "sqrt":
            ok = t == F32
        elif name == "abs":
            ok = t in (I32, F32)
        else:
            ok = ir.is_numeric(t)
        if not ok:
            self.error(node.loc, f"'{name}' does not apply to {t}")
            return None
        for a, a_node in zip(args[1:], node.args[1:]):
            if a.type != t:
                self.error(a_node.loc, f"all arguments of '{name}' must have the same type ({t}), not {a.type}")
                return None
        return ir.Intrinsic(name, tuple(args), t, node.loc)

    # ---- helpers ----------------------------------------------------------------------

    def _same(self, want, got, loc: Loc, what: str) -> bool:
        if want is None or got is None or want == got:
            return True
        hint = ""
        if ir.is_numeric(want) and ir.is_numeric(got):
            hint = f"; convert with 'as {want}'"
        self.error(loc, f"{what} has type {want}, but the value is {got}{hint}")
        return False


def _mentions_params(e: ir.Expr) -> bool:
    if isinstance(e, ir.Var):
        return True
    return any(_mentions_params(c) for c in _children(e))


def _names_in(node: A.Node) -> set[str]:
    """Every name an expression mentions (without recursing: expressions may be deep)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name):
            out.add(n.id)
        elif isinstance(n, A.Index):
            out.add(n.base)
        for value in vars(n).values():
            if isinstance(value, A.Node):
                stack.append(value)
            elif isinstance(value, tuple):
                stack.extend(v for v in value if isinstance(v, A.Node))
    return out


def _always_returns(stmts) -> bool:
    for s in stmts:
        if isinstance(s, A.Return):
            return True
        if isinstance(s, A.If) and s.otherwise is not None:
            if all(_always_returns(body) for _, body in s.arms) and _always_returns(s.otherwise):
                return True
    return False


# ---- constant folding ---------------------------------------------------------------------


def _fold(e: ir.Expr) -> ir.Expr:
    """Replace an operation on constants by its value (exactly as at run time).

    An operation that would raise at run time (1 / 0) is left alone: the error
    belongs to the run, where every backend reports it the same way.
    """
    if isinstance(e, (ir.Const, ir.Var, ir.Load, ir.Call, ir.TensorLoad)):
        return e
    children = _children(e)
    if not children or not all(isinstance(c, ir.Const) for c in children):
        return e
    try:
        value = evaluate_const(e)
    except ops.XlRuntimeError:
        return e
    return ir.Const(value, e.type, e.loc)


def _not_constant(e: ir.Expr, what: str) -> str:
    """The message for a compile-time value that did not fold: why, if evaluating it fails."""
    stack = [e]
    failure = None
    while stack:
        x = stack.pop()
        if isinstance(x, (ir.Var, ir.Load, ir.Call, ir.TensorLoad)):
            return f"{what} must be a constant expression"
        kids = _children(x)
        if failure is None and kids and all(isinstance(k, ir.Const) for k in kids):
            try:
                evaluate_const(x)
            except ops.XlRuntimeError as exc:
                failure = str(exc)
        stack.extend(kids)
    if failure is not None:
        return f"{what} cannot be computed at compile time: {failure}"
    return f"{what} must be a constant expression"


def _children(e: ir.Expr):
    if isinstance(e, ir.Unary):
        return (e.operand,)
    if isinstance(e, ir.Binary):
        return (e.left, e.right)
    if isinstance(e, ir.Select):
        return (e.cond, e.then, e.otherwise)
    if isinstance(e, ir.Cast):
        return (e.operand,)
    if isinstance(e, ir.Intrinsic):
        return e.args
    return ()


# ---- lanes loops --------------------------------------------------------------------------


def _expr_children(e: ir.Expr):
    """Every sub-expression of e, loads' indices and calls' arguments included."""
    if isinstance(e, ir.Load):
        return (e.index,)
    if isinstance(e, ir.TensorLoad):
        return e.indices
    if isinstance(e, ir.Call):
        return e.args
    return _children(e)


def _stmt_exprs(s: ir.Stmt):
    """The expressions a statement evaluates, and its nested statement lists."""
    if isinstance(s, (ir.Let, ir.Return, ir.Collective)):
        return (s.value,), ()
    if isinstance(s, (ir.Assign, ir.Accumulate)):
        return tuple(x for x in (s.value, s.index) if x is not None), ()
    if isinstance(s, ir.ExprStmt):
        return (s.expr,), ()
    if isinstance(s, ir.If):
        return tuple(c for c, _ in s.arms), tuple(b for _, b in s.arms) + (s.otherwise,)
    if isinstance(s, ir.For):
        return (), (s.body,)
    if isinstance(s, ir.Lanes):
        return (s.start, s.stop), (s.body,)
    if isinstance(s, ir.Reduce):
        return (s.start, s.stop, s.value), ()
    return (), ()


def _loads_in(stmts):
    """Every array load in a statement list (iteratively: bodies may be deep)."""
    stack_s = list(stmts)
    while stack_s:
        exprs, bodies = _stmt_exprs(stack_s.pop())
        for body in bodies:
            stack_s.extend(body)
        stack_e = list(exprs)
        while stack_e:
            e = stack_e.pop()
            if isinstance(e, ir.Load):
                yield e
            stack_e.extend(_expr_children(e))


def _mentions(e: ir.Expr, names: set[str]) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var) and x.kind == ir.LOCAL and x.name in names:
            return True
        stack.extend(_expr_children(x))
    return False


def _distinct_per_iteration(index: ir.Expr, var: str, inner: set[str]) -> bool:
    """Is `index` `i + k`, `k + i`, `i - k`, `c * i + k` (or without k) with c an odd constant
    and k free of the loop variable and of the iteration's locals?"""
    def is_var(e):
        return isinstance(e, ir.Var) and e.kind == ir.LOCAL and e.name == var

    def scaled(e):  # i, c * i, i * c with c odd
        if is_var(e):
            return True
        if isinstance(e, ir.Binary) and e.op == "*":
            for a, b in ((e.left, e.right), (e.right, e.left)):
                if is_var(a) and isinstance(b, ir.Const) and int(b.value) % 2 == 1:
                    return True
        return False

    def invariant(e):
        return not _mentions(e, inner)

    if scaled(index):
        return True
    if isinstance(index, ir.Binary) and index.op in ("+", "-"):
        if scaled(index.left) and invariant(index.right):
            return True
        if index.op == "+" and scaled(index.right) and invariant(index.left):
            return True
    return False
