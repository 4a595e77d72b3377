"""Parallel code: collective stages' collectives and shared writes (docs/semantics.md
§13.1), lanes loops and reductions (§13.2): where they may be, and the rules that make
their results independent of the order."""

from __future__ import annotations
from .. import ast as A
from ...core import ir
from ...core.diagnostics import Loc, did_you_mean
from ...core.ir import F32, I32
from .rules import COLLECTIVE_TYPES, Context, LanesScope, Local, REDUCE_TYPES, _distinct_per_iteration, _loads_in, _mentions, element_key


class ParallelRules:
    """The Checker's rules for parallel code (a mixin of Checker, program.py)."""

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
            name, index = element_key(load)
            written = lanes.writes.get(name)
            if written is not None and index not in written:
                at = "indices" if isinstance(load, ir.PoolLoad) else "an index"
                self.error(load.loc, f"this iteration reads '{name}' at {at} the loop does not write it at; another "
                                     f"iteration may write that element (read an element only where this iteration "
                                     f"writes it)")
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

    def _lanes_pool_write(self, s, ctx: Context, pool: ir.Pool, indices, index_nodes) -> bool:
        """A pool written in a lanes loop: one index in a form one-to-one in i (as for arrays),
        so no two iterations write one element, whatever the other indices are (elements that
        differ in one index are different elements: every index is checked against its
        dimension). The others may change too, e.g. with an inner loop's variable: an iteration
        writing several elements (a K/V row per position) still writes only its own."""
        lanes = ctx.lanes
        inner = {name for scope in ctx.scopes[lanes.scope_depth - 1:] for name in scope}
        varying = [k for k, e in enumerate(indices) if _mentions(e, inner)]
        form = f"'{lanes.var}', '{lanes.var} + k' or 'c * {lanes.var} + k' (c odd, k the same in every iteration)"
        if not varying:
            self.error(s.loc, f"a lanes loop writes pool '{pool.name}' at the same element in every iteration; "
                              f"give one index the form {form}")
            return False
        if not any(_distinct_per_iteration(indices[k], lanes.var, inner) for k in varying):
            self.error(index_nodes[varying[0]].loc, f"a lanes loop writes pool '{pool.name}' at indices that may "
                                                    f"repeat across iterations; give one index the form {form}")
            return False
        lanes.writes.setdefault(pool.name, []).append(tuple(indices))
        return True

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
