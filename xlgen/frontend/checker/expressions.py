"""Expressions: names, literals, operators and their types, indices, tensors, pools,
calls, intrinsics; constant folding."""

from __future__ import annotations
from .. import ast as A
from ...core import ir
from ...core.diagnostics import Loc, did_you_mean
from ...core.ir import BOOL, F32, I32, U32
from .rules import ARITH_OPS, BIT_OPS, COLLECTIVE_TYPES, Context, EQ_OPS, Global, INTRINSIC_ARITY, LOGIC_OPS, MAX_FLOAT_DIGITS, ORDER_OPS, SHIFT_OPS, _flexible_int, _float_literal, _fold, _parse_int, _short


class ExpressionRules:
    """The Checker's rules for expressions (a mixin of Checker, program.py)."""

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
        if g.kind == "pool":
            pool = self.pools.get(name)
            shape = ", ".join("i" + str(k) for k in range(len(pool.dims))) if pool else "..."
            self.error(node.loc, f"pool '{name}' is read and written one element at a time: '{name}[{shape}]'; "
                                 f"it is not a value")
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
        kind = self.globals.get(node.base, Global("", node.loc)).kind
        if kind == "tensor" and ctx.lookup(node.base) is None:
            return self._tensor_load(node.base, (node.index,), node.loc, ctx)
        if kind == "pool" and ctx.lookup(node.base) is None:
            return self._pool_access(node.base, (node.index,), node.loc, ctx, "read")
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
        if g is not None and g.kind == "pool" and ctx.lookup(node.base) is None:
            return self._pool_access(node.base, node.indices, node.loc, ctx, "read")
        if g is None or g.kind != "tensor" or ctx.lookup(node.base) is not None:
            for i in node.indices:
                self.expr(i, ctx)
            what = ("an array: index it with one index" if g is not None and g.kind.endswith("field")
                    else "a tensor or a pool")
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

    def _pool_access(self, name: str, index_nodes, loc: Loc, ctx: Context, verb: str):
        """A pool element's indices, checked against the dimensions: (pool, indices, checked),
        or None after an error. `verb`: "read" or "written", for the messages."""
        self.used_globals.add(name)
        pool = self.pools.get(name)
        if not ctx.reaches_pools:
            where = {"fn": "a function", "arbiter": "an arbiter", "collective": "a collective stage",
                     "guard": "a guard", "done": "'done when'", "const": "a constant expression",
                     "init": "an initial value"}.get(ctx.kind, "this place")
            self.error(loc, f"pool '{name}' can be {verb} only in per-request stages (each request reaches only "
                            f"the pages it owns while requests run apart), not in {where}")
            pool = None
        elif pool is not None and len(index_nodes) != len(pool.dims):
            self.error(loc, f"pool '{name}' has {len(pool.dims)} dimension{'s' if len(pool.dims) != 1 else ''} "
                            f"{list(pool.dims)}, indexed with {len(index_nodes)}")
            pool = None
        if pool is None:  # rejected here, or its declaration was, with an error
            for i in index_nodes:
                self.expr(i, ctx)
            return None
        indices, checked = [], []
        for k, (n, d) in enumerate(zip(index_nodes, pool.dims)):
            index, check = self._index(n, ir.ArrayType(pool.elem, d), name, ctx, f"dimension {k} of pool '{name}'")
            if index is None:
                return None
            indices.append(index)
            checked.append(check)
        if verb == "read":
            return ir.PoolLoad(pool, tuple(indices), tuple(checked), pool.elem, loc)
        return pool, tuple(indices), tuple(checked)

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
            elif g.kind == "proc":
                self.error(node.loc, f"proc '{name}' has no value; use it as a statement: '{name}(...)'")
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

    def _same(self, want, got, loc: Loc, what: str) -> bool:
        if want is None or got is None or want == got:
            return True
        hint = ""
        if ir.is_numeric(want) and ir.is_numeric(got):
            hint = f"; convert with 'as {want}'"
        self.error(loc, f"{what} has type {want}, but the value is {got}{hint}")
        return False
