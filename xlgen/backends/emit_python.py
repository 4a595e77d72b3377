"""Typed IR -> the Python simulator (NAME_sim.py), the executable specification.

Operators come from the table in py_ops.py (also the constant folder's
semantics). Statements that can raise a runtime error carry a `# @xl:LINE`
marker; the engine (runtime/sim.py) maps a raising frame back to that .xl line.
"""

from __future__ import annotations

from ..core import ir
from ..core.ir import may_raise
from ..core.subjects import Sites
from . import names
from ..semantics import py_ops
from .emit_vec import VecEmitter
from .layout import slots

LINE_MARK = "# @xl:"


class PyEmitter:
    def __init__(self, program: ir.Program):
        self.program = program
        self.in_collective = False  # emitting a collective stage: shared writes go through `xw`
        self.sites = Sites(program)  # what each check names when it fails (docs/semantics.md §12)
        self.in_function: str | None = None  # the helper being emitted (its array parameters are subjects)

    def array_site(self, base: ir.Var) -> int:
        return self.sites.array(base, self.in_function)

    # ---- expressions -------------------------------------------------------------

    def expr(self, e: ir.Expr) -> str:
        return getattr(self, "expr_" + type(e).__name__)(e)

    def expr_Const(self, e: ir.Const) -> str:
        if e.name is not None:
            if isinstance(e.type, ir.EnumType):
                return f"{names.py(e.type.name)}.{names.py(e.name)}"
            if e.name in self.program.consts:
                return names.py(e.name)
        return py_ops.literal(e.value, e.type)

    def expr_Var(self, e: ir.Var) -> str:
        return {
            ir.LOCAL: names.py(e.name),
            ir.FIELD: f"r.{names.py(e.name)}",
            ir.SHARED: f"sh.{names.py(e.name)}",
            ir.PARAM: f"p.{names.py(e.name)}",
            ir.REQ_ID: "r.xl_id",
        }[e.kind]

    def expr_Load(self, e: ir.Load) -> str:
        index = self.expr(e.index)
        if e.checked:
            index = f"check_index({index}, {e.base.type.length}, {self.array_site(e.base)})"
        return f"{self.expr(e.base)}[{index}]"

    def expr_TensorLoad(self, e: ir.TensorLoad) -> str:
        flat = ""
        for k, (index, dim, checked) in enumerate(zip(e.indices, e.dims, e.checked)):
            code = self.expr(index)
            if checked:
                code = f"check_index({code}, {dim}, {self.sites.of('tensor', e.tensor, k)})"
            flat = code if k == 0 else f"({flat}) * {dim} + {code}"
        return f"float(p.{names.py(e.tensor)}[{flat}])"

    def _pool_args(self, e) -> str:
        """A pool access's arguments to ops.pool_read / pool_write, but its indices."""
        owner = self.expr(self.program.pool_owner(e.pool))
        return f"sh.{names.py(e.pool.name)}, {owner}, r.xl_id, {e.pool.dims!r}, {self.sites.of('pool', e.pool.name)}"

    def _pool_indices(self, e) -> str:
        """Each index, checked against its dimension as it is evaluated (left to right)."""
        codes = []
        for k, (index, dim, checked) in enumerate(zip(e.indices, e.pool.dims, e.checked)):
            code = self.expr(index)
            codes.append(f"check_index({code}, {dim}, {self.sites.of('pool', e.pool.name, k)})" if checked else code)
        return ", ".join(codes)

    def expr_PoolLoad(self, e: ir.PoolLoad) -> str:
        return f"pool_read({self._pool_args(e)}, {self._pool_indices(e)})"

    def expr_Unary(self, e: ir.Unary) -> str:
        return py_ops.unary_code(e, self.expr(e.operand))

    def expr_Binary(self, e: ir.Binary) -> str:
        return py_ops.binary_code(e, self.expr(e.left), self.expr(e.right))

    def expr_Select(self, e: ir.Select) -> str:
        return py_ops.select_code(self.expr(e.cond), self.expr(e.then), self.expr(e.otherwise))

    def expr_Cast(self, e: ir.Cast) -> str:
        return py_ops.cast_code(e, self.expr(e.operand))

    def expr_Intrinsic(self, e: ir.Intrinsic) -> str:
        return py_ops.intrinsic_code(e, [self.expr(a) for a in e.args])

    def expr_Call(self, e: ir.Call) -> str:
        args = [self.expr(a) for a in e.args]
        if e.builtin:
            return f"b_{e.func}({', '.join(args)})"
        return f"fn_{e.func}({', '.join(['p'] + args)})"  # helpers may read launch params

    # ---- statements --------------------------------------------------------------

    def block(self, stmts, depth: int) -> list[str]:
        lines: list[str] = []
        for s in stmts:
            lines.extend(getattr(self, "stmt_" + type(s).__name__)(s, depth))
        return lines or ["    " * depth + "pass"]

    def _line(self, depth: int, code: str, node, may_raise: bool) -> str:
        mark = f"  {LINE_MARK}{node.loc.line}" if may_raise else ""
        return "    " * depth + code + mark

    def stmt_Let(self, s: ir.Let, depth):
        return [self._line(depth, f"{names.py(s.name)} = {self.expr(s.value)}", s, may_raise(s.value))]

    def _shared_element(self, s) -> tuple[str, str, bool]:
        """A collective stage's shared write: the attribute, the index argument, may it raise."""
        attr = repr(names.py(s.target.name))
        if s.index is None:
            return attr, "", False
        index = self.expr(s.index)
        if s.checked:
            index = f"check_index({index}, {s.target.type.length}, {self.array_site(s.target)})"
        return attr, f", {index}", s.checked or may_raise(s.index)

    def stmt_Assign(self, s: ir.Assign, depth):
        if s.target.kind == ir.SHARED and self.in_collective:  # claimed, applied at the stage's end
            attr, index, raises = self._shared_element(s)
            code = f"xw.put({attr}, {self.expr(s.value)}{index})"
            return [self._line(depth, code, s, raises or may_raise(s.value))]
        target = self.expr(s.target)
        raises = may_raise(s.value)
        if s.index is not None:
            index = self.expr(s.index)
            if s.checked:
                index = f"check_index({index}, {s.target.type.length}, {self.array_site(s.target)})"
            target = f"{target}[{index}]"
            raises = raises or s.checked or may_raise(s.index)
        return [self._line(depth, f"{target} = {self.expr(s.value)}", s, raises)]

    def stmt_PoolStore(self, s: ir.PoolStore, depth):
        # the value first, then the indices (§8)
        code = f"pool_write({self._pool_args(s)}, {self.expr(s.value)}, {self._pool_indices(s)})"
        return [self._line(depth, code, s, True)]

    def stmt_Accumulate(self, s: ir.Accumulate, depth):
        attr, index, raises = self._shared_element(s)
        elem = s.target.type.elem if s.index is not None else s.target.type
        wrap = "wrap_i32" if elem == ir.I32 else "wrap_u32"
        code = f"xw.add({attr}, {self.expr(s.value)}, {wrap}{index})"
        return [self._line(depth, code, s, raises or may_raise(s.value))]

    def stmt_Collective(self, s: ir.Collective, depth):
        # The engine (runtime/sim.py) resumes every participant with its result.
        word = ir.storage_word(s.value.type)
        code = f"{names.py(s.name)} = yield ({s.op!r}, {word!r}, {self.expr(s.value)})"
        return [self._line(depth, code, s, may_raise(s.value))]

    def stmt_If(self, s: ir.If, depth):
        lines = []
        for i, (cond, body) in enumerate(s.arms):
            keyword = "if" if i == 0 else "elif"
            lines.append(self._line(depth, f"{keyword} {self.expr(cond)}:", cond, may_raise(cond)))
            lines.extend(self.block(body, depth + 1))
        if s.otherwise:
            lines.append("    " * depth + "else:")
            lines.extend(self.block(s.otherwise, depth + 1))
        return lines

    def stmt_For(self, s: ir.For, depth):
        return [f"{'    ' * depth}for {names.py(s.var)} in range({s.start}, {s.stop}):", *self.block(s.body, depth + 1)]

    def _lane_bounds(self, s, depth) -> str:
        """A lanes loop's or reduction's bounds, evaluated once."""
        return f"{'    ' * depth}xl_lo, xl_hi = {self.expr(s.start)}, {self.expr(s.stop)}  {LINE_MARK}{s.loc.line}"

    def _lane_statement(self, s, depth, scalar: list[str], vector: list[str]) -> list[str]:
        """Its bounds, then a Python loop over a short range or numpy arrays over a long one
        (semantics/vec.py use_scalar); both give §13.2's result."""
        pad = "    " * depth
        return [self._lane_bounds(s, depth), f"{pad}if use_scalar(xl_hi - xl_lo):", *scalar, f"{pad}else:",
                *["    " * (depth + 1) + line for line in vector]]

    def _lanes_loop(self, s: ir.Lanes, depth) -> list[str]:
        """The iterations one after another: each runs to its end or its first error; the
        lowest failing one's error is raised after the loop."""
        pad = "    " * depth
        return [f"{pad}xl_first = None", f"{pad}for {names.py(s.var)} in range(xl_lo, xl_hi):",
                f"{pad}    try:", *self.block(s.body, depth + 2), f"{pad}    except XlRuntimeError as xl_e:",
                f"{pad}        xl_first = xl_first or xl_e", f"{pad}if xl_first is not None:",
                f"{pad}    raise xl_first"]

    def stmt_Lanes(self, s: ir.Lanes, depth):
        vector = VecEmitter(self, {s.var}).lanes(s, f"  {LINE_MARK}{s.loc.line}")
        return self._lane_statement(s, depth, self._lanes_loop(s, depth + 1), vector)

    def stmt_Reduce(self, s: ir.Reduce, depth):
        pad = "    " * (depth + 1)
        mark = f"  {LINE_MARK}{s.loc.line}"
        dtype = {"f32": "F32", "i32": "I32", "u32": "U32"}[str(s.value.type)]
        # in index order: the first element that fails is the lowest one
        scalar = [f"{pad}xl_vals = [{self.expr(s.value)} for {names.py(s.var)} in range(xl_lo, xl_hi)]{mark}",
                  f"{pad}{names.py(s.name)} = reduce_list(xl_vals, xl_lo, {dtype}, {s.op!r})"]
        vector = VecEmitter(self, {s.var}).reduce(s, mark)
        return self._lane_statement(s, depth, scalar, vector)

    def stmt_Break(self, s, depth):
        return ["    " * depth + "break"]

    def stmt_Continue(self, s, depth):
        return ["    " * depth + "continue"]

    def stmt_Return(self, s: ir.Return, depth):
        return [self._line(depth, f"return {self.expr(s.value)}", s, may_raise(s.value))]

    def stmt_ExprStmt(self, s: ir.ExprStmt, depth):
        return [self._line(depth, self.expr(s.expr), s, may_raise(s.expr))]

    # ---- declarations --------------------------------------------------------------

    def trace_words(self, trace: ir.Trace) -> str:
        """An expression listing a trace's fields as unsigned 32-bit words."""
        parts = []
        for name in trace.fields:
            f = self.program.field(name)
            word = ir.storage_word(f.type.elem if isinstance(f.type, ir.ArrayType) else f.type)
            access = f"r.{names.py(name)}"
            convert = {"f": "f32_bits({})", "i": "(({}) & 0xFFFFFFFF)", "u": "int({})"}[word]
            if isinstance(f.type, ir.ArrayType):
                parts.append(f"*[{convert.format('v')} for v in {access}]")
            else:
                parts.append(convert.format(access))
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def field_init(self, f: ir.FieldDecl) -> str:
        value = self.expr(f.init) if f.init is not None else py_ops.literal(_zero(f.type), _elem(f.type))
        if isinstance(f.type, ir.ArrayType):
            return f"[{value}] * {f.type.length}"
        return value

    def stage(self, s: ir.Stage, trace: ir.Trace | None, loc: str) -> dict:
        self.in_collective = s.is_collective
        body = self.block(s.body, 1)
        self.in_collective = False
        return {
            "name": s.name,
            "index": s.index,
            "kind": s.kind,
            "phase2": s.in_phase2,
            "line": s.loc.line,
            "file": s.loc.file,
            "loc": loc,
            "guard": self._line(0, f"return {self.expr(s.guard)}", s.guard, may_raise(s.guard)).strip()
            if s.guard is not None else "return True",
            "params": "r, sh, p, xw" if s.is_collective else "r, sh, p",
            "body": body,
            "trace_index": trace.index if trace else None,
            "trace_words": self.trace_words(trace) if trace else None,
        }

    def _function_body(self, f: ir.Function) -> list[str]:
        self.in_function = f.name
        try:
            return self.block(f.body, 1)
        finally:
            self.in_function = None

    def context(self) -> dict:
        p = self.program
        stage_lines = {s.name: _loc_text(s.loc) for s in p.stages}
        functions = [
            {
                "name": f.name,
                "params": ", ".join(["p"] + [names.py(a.name) for a in f.params]),
                "loc": _loc_text(f.loc),
                "body": self._function_body(f),
            }
            for f in p.functions
        ]
        traced = {t.stage: t for t in p.traces}
        stages = [self.stage(s, traced.get(s.name), stage_lines[s.name]) for s in p.stages]
        return {
            "program": p,
            "consts": [(names.py(n), self.expr_Const(ir.Const(c.value, c.type))) for n, c in p.consts.items()],
            "enums": [
                {"name": names.py(t.name),
                 "members": [(names.py(m), (1 << i) if t.is_flags else i) for i, m in enumerate(t.members)]}
                for t in p.enums
            ],
            "params": [(names.py(x.name), x.name, py_ops.literal(x.default, x.type), x.type.name) for x in p.params],
            "tensors": [(names.py(t.name), t.name, t.dims) for t in p.tensors],
            # pools live with the shared state, as attributes of Shared
            "pools": [{"attr": names.py(x.name), "size": x.size, "word": ir.storage_word(x.elem)} for x in p.pools],
            "pool_table": [(x.name, names.py(x.name), ir.storage_word(x.elem), x.dims) for x in p.pools],
            "lane_parallel": uses_lane_code(p),
            "request_slots": [names.py(f.name) for f in p.request_fields],
            "shared_slots": [names.py(f.name) for f in p.shared_fields],
            "request_init": [(names.py(f.name), self.field_init(f)) for f in p.request_fields],
            "shared_init": [(names.py(f.name), self.field_init(f)) for f in p.shared_fields],
            "layout": {
                "request": [(s.name, names.py(s.name), s.word, s.count, s.is_array) for s in slots(p.request_fields)],
                "shared": [(s.name, names.py(s.name), s.word, s.count, s.is_array) for s in slots(p.shared_fields)],
            },
            "functions": functions,
            "stages": stages,
            "traces": [(t.index, t.stage, t.fields) for t in p.traces],
            "done": self._line(0, f"return {self.expr(p.done)}", p.done, may_raise(p.done)).strip(),
            "builtins": sorted(p.builtins),
        }


def _elem(t: ir.Type):
    return t.elem if isinstance(t, ir.ArrayType) else t


def _zero(t: ir.Type):
    e = _elem(t)
    return 0.0 if e == ir.F32 else (False if e == ir.BOOL else 0)


def _loc_text(loc) -> str:
    return f"{loc.file}:{loc.line}"


def uses_lane_code(p: ir.Program) -> bool:
    """Does any stage hold a lanes loop or a reduction (the simulator then needs numpy)?"""
    return any(isinstance(st, (ir.Lanes, ir.Reduce)) for stage in p.stages for st in ir.statements(stage.body))
