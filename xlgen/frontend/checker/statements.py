"""Statements: lets, assignments, if, for, break, continue, return, calls;
scopes and the names locals may take."""

from __future__ import annotations
from .. import ast as A
from ...core import ir
from ...core.diagnostics import Loc, did_you_mean
from ...core.ir import BOOL, I32
from .rules import COLLECTIVE_TYPES, Context, Local, MAX_LOOP_TRIP, _names_in, _reserved


class StatementRules:
    """The Checker's rules for statements (a mixin of Checker, program.py)."""

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
            if isinstance(r, tuple):  # a proc's body (procs.py)
                out.extend(r)
            elif r is not None:
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

    def _declare_quietly(self, ctx: Context, name: str, loc: Loc, t) -> None:
        """After a rejected declaration, make the name known (type None: unknown) so that
        its uses do not add an 'unknown name' error to the one already reported."""
        if ctx.lookup(name) is None and name not in self.globals and name not in self.members and name != "req_id":
            ctx.scopes[-1][name] = Local(t, loc, used=True)

    def stmt_Assign(self, s: A.Assign, ctx: Context):
        if self._names_pool(s.target, ctx):
            return self._pool_store(s, (s.index,) if s.index is not None else (), ctx)
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

    def stmt_MultiAssign(self, s: A.MultiAssign, ctx: Context):
        if self._names_pool(s.target, ctx):
            return self._pool_store(s, s.indices, ctx)
        target = self._assign_target(s.target, s.loc, ctx)
        if target is not None:
            what = "an array: index it with one index" if isinstance(target.type, ir.ArrayType) else "a pool"
            self.error(s.loc, f"'{s.target}' is not {what}")
        for i in s.indices:
            self.expr(i, ctx)
        self.expr(s.value, ctx)
        return None

    def _names_pool(self, name: str, ctx: Context) -> bool:
        g = self.globals.get(name)
        return g is not None and g.kind == "pool" and ctx.lookup(name) is None

    def _pool_store(self, s, index_nodes, ctx: Context):
        """`p[i0, ...] = e`: a pool element, with '=' only (a read-modify-write is written out,
        so its read is an access the rules see like any other)."""
        if not index_nodes:
            pool = self.pools.get(s.target)
            shape = ", ".join("i" + str(k) for k in range(len(pool.dims))) if pool else "..."
            self.error(s.loc, f"pool '{s.target}' is written one element at a time: '{s.target}[{shape}] = ...'")
            self.expr(s.value, ctx)
            return None
        access = self._pool_access(s.target, index_nodes, s.loc, ctx, "written")
        if access is None:
            self.expr(s.value, ctx)
            return None
        pool, indices, checked = access
        if s.op != "=":
            self.error(s.loc, f"a pool element is written with '=' only, not '{s.op}' (write "
                              f"'{s.target}[...] = {s.target}[...] {s.op[:-1]} ...')")
            self.expr(s.value, ctx)
            return None
        value = self.expr(s.value, ctx, pool.elem)
        if value is None or not self._same(pool.elem, value.type, s.value.loc, f"pool '{s.target}'"):
            return None
        if ctx.lanes is not None and not self._lanes_pool_write(s, ctx, pool, indices, index_nodes):
            return None
        return ir.PoolStore(pool, indices, checked, value, s.loc)

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
        start = self._loop_bound(s.start, "a loop's start", ctx)
        stop = self._loop_bound(s.stop, "a loop's bound", ctx)
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

    def _loop_bound(self, node: A.Node, what: str, ctx: Context) -> int | None:
        """A `for` loop's start or bound: a constant (a local there is named as the reason)."""
        local = next((name for name in sorted(_names_in(node)) if ctx.lookup(name) is not None), None)
        if local is None:
            return self._const_int(node, what)
        ctx.lookup(local).used = True
        self.error(node.loc, f"{what} must be a constant, and '{local}' is a local (loop to a constant "
                             f"and 'break', or use 'lanes for', whose bounds may be any value)")
        return None

    def stmt_Break(self, s: A.Break, ctx: Context):
        if ctx.loop_depth == ctx.loop_floor:
            self.error(s.loc, "'break' outside a loop" + (" of the proc" if ctx.loop_floor else ""))
            return None
        if ctx.lanes is not None and ctx.loop_depth == ctx.lanes.loop_depth:
            self.error(s.loc, "'break' cannot leave a lanes loop (its iterations are independent)")
            return None
        return ir.Break(s.loc)

    def stmt_Continue(self, s: A.Continue, ctx: Context):
        if ctx.loop_depth == ctx.loop_floor:
            self.error(s.loc, "'continue' outside a loop" + (" of the proc" if ctx.loop_floor else ""))
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
        if s.call.func in self.procs or (s.call.func in self.globals and self.globals[s.call.func].kind == "proc"):
            return self._use_proc(s.call, ctx)
        call = self.expr(s.call, ctx)
        if call is None:
            return None
        if not isinstance(call, ir.Call):
            self.error(s.loc, f"the result of '{s.call.func}' is unused ('{s.call.func}' has no effect on its own)")
            return None
        if call.type is not None and not call.builtin:
            self.sink.warning(s.loc, f"the result of '{call.func}' is discarded")
        return ir.ExprStmt(call, s.loc)
