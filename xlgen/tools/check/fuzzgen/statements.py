"""Statements: lets, assignments, if, loops, calls, pool writes; lanes loops and
reductions (docs/semantics.md §13.2) with the checker's rules kept by construction."""

from __future__ import annotations
from .model import Arr, Ctx, E, Pool, Sym


class StatementGen:
    """Generator productions: statements (a mixin of Generator, base.py)."""

    def new_local(self, ctx: Ctx, prefix: str) -> str:
        if ctx.dead and self.chance(0.3):
            options = [n for n in ctx.dead if ctx.lookup(n) is None]
            if options:
                name = self.pick(options)
                ctx.dead.remove(name)
                return name
        return self.fresh(prefix)

    def push(self, ctx: Ctx, scope: dict | None = None) -> None:
        ctx.scopes.append(scope if scope is not None else {})

    def pop(self, ctx: Ctx) -> None:
        ctx.dead.extend(ctx.scopes.pop())

    def block(self, ctx: Ctx, n: int, depth: int, ind: int) -> list[str]:
        out = []
        for _ in range(n):
            out += self.stmt(ctx, depth, ind)
        return out

    def targets(self, ctx: Ctx) -> list[tuple[str, object, Sym]]:
        """Assignable places: (kind, element type, symbol)."""
        if ctx.lanes is not None:  # an iteration's own locals, and the elements it owns
            out = [("local", s.type, s) for scope in ctx.scopes[ctx.lane_scope:] for s in scope.values()
                   if s.mutable and not isinstance(s.type, Arr)]
            return out + [("elem", f.type.elem, f) for f in self.fields if f.name in ctx.lanes]
        out = []
        for s in ctx.visible():
            if s.mutable and not isinstance(s.type, Arr):
                out.append(("local", s.type, s))
        if ctx.kind in ("stage", "arbiter", "collective"):
            for s in self.fields:
                if s.name == self.count_field:
                    continue
                out.append(("elem" if isinstance(s.type, Arr) else "field", s.type.elem if isinstance(s.type, Arr) else s.type, s))
        if ctx.kind in ("arbiter", "collective"):
            for s in self.shared:
                out.append(("elem" if isinstance(s.type, Arr) else "field", s.type.elem if isinstance(s.type, Arr) else s.type, s))
        return out

    def stmt(self, ctx: Ctx, depth: int, ind: int) -> list[str]:
        pad = "    " * ind
        d = self.rng.randrange(1, 4)
        if self.wants_proc(ctx, depth):
            return self.proc_use(ctx, ind)
        if ctx.kind == "stage" and not ctx.reduction and depth > 0 and self.chance(0.12):
            if ctx.lanes is not None:  # a reduction in an iteration: the warp runs such iterations in turn
                return self.reduction(ctx, ind)
            return self.lanes_loop(ctx, ind) if self.chance(0.5) else self.reduction_run(ctx, ind)
        if ctx.kind == "stage" and self.pools and self.chance(0.25):
            lines = self.pool_write(ctx, ind, d)
            if lines:
                return lines
        r = self.rng.random()
        if depth <= 0:
            r = self.rng.random() * 0.55
        if r < 0.22:
            t = self.pick(self.all_types() + ["i32", "i32", "u32", "f32"])
            value = self.expr(ctx, t, d)
            name = self.new_local(ctx, "v")
            typed = self.chance(0.4)
            line = f"{pad}let {name}: {t} = {value.text}" if typed else f"{pad}let {name} = {value.text}"
            ctx.scopes[-1][name] = Sym(name, t)
            return [line]
        if r < 0.55:
            targets = self.targets(ctx)
            if not targets:
                return []
            kind, t, s = self.pick(targets)
            lhs = s.name if kind != "elem" else f"{s.name}[{self.elem_index(ctx, s)}]"
            k = self.kind(t)
            ops = {"i32": ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="],
                   "u32": ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="],
                   "f32": ["=", "+=", "-=", "*=", "/="], "bool": ["="], "enum": ["="],
                   "flags": ["=", "&=", "|=", "^="]}[k]
            op = self.pick(ops + ["="] * 3)
            if ctx.kind == "collective" and s in self.shared:  # claimed with '=', or summed (integers)
                mode = ctx.shared_modes.setdefault(s.name, self.pick(["=", "+="]) if k in ("i32", "u32") else "=")
                op = "=" if mode == "=" else self.pick(["+=", "-="])
            if op in ("<<=", ">>="):
                # the value is checked with the target's type as hint: keep the amount that type
                amount = self.expr(ctx, t, d)
                suffix = "u" if k == "u32" else ""
                value = E(f"({amount.text} & 31{suffix})") if self.chance(0.7) else amount
            elif op in ("/=", "%=") and k != "f32":
                value = self.divisor(ctx, t, d)
            else:
                value = self.expr(ctx, t, d)
            return [f"{pad}{lhs} {op} {value.text}"]
        if r < 0.75 and depth > 0:
            lines = []
            n_arms = self.pick([1, 1, 2, 3])
            for i in range(n_arms):
                cond = self.expr(ctx, "bool", d)
                head = "if" if i == 0 else "} elif"
                lines.append(f"{pad}{head} {cond.text} {{")
                self.push(ctx)
                lines += self.block(ctx, self.rng.randrange(0, 4), depth - 1, ind + 1)
                self.pop(ctx)
            if self.chance(0.5):
                lines.append(f"{pad}}} else {{")
                self.push(ctx)
                lines += self.block(ctx, self.rng.randrange(0, 4), depth - 1, ind + 1)
                self.pop(ctx)
            lines.append(f"{pad}}}")
            return lines
        if r < 0.87 and depth > 0:
            var = self.new_local(ctx, "i")
            lo = self.pick([0, 0, 0, 1, -2, 2, 5])
            hi = lo + self.pick([0, 1, 2, 3, 4, 5, 8, -1])
            lo_text, hi_text = (f"(-{-lo})" if lo < 0 else str(lo)), (f"(-{-hi})" if hi < 0 else str(hi))
            lens = [c for c in self.consts if getattr(c, "length_const", False)]
            if lens and self.chance(0.3):
                c = self.pick(lens)
                lo, hi, lo_text, hi_text = 0, c.value, "0", c.name
            lines = [f"{pad}for {var} in {lo_text}..{hi_text} {{"]
            self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=(lo, hi - 1))})
            ctx.loops += 1
            lines += self.block(ctx, self.rng.randrange(1, 4), depth - 1, ind + 1)
            if ctx.lanes is not None:
                pass  # an iteration of a lanes loop runs its nested loops to the end
            elif self.chance(0.5):
                cond = self.expr(ctx, "bool", d)
                lines += [f"{pad}    if {cond.text} {{", f"{pad}        {self.pick(['break', 'continue'])}", f"{pad}    }}"]
                lines += self.block(ctx, self.rng.randrange(0, 2), depth - 1, ind + 1)
            elif self.chance(0.1):
                lines.append(f"{pad}    {self.pick(['break', 'continue'])}")
            ctx.loops -= 1
            self.pop(ctx)
            lines.append(f"{pad}}}")
            return lines
        if r < 0.95 and ctx.kind == "fn":
            cond = self.expr(ctx, "bool", d)
            value = self.expr(ctx, ctx.ret, d)
            return [f"{pad}if {cond.text} {{", f"{pad}    return {value.text}", f"{pad}}}"]
        # a call for its effect (a builtin; sometimes verify_prefix directly in a stage)
        if ctx.kind == "stage" and not ctx.lane_parallel and self.arrays_of(ctx, "i32") and self.chance(0.5):
            arrays = self.arrays_of(ctx, "i32")
            a, b = self.pick(arrays), self.pick(arrays)
            limit = min(a.type.length, b.type.length)
            n = self.expr(ctx, "i32", d) if self.risky() else E(f"clamp({self.expr(ctx, 'i32', d).text}, 0, {limit})")
            return [f"{pad}verify_prefix({a.name}, {b.name}, {n.text})"]
        which = self.pick(["hash", "target", "draft"])
        call = self.builtin_call(ctx, "u32" if which == "hash" else "i32", d)
        if call is None or call.text.startswith("verify_prefix"):
            a = self.expr(ctx, "u32", d)
            call = E(f"hash_u32({a.text})")
        return [f"{pad}{call.text}"]

    def pool_write(self, ctx: Ctx, ind: int, d: int) -> list[str]:
        """`pool[page, ...] = e`, often under `if OWNER[page] == req_id` (then only an index can
        fail); in a lanes loop, only a pool the loop writes, where its iteration writes it."""
        if ctx.lanes is not None:
            written = [p for p in self.pools if p.name in ctx.lanes]
            if not written:
                return []
            pool = self.pick(written)
            return self.pool_store(ctx, pool, ctx.lanes[pool.name], self.expr(ctx, pool.elem, d), ind)
        pool = self.pick(self.pools)
        return self.pool_store(ctx, pool, self.pool_indices(ctx, pool), self.expr(ctx, pool.elem, d), ind)

    def pool_store(self, ctx: Ctx, pool: Pool, indices: tuple, value: E, ind: int) -> list[str]:
        """The store, mostly under `if OWNER[page] == req_id` (then only an index can fail:
        NOT_OWNER comes now and then, not in every request's first round)."""
        pad = "    " * ind
        line = f"{pool.name}[{', '.join(indices)}] = {value.text}"
        if self.chance(0.85):
            return [f"{pad}if {self.owner}[{indices[0]}] == req_id {{", f"{pad}    {line}", f"{pad}}}"]
        return [pad + line]

    def invariant_index(self, ctx: Ctx, n: int) -> str:
        """An index the same in every iteration of the lanes loop about to open (made from
        what is visible outside it, and reading no array: the loop may write it). A const folds
        to a constant index, which the checker requires in range: a const is always clamped, only
        a run-time value may go out of range (then the iteration fails at run time)."""
        named = self.scalars_of(ctx, "i32")
        r = self.rng.random()
        if r < 0.35 or not named:
            return str(self.rng.randrange(n))
        if r < 0.7:
            return f"(req_id % {n})"
        sym = self.pick(named)
        folds = any(sym is c for c in self.consts)
        return sym.name if self.risky() and not folds else f"clamp({sym.name}, 0, {n - 1})"

    def lane_range(self, ctx: Ctx, length: int) -> tuple[str, str, tuple[int, int]]:
        """Bounds of a lanes loop or reduction: mostly the array's length, sometimes past
        it (iterations fail), empty, longer than a warp, or computed at run time."""
        lo = self.pick([0, 0, 0, 1, -1])
        hi = self.pick([length, length, length + 1, lo, 33, 40, 70])
        lo_text = f"(-{-lo})" if lo < 0 else str(lo)
        if self.chance(0.2):  # a bound known only at run time
            e = self.expr(ctx, "i32", 1)
            return lo_text, f"clamp({e.text}, -2, 45)", (lo, 44)
        return lo_text, str(hi), (lo, hi - 1)

    def lanes_loop(self, ctx: Ctx, ind: int) -> list[str]:
        pad = "    " * ind
        arrays = [f for f in self.fields if isinstance(f.type, Arr)]
        written = self.rng.sample(arrays, self.rng.randrange(0, min(2, len(arrays)) + 1)) if arrays else []
        pools = []  # (pool, the dimension indexed in the lanes form: the last, or any, the page's too)
        if self.pools and self.chance(0.5):
            pools = [(p, self.rng.randrange(len(p.dims)) if self.chance(0.3) else len(p.dims) - 1)
                     for p in self.rng.sample(self.pools, self.rng.randrange(1, len(self.pools) + 1))]
        lengths = [a.type.length for a in written] + [p.dims[k] for p, k in pools]
        length = min(lengths or [self.pick([4, 8, 40])])
        lo, hi, rng = self.lane_range(ctx, length)
        var = self.new_local(ctx, "i")

        def lane_index() -> str:  # `i`, `i + k`, `i - k`, `c * i + k` with c odd, k the same for every iteration
            k = self.pick(["0", "1", "(-1)"] + [s.name for s in self.scalars_of(ctx, "i32")][:3])
            form = self.pick(["{v}", "{v}", "{v} + {k}", "{k} + {v}", "{v} - {k}", "3 * {v} + {k}", "{v} * (-1) + {k}"])
            return "(" + form.format(v=var, k=k) + ")"

        offsets = {a.name: lane_index() for a in written}
        for pool, lane_dim in pools:  # one index of the lanes form, the others the same in every iteration
            offsets[pool.name] = tuple(lane_index() if k == lane_dim else self.invariant_index(ctx, d)
                                       for k, d in enumerate(pool.dims))
        saved = (ctx.lanes, ctx.lane_scope)
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=rng)})
        ctx.lanes, ctx.lane_scope = offsets, len(ctx.scopes) - 1
        ctx.loops += 1
        body = self.rows_head(ctx, var, ind + 1, length) if self.shape_rng.random() < 0.5 else []
        readable = [p for p in self.pools_of(ctx, "f32") + self.pools_of(ctx, "i32") if p.name not in offsets]
        if readable and self.page_rng.random() < 0.3:  # a stream of its own: older seeds unchanged
            body += self.page_sum(ctx, self.page_rng.choice(readable), ind + 1)
        body += self.block(ctx, self.rng.randrange(1, 5), 1, ind + 1)
        for a in written:  # every written array gets at least one store
            value = self.expr(ctx, a.type.elem, 2)
            body.append(f"{pad}    {a.name}[{offsets[a.name]}] = {value.text}")
        for pool, _ in pools:  # and every written pool
            body += self.pool_store(ctx, pool, offsets[pool.name], self.expr(ctx, pool.elem, 2), ind + 1)
        rows = [(p, k) for p, k in pools if len(p.dims) > 1]
        if rows and self.pool_rows_rng.random() < 0.3:  # a stream of its own: older seeds unchanged
            body += self.pool_row_store(ctx, *self.pool_rows_rng.choice(rows), offsets, ind + 1)
        ctx.loops -= 1
        ctx.lanes, ctx.lane_scope = saved
        self.pop(ctx)
        return [f"{pad}lanes for {var} in {lo}..{hi} {{", *body, f"{pad}}}"]

    def page_sum(self, ctx: Ctx, pool: Pool, ind: int) -> list[str]:
        """A local summed in turn over one page of a pool, as attention's scores are (`score += q[j]
        * kv[pg, h * 32 + j, s % 16]` for j in 0..32): an inner loop whose variable moves the other
        indices, the page the same in every step, so the C++ emitter checks the page once before the
        loop (emit_cpp._page_checked_once); mostly under `if OWNER[page] == req_id`, else NOT_OWNER
        (or INDEX, a page out of range) from the hoisted check. The local is then readable."""
        pad = "    " * ind
        page = self.page_index(ctx, pool.dims[0])  # (before the loop's names exist: it reads neither)
        acc, var = self.new_local(ctx, "acc"), self.new_local(ctx, "j")
        steps = self.page_rng.choice([16, 32, 5])
        start = self.literal(pool.elem).text
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=(0, steps - 1))})
        indices = [page] + [f"(({var} + {self.page_rng.randrange(d)}) % {d})" if self.page_rng.random() < 0.7
                            else str(self.page_rng.randrange(d)) for d in pool.dims[1:]]
        term = self.expr(ctx, pool.elem, 0).text
        self.pop(ctx)
        loop = [f"for {var} in 0..{steps} {{", f"    {acc} += {term} * {pool.name}[{', '.join(indices)}]", "}"]
        if self.page_rng.random() < 0.7:
            loop = [f"if {self.owner}[{page}] == req_id {{", *("    " + line for line in loop), "}"]
        ctx.scopes[-1][acc] = Sym(acc, pool.elem, mutable=True)
        return [f"{pad}let {acc} = {start}", *(pad + line for line in loop)]

    def pool_row_store(self, ctx: Ctx, pool: Pool, lane_dim: int, offsets: dict, ind: int) -> list[str]:
        """An iteration writing a row of its own elements, as the real pair's K/V store does
        (`kv[pages[t / PAGE], l, i, t % PAGE]` for each position t, a lane per i): an inner
        loop whose variable moves the other indices, the lanes-form index kept."""
        pad = "    " * ind
        var = self.new_local(ctx, "t")
        n = self.pool_rows_rng.choice([2, 3])
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=(0, n - 1))})
        indices = tuple(offsets[pool.name][k] if k == lane_dim else
                        f"(({var} + {self.invariant_index(ctx, d)}) % {d})" for k, d in enumerate(pool.dims))
        body = self.pool_store(ctx, pool, indices, self.expr(ctx, pool.elem, 2), ind + 1)
        self.pop(ctx)
        return [f"{pad}for {var} in 0..{n} {{", *body, f"{pad}}}"]

    def rows_head(self, ctx: Ctx, var: str, ind: int, length: int) -> list[str]:
        """The head of a matrix-vector iteration, as the real pair's passes write them: a row and
        a column from the iteration's index (`e / C`, `e % C`: the forms ranges.py bounds), then
        one to three sums of one type over the same constant range. Decided on a stream of its
        own (`shape_rng`), so programs without it are those their seeds always gave. C is at
        most half the loop's array length, so that most such loops have several positions per
        row: the weight-once mapping (backends/grouping.py) then runs them a row at a time."""
        pad = "    " * ind
        width = min(self.pick([2, 4, 8, 32]), max(2, 1 << max(length // 2, 1).bit_length() - 1))
        row, col = self.new_local(ctx, "t"), self.new_local(ctx, "c")
        lines = [f"{pad}let {row} = {var} / {width}", f"{pad}let {col} = {var} % {width}"]
        ctx.scopes[-1][row] = Sym(row, "i32", mutable=False)
        ctx.scopes[-1][col] = Sym(col, "i32", mutable=False)
        head_lets = []
        # then, now and then, lets computed from those (`row = t * H + i / HEAD`): of the
        # position alone, the row alone, or both, which the sums may read
        for _ in range(self.shape_rng.choice([0, 0, 1, 2])):
            form = self.shape_rng.choice(["{t} * 3 + 1", "{c} + 2", "{t} * {w} + {c}", "{c} / 2"])
            head_lets.append(name := self.new_local(ctx, "h"))
            lines.append(f"{pad}let {name} = " + form.format(t=row, c=col, w=width))
            ctx.scopes[-1][name] = Sym(name, "i32", mutable=False)
        # now and then (a stream of its own) a let the same over a tile of rows, as attention's
        # `t * H + i / HEAD` (grouping.Rows.per_tile: the column only over a multiple of 32)
        tile_let = None
        if self.tile_rng.random() < 0.3:
            form = self.tile_rng.choice(["{c} / 32", "{t} * 3 + {c} / 64", "{c} / 32 - {t}"])
            head_lets.append(tile_let := self.new_local(ctx, "h"))
            lines.append(f"{pad}let {tile_let} = " + form.format(t=row, c=col))
            ctx.scopes[-1][tile_let] = Sym(tile_let, "i32", mutable=False)
        if self.prelude_rng.random() < 0.3:  # a stream of its own: older seeds unchanged
            # now and then (a stream of its own) preludes that may read that let, as attention's
            # row maximum reads `row` (grouping.Rows.preludes_per_tile)
            shown = {tile_let} if tile_let and self.tile_prelude_rng.random() < 0.5 else set()
            if shown:
                lines += self.tile_prelude(ctx, tile_let, row, ind)
            lines += self.position_preludes(ctx, {var, col, *head_lets} - shown, row, ind)
        t, length = self.pick(["f32", "f32", "i32"]), self.pick([3, 32, 40, 64])
        # now and then (a stream of its own) a stop that reads the position or the row, as
        # attention's causal `0..lo + t + 1` (a weight-once tile's sums then stop each on its own)
        stop = str(length)
        if self.stop_rng.random() < 0.3:
            stop = self.stop_rng.choice(["min({t} + 1, {n})", "min({t} * 5 + 3, {n})", "min({c} * 2 + 1, {n})",
                                         "min({n} - {c}, {n})"]).format(t=row, c=col, n=length)
        for _ in range(self.rng.randrange(1, 4)):
            lines += self.reduction(ctx, ind, op="sum", t=t, bounds=("0", stop, (0, length - 1)))
        if self.matvec_rng.random() < 0.4:  # a stream of its own: older seeds unchanged
            lines += self.matvec_sum(ctx, row, col, ind)
        return lines

    def tile_prelude(self, ctx: Ctx, tile: str, position: str, ind: int) -> list[str]:
        """A maximum over the row of an array that a let the same over the tile's rows picks, up to
        a bound that reads the position: attention's `let m = max(s in 0..lo + t + 1: att[row *
        ctx + s])` (grouping.Rows.preludes_per_tile), which the sums after it may read."""
        rng = self.tile_prelude_rng
        written = ctx.lanes or {}
        arrays = [a for a in self.arrays_of(ctx, "f32") if a.name not in written]
        if not arrays:
            return []
        a, n = rng.choice(arrays), rng.choice([8, 32])
        length, s = a.type.length, self.fresh("s", nasty=False)
        name = self.new_local(ctx, "pm")
        ctx.scopes[-1][name] = Sym(name, "f32", mutable=False)
        return [f"{'    ' * ind}let {name} = max({s} in 0..min({position} + 1, {n}): "
                f"{a.name}[(({tile} * {n} + {s}) % {length} + {length}) % {length}])"]

    def position_preludes(self, ctx: Ctx, per_row: set[str], position: str, ind: int) -> list[str]:
        """A reduction or two reading the position but not the row, then now and then a let of
        them (a norm: `let ss = sum(j in 0..D: x[t * D + j] * x[t * D + j])`, `let n = rsqrt(ss /
        D as f32 + EPS)`), which the sums after them may read: a tile computes them once per
        position (grouping.Rows.preludes). Their elements and the let may fail (the tile then
        runs an iteration at a time). Generated with `per_row` (the loop variable, the row, the
        head's lets) out of sight, and no dead name taken again (one may be a hidden one's)."""
        rng = self.prelude_rng
        hidden = [(scope, name, scope.pop(name)) for scope in ctx.scopes for name in list(scope) if name in per_row]
        dead, ctx.dead = ctx.dead, type(ctx.dead)()
        try:
            lines = []
            for _ in range(rng.choice([1, 1, 2])):
                n = rng.choice([8, 32, 40])
                stop = rng.choice([str(n), f"min({position} + 1, {n})"])
                lines += self.reduction(ctx, ind, op=rng.choice(["sum", "sum", "max"]), t=rng.choice(["f32", "f32", "i32"]),
                                        bounds=("0", stop, (0, n - 1)))
            if rng.random() < 0.5:
                t = rng.choice(["f32", "i32"])
                name = self.new_local(ctx, "pn")
                lines.append(f"{'    ' * ind}let {name} = {self.expr(ctx, t, 2).text}")
                ctx.scopes[-1][name] = Sym(name, t, mutable=False)
            return lines
        finally:
            ctx.dead = dead
            for scope, name, sym in hidden:
                scope[name] = sym

    def matvec_sum(self, ctx: Ctx, position: str, row: str, ind: int) -> list[str]:
        """A sum as the real pair's matrix-vector loops write it, `w[row, j] * (x[position * n + j]
        * g[j])` or `w[row, j] * x[position * n + j]`: a weight read by the row, an activation by
        the position, a gain by neither (a weight-once tile reads each once for the tile's
        positions, rows and iterations: backends/grouping.py). Tensors and arrays the loop does
        not write, indices that cannot fail."""
        rng = self.matvec_rng
        written = ctx.lanes or {}
        arrays = [a for a in self.arrays_of(ctx, "f32") if a.name not in written]
        n = rng.choice([8, 32, 40])
        j = self.fresh("j", nasty=False)

        def read(lead: str | None) -> str | None:  # an element at (lead, j), lead an i32 >= 0
            options = [("tensor", x) for x in self.tensors] + [("array", a) for a in arrays]
            if not options:
                return None
            kind, x = rng.choice(options)
            flat = f"{lead} * {n} + {j}" if lead else j
            if kind == "array":
                return f"{x.name}[({flat}) % {x.type.length}]"
            name, dims = x
            if len(dims) == 1:
                return f"{name}[({flat}) % {dims[0]}]"
            first = ["0"] * (len(dims) - 2) + [f"{lead} % {dims[-2]}" if lead else "0"]
            return f"{name}[{', '.join(first)}, {j} % {dims[-1]}]"

        w, x, g = read(row), read(position), read(None)
        if w is None or x is None or g is None:
            return []
        value = f"{w} * ({x} * {g})" if rng.random() < 0.6 else f"{w} * {x}"
        name = self.fresh("mv", nasty=False)
        ctx.scopes[-1][name] = Sym(name, "f32")
        return [f"{'    ' * ind}let {name} = sum({j} in 0..{n}: {value})"]

    def reduction_run(self, ctx: Ctx, ind: int) -> list[str]:
        """A reduction, and now and then (a stream of its own) more right after it over the same
        range: a run that the CPU build and the GPU take in one pass (ir.reduction_runs), its
        elements failing in any of them."""
        lines = self.reduction(ctx, ind)
        for _ in range(self.runs_rng.choice([0, 0, 0, 1, 2, 3])):
            lines += self.reduction(ctx, ind, bounds=self.last_bounds)
        return lines

    def reduction(self, ctx: Ctx, ind: int, op: str | None = None, t: str | None = None, bounds=None) -> list[str]:
        op = op or self.pick(["sum", "sum", "max", "min", "argmax", "argmin"])
        t = t or self.pick(["f32", "f32", "i32", "u32"])
        # over a row of a pool, now and then (not one the enclosing lanes loop writes: read where written)
        rows = [p for p in self.pools if len(p.dims) > 1 and not (ctx.lanes and p.name in ctx.lanes)]
        row = self.pick(rows) if rows and self.chance(0.4) else None
        if row is not None:
            t = row.elem
        if bounds is not None:
            row = None
        lo, hi, rng = bounds or self.lane_range(ctx, row.dims[-1] if row else self.pick([3, 8, 32, 40]))
        self.last_bounds = (lo, hi, rng)  # (for reduction_run)
        var = self.new_local(ctx, "j")
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=rng)})
        ctx.reduction = True
        value = self.expr(ctx, t, self.rng.randrange(1, 4))
        if row is not None:
            element = self.pool_read(ctx, row, {len(row.dims) - 1: var})
            value = E(f"{element} * {value.text}" if t != "u32" or self.chance(0.5) else element)
        ctx.reduction = False
        self.pop(ctx)
        name = self.new_local(ctx, "red")
        ctx.scopes[-1][name] = Sym(name, "i32" if op.startswith("arg") else t)
        return [f"{'    ' * ind}let {name} = {op}({var} in {lo}..{hi}: {value.text})"]
