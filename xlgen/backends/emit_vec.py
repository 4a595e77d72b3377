"""Typed IR -> numpy code for the simulator's lane-parallel statements (lanes loops and
reductions, docs/semantics.md §13.2).

The iterations of a lanes loop (the elements of a reduction) are evaluated together: a
value that differs per iteration is a numpy array, one that does not is a numpy scalar. A
reduction in an iteration is evaluated over all iterations' elements at once (stmt_Reduce).
Operators come from the table below, whose checked operations record errors in the
`Lanes` object of xlgen/semantics/vec.py instead of raising. Conditional evaluation (`if`,
`&&`, `||`, `?:`) narrows the iterations that count with a mask.
"""

from __future__ import annotations

from ..core import ir
from . import names
from ..semantics import py_ops

# numpy types of the values of each IR type
DTYPE = {"i32": "I32", "u32": "U32", "f32": "F32", "bool": "BOOL", "enum": "I32", "flags": "U32"}

VEC_BINARY: dict[tuple[str, str], str] = {}
for _t in ("i32", "u32", "f32"):
    for _op in "+-*":
        VEC_BINARY[(_op, _t)] = "({a} " + _op + " {b})"
    for _op in ("==", "!=", "<", "<=", ">", ">="):
        VEC_BINARY[(_op, _t)] = "({a} " + _op + " {b})"
VEC_BINARY.update({
    ("/", "i32"): "v_div_i32(xl_L, {a}, {b}, {line})", ("%", "i32"): "v_rem_i32(xl_L, {a}, {b}, {line})",
    ("/", "u32"): "v_div_u32(xl_L, {a}, {b}, {line})", ("%", "u32"): "v_rem_u32(xl_L, {a}, {b}, {line})",
    ("/", "f32"): "({a} / {b})",
    ("<<", "i32"): "v_shl_i32(xl_L, {a}, {b}, {line})", (">>", "i32"): "v_shr_i32(xl_L, {a}, {b}, {line})",
    ("<<", "u32"): "v_shl_u32(xl_L, {a}, {b}, {line})", (">>", "u32"): "v_shr_u32(xl_L, {a}, {b}, {line})",
})
for _t in ("i32", "u32", "flags"):
    for _op in "&|^":
        VEC_BINARY[(_op, _t)] = "({a} " + _op + " {b})"
for _t in ("bool", "enum", "flags"):
    VEC_BINARY[("==", _t)] = "({a} == {b})"
    VEC_BINARY[("!=", _t)] = "({a} != {b})"
VEC_BINARY[("&&", "bool")] = "v_and(xl_L, {a}, lambda: {b})"
VEC_BINARY[("||", "bool")] = "v_or(xl_L, {a}, lambda: {b})"
VEC_BINARY[("has", "flags")] = "(({a} & {b}) == {b})"

VEC_UNARY = {
    ("-", "i32"): "(-{a})", ("-", "u32"): "(-{a})", ("-", "f32"): "(-{a})",
    ("!", "bool"): "(~{a})",
    ("~", "i32"): "(~{a})", ("~", "u32"): "(~{a})", ("~", "flags"): "({a} ^ U32({mask}))",
}

VEC_CAST = {
    ("i32", "u32"): "{a}.astype(U32)", ("u32", "i32"): "{a}.astype(I32)",
    ("i32", "f32"): "{a}.astype(F32)", ("u32", "f32"): "{a}.astype(F32)",
    ("f32", "i32"): "v_f2i(xl_L, {a}, {line})", ("f32", "u32"): "v_f2u(xl_L, {a}, {line})",
    ("bool", "i32"): "{a}.astype(I32)", ("bool", "u32"): "{a}.astype(U32)", ("bool", "f32"): "{a}.astype(F32)",
    ("enum", "i32"): "{a}", ("enum", "u32"): "{a}.astype(U32)", ("flags", "i32"): "{a}.astype(I32)",
    ("flags", "u32"): "{a}",
}

VEC_INTRINSIC = {
    ("min", "*"): "v_min({a}, {b})", ("max", "*"): "v_max({a}, {b})", ("clamp", "*"): "v_clamp({a}, {b}, {c})",
    ("abs", "i32"): "v_abs_i32({a})", ("abs", "f32"): "np.abs({a})", ("sqrt", "f32"): "np.sqrt({a})",
}


def dtype_of(t: ir.Type) -> str:
    return DTYPE[py_ops.type_key(t)]


class VecEmitter:
    """Emits one lanes loop or reduction. `scalar` is the simulator's emitter (for uniform
    values: launch params, request fields, locals from outside)."""

    def __init__(self, scalar, lane_vars: set[str]):
        self.scalar = scalar
        self.lane_vars = set(lane_vars)  # names holding one value per iteration
        self.arrays: dict[str, ir.Var] = {}  # request/shared arrays the code touches
        self.written: set[str] = set()
        self.line = 0
        self.temps = 0
        # in the value of a reduction in an iteration (stmt_Reduce): the element index, and
        # the iteration values read there -> their names gathered per element
        self.element_var: str | None = None
        self.gathered: dict[str, str] = {}

    # ---- expressions
    def expr(self, e: ir.Expr) -> str:
        return getattr(self, "expr_" + type(e).__name__)(e)

    def expr_Const(self, e: ir.Const) -> str:
        return f"{dtype_of(e.type)}({self.scalar.expr_Const(e)})"

    def expr_Var(self, e: ir.Var) -> str:
        if e.kind == ir.LOCAL and e.name in self.lane_vars:
            if self.element_var is not None and e.name != self.element_var:
                return self.gathered.setdefault(e.name, f"xl_g_{names.py(e.name)}")
            return names.py(e.name)
        return f"{dtype_of(e.type)}({self.scalar.expr_Var(e)})"

    def _array(self, base: ir.Var) -> str:
        self.arrays[base.name] = base
        return f"xl_a_{names.py(base.name)}"

    def _index(self, index: ir.Expr, length: int, checked: bool, where: int) -> str:
        code = self.expr(index)
        return f"v_idx(xl_L, {code}, {length}, {self.line}, {where})" if checked else code

    def expr_Load(self, e: ir.Load) -> str:
        index = self._index(e.index, e.base.type.length, e.checked, self.scalar.array_site(e.base))
        return f"{self._array(e.base)}[{index}]"

    def expr_TensorLoad(self, e: ir.TensorLoad) -> str:
        flat = ""
        for k, (index, dim, checked) in enumerate(zip(e.indices, e.dims, e.checked)):
            code = self._index(index, dim, checked, self.scalar.sites.of("tensor", e.tensor, k))
            flat = code if k == 0 else f"({flat}) * {dim} + {code}"
        return f"p.{names.py(e.tensor)}[{flat}]"

    def _pool_access(self, e) -> str:
        """A pool access's arguments to v_pool_get / v_pool_set after the value: the pool (its
        shared array itself: iterations write disjoint elements, so in place), a working copy
        of the owner, the request id, the dims, the line, the pool's site, then each index,
        checked as it is evaluated (left to right)."""
        owner = self._array(self.scalar.program.pool_owner(e.pool))
        req = self.expr(ir.Var(ir.REQ_ID, "req_id", ir.I32))
        name = e.pool.name
        indices = [self._index(i, d, c, self.scalar.sites.of("pool", name, k))
                   for k, (i, d, c) in enumerate(zip(e.indices, e.pool.dims, e.checked))]
        return (f"sh.{names.py(name)}, {owner}, {req}, {e.pool.dims!r}, {self.line}, {self.scalar.sites.of('pool', name)}, "
                f"{', '.join(indices)}")

    def expr_PoolLoad(self, e: ir.PoolLoad) -> str:
        return f"v_pool_get(xl_L, {self._pool_access(e)})"

    def expr_Unary(self, e: ir.Unary) -> str:
        mask = py_ops.flag_mask(e.type) if isinstance(e.type, ir.EnumType) else 0
        return VEC_UNARY[(e.op, py_ops.type_key(e.type))].format(a=self.expr(e.operand), mask=mask)

    def expr_Binary(self, e: ir.Binary) -> str:
        return VEC_BINARY[(e.op, py_ops.type_key(e.left.type))].format(
            a=self.expr(e.left), b=self.expr(e.right), line=self.line)

    def expr_Select(self, e: ir.Select) -> str:
        return f"v_select(xl_L, {self.expr(e.cond)}, lambda: {self.expr(e.then)}, lambda: {self.expr(e.otherwise)})"

    def expr_Cast(self, e: ir.Cast) -> str:
        src, dst = py_ops.type_key(e.operand.type), py_ops.type_key(e.type)
        a = self.expr(e.operand)
        if src == dst:
            return a
        return VEC_CAST[(src, dst)].format(a=f"np.asarray({a})", line=self.line)

    def expr_Intrinsic(self, e: ir.Intrinsic) -> str:
        template = VEC_INTRINSIC.get((e.name, "*")) or VEC_INTRINSIC[(e.name, py_ops.type_key(e.type))]
        return template.format(**dict(zip("abc", (self.expr(a) for a in e.args))))

    def expr_Call(self, e: ir.Call) -> str:  # the checker allows scalar builtins only
        args = ", ".join(["xl_L", str(self.line)] + [self.expr(a) for a in e.args])
        return f"vb_{e.func}({args})"

    # ---- statements
    def block(self, stmts, depth: int) -> list[str]:
        lines: list[str] = []
        for s in stmts:
            self.line = s.loc.line
            lines.extend(getattr(self, "stmt_" + type(s).__name__)(s, depth))
        return lines

    def _pad(self, depth: int) -> str:
        return "    " * depth

    def stmt_Let(self, s: ir.Let, depth):
        self.lane_vars.add(s.name)
        pad = self._pad(depth)
        return [f"{pad}{names.py(s.name)} = {self.expr(s.value)}", f"{pad}xl_L.end()"]

    def stmt_Assign(self, s: ir.Assign, depth):
        pad = self._pad(depth)
        value = self.expr(s.value)
        if s.target.kind == ir.LOCAL:
            name = names.py(s.target.name)
            return [f"{pad}{name} = v_assign(xl_L, {name}, {value})", f"{pad}xl_L.end()"]
        self.written.add(s.target.name)
        array = self._array(s.target)
        # the value first, then the index: the order the scalar simulator raises in
        return [f"{pad}xl_v = {value}",
                f"{pad}v_store(xl_L, {array}, "
                f"{self._index(s.index, s.target.type.length, s.checked, self.scalar.array_site(s.target))}, xl_v)",
                f"{pad}xl_L.end()"]

    def stmt_PoolStore(self, s: ir.PoolStore, depth):
        pad = self._pad(depth)
        # the value first, then the indices, then the owner check: the scalar simulator's order
        return [f"{pad}xl_v = {self.expr(s.value)}", f"{pad}v_pool_set(xl_L, xl_v, {self._pool_access(s)})",
                f"{pad}xl_L.end()"]

    def stmt_If(self, s: ir.If, depth):
        pad = self._pad(depth)
        lines = []
        for cond, body in s.arms:
            self.line = cond.loc.line
            self.temps += 1
            c = f"xl_c{self.temps}"
            lines += [f"{pad}{c} = np.broadcast_to({self.expr(cond)}, (xl_L.n,))", f"{pad}xl_L.end()",
                      f"{pad}xl_L.push({c})"]
            lines += self.block(body, depth) or []
            lines += [f"{pad}xl_L.pop()", f"{pad}xl_L.push(~{c})"]  # the next arm: where no earlier one ran
        lines += self.block(s.otherwise, depth)
        lines += [f"{pad}xl_L.pop()"] * len(s.arms)
        return lines

    def stmt_For(self, s: ir.For, depth):
        pad = self._pad(depth)
        return [f"{pad}xl_L.loop_enter()", f"{pad}for {names.py(s.var)} in range({s.start}, {s.stop}):",
                f"{pad}    if not xl_L.loop_next():", f"{pad}        break",
                *self.block(s.body, depth + 1), f"{pad}xl_L.loop_exit()"]

    def stmt_Break(self, s: ir.Break, depth):
        return [f"{self._pad(depth)}xl_L.leave(True)"]

    def stmt_Continue(self, s: ir.Continue, depth):
        return [f"{self._pad(depth)}xl_L.leave(False)"]

    def stmt_ExprStmt(self, s: ir.ExprStmt, depth):
        pad = self._pad(depth)
        return [f"{pad}{self.expr(s.expr)}", f"{pad}xl_L.end()"]

    def stmt_Reduce(self, s: ir.Reduce, depth):
        """A reduction in every iteration at once, over all (iteration, j) pairs (semantics/vec.py
        Elements): the value's code runs with `xl_L` the elements, reading the iterations'
        values gathered per element."""
        pad = self._pad(depth)
        lines = [f"{pad}xl_E = Elements(xl_L, {self.expr(s.start)}, {self.expr(s.stop)})"]
        self.lane_vars.add(s.var)
        self.element_var, self.gathered = s.var, {}
        value = self.expr(s.value)
        lines += [f"{pad}{element} = xl_E.gather({names.py(name)})" for name, element in self.gathered.items()]
        self.element_var, self.gathered = None, {}
        self.lane_vars.add(s.name)
        return lines + [f"{pad}xl_L = xl_E", f"{pad}{names.py(s.var)} = xl_L.index", f"{pad}xl_v = {value}",
                        f"{pad}xl_L = xl_E.outer",
                        f"{pad}{names.py(s.name)} = xl_E.reduce(xl_v, {dtype_of(s.value.type)}, {s.op!r})",
                        f"{pad}xl_L.end()"]

    # ---- the statement itself
    def _open(self, var: str, body: list[str], pieces: str, values: str = "") -> list[str]:
        """Working copies of the arrays the code touches, then the iterations (the bounds were
        evaluated once before: emit_python.py) in pieces of at most vec.CHUNK, so a long range
        runs in bounded memory and --timeout can stop it between pieces: the code under
        np.errstate (wrap-around is meant), then the piece into `xl_pieces` (vec.Pieces)."""
        lines = [f"xl_pieces = Pieces({pieces})"]
        for name, base in self.arrays.items():
            elem = base.type.elem
            lines.append(f"xl_a_{names.py(name)} = np.array({self.scalar.expr_Var(base)}, dtype={dtype_of(elem)})")
        lines += ["for xl_L in lane_chunks(xl_lo, xl_hi):", "    with np.errstate(all='ignore'):",
                  f"        {names.py(var)} = xl_L.index"]
        lines += ["        " + line for line in body]
        return lines + [f"    xl_pieces.add(xl_L{values})"]

    def lanes(self, s: ir.Lanes, mark: str) -> list[str]:
        body = self.block(s.body, 0)
        lines = self._open(s.var, body, '"loop"')
        for name in sorted(self.written):
            lines.append(f"{self.scalar.expr_Var(self.arrays[name])}[:] = xl_a_{names.py(name)}.tolist()")
        lines.append(f"xl_pieces.result(){mark}")
        return lines

    def reduce(self, s: ir.Reduce, mark: str) -> list[str]:
        self.line = s.loc.line
        value = self.expr(s.value)
        lines = self._open(s.var, [f"xl_v = {value}"], f"{s.op!r}, {dtype_of(s.value.type)}", ", xl_v")
        return lines + [f"{names.py(s.name)} = xl_pieces.result(){mark}"]
