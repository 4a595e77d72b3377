"""Expressions and literals of every type: leaves (names, array,
tensor and pool elements, literals), operators, casts, intrinsics, builtin and helper calls, the
error-prone forms (raw indexes, shift amounts, divisors) as often as the program's risk."""

from __future__ import annotations
from .model import Arr, Ctx, E, F32_EDGES, I32_EDGES, INT_MAX, INT_MIN, Sym, U32_EDGES, _U32_LITERAL, f32


class ExpressionGen:
    """Generator productions: expressions and literals of every type (a mixin of Generator, base.py)."""

    def int_lit(self, t: str) -> E:
        if t == "u32":
            v = self.pick(U32_EDGES) if self.chance(0.7) else self.rng.randrange(0, 1 << 32)
            text = f"0x{v:X}u" if self.chance(0.3) else f"{v}u"
            return E(text, const=True)
        v = self.pick(I32_EDGES) if self.chance(0.7) else self.rng.randrange(INT_MIN, INT_MAX + 1)
        if v < 0:
            return E(f"(-{-v})", const=True, flex=True)
        text = f"0x{v:X}" if self.chance(0.2) else (f"{v:_}" if self.chance(0.1) else str(v))
        return E(text, const=True, flex=True)

    def float_lit(self) -> E:
        if self.chance(0.75):
            text = self.pick(F32_EDGES)
        else:
            x = f32(self.rng.uniform(-1000.0, 1000.0) if self.chance(0.7) else self.rng.uniform(-1e6, 1e6))
            text = repr(abs(x)) if x != 0 else "0.0"
            if x < 0:
                text = "-" + text
        if "." not in text and "e" not in text:
            text += ".0"
        if text.startswith("-"):
            return E(f"(-{text[1:]})", const=True)
        return E(text, const=True)

    def member(self, t: str) -> E:
        members = self.enums.get(t) or self.flagsets[t]
        m = self.pick(members)
        return E(f"{t}.{m}" if self.chance(0.3) else m, const=True)

    def literal(self, t) -> E:
        k = self.kind(t)
        if k in ("i32", "u32"):
            return self.int_lit(k)
        if k == "f32":
            return self.float_lit()
        if k == "bool":
            return E(self.pick(["true", "false"]), const=True)
        return self.member(t)

    def scalars_of(self, ctx: Ctx, t) -> list[Sym]:
        """Named scalar values of type t readable in ctx (consts, params, locals, fields, shared)."""
        out = [s for s in self.consts if s.type == t]
        out += [s for s in self.params if s.type == t]
        out += [s for s in ctx.visible() if s.type == t]
        if ctx.sees_request:
            out += [s for s in self.fields if s.type == t]
            out += [s for s in self.shared if s.type == t]
        return out

    def arrays_of(self, ctx: Ctx, elem=None, exact: Arr | None = None) -> list[Sym]:
        pool = [s for s in ctx.visible() if isinstance(s.type, Arr)]
        if ctx.sees_request:
            pool += [s for s in self.fields + self.shared if isinstance(s.type, Arr)]
        if exact is not None:
            return [s for s in pool if s.type.elem == exact.elem and s.type.length == exact.length]
        return [s for s in pool if elem is None or s.type.elem == elem]

    def leaf(self, ctx: Ctx, t) -> E:
        options = []
        named = self.scalars_of(ctx, t)
        arrays = self.arrays_of(ctx, t)
        if named:
            options += ["named"] * 4
        if arrays:
            options += ["elem"] * 2
        if t == "i32" and ctx.sees_request:
            options.append("req_id")
        if t == "f32" and self.tensors and ctx.kind != "init":
            options += ["tensor"] * 2
        if self.pools_of(ctx, t):
            options += ["pool"] * 2
        options += ["lit"] * 2
        choice = self.pick(options)
        if choice == "pool":
            return E(self.pool_read(ctx, self.pick(self.pools_of(ctx, t))))
        if choice == "tensor":
            name, dims = self.pick(self.tensors)
            indices = [self.index(ctx, Arr("f32", d, str(d))).text for d in dims]
            return E(f"{name}[{', '.join(indices)}]")
        if choice == "named":
            s = self.pick(named)
            return E(s.name, const=any(s is c for c in self.consts))
        if choice == "elem":
            a = self.pick(arrays)
            return E(f"{a.name}[{self.elem_index(ctx, a)}]")
        if choice == "req_id":
            return E("req_id")
        return self.literal(t)

    def pools_of(self, ctx: Ctx, t) -> list:
        """Pools of element type t this code may read: per-request stages only."""
        return [p for p in self.pools if p.elem == t] if ctx.kind == "stage" else []

    def page_index(self, ctx: Ctx, pages: int) -> str:
        """A page: mostly the one the page manager grants this request first, else any index."""
        if self.chance(0.65):
            return f"(req_id % {pages})"
        return self.index(ctx, Arr("i32", pages, str(pages))).text

    def pool_indices(self, ctx: Ctx, pool, at: dict | None = None) -> tuple[str, ...]:
        """Indices of a pool element; in a lanes loop, a pool the iterations write is read only
        where each writes it (the checker's rule). `at`: fixed indices by dimension."""
        if ctx.lanes is not None and pool.name in ctx.lanes:
            return ctx.lanes[pool.name]
        at = at or {}
        indices = [at.get(0) or self.page_index(ctx, pool.dims[0])]
        indices += [at.get(k) or self.index(ctx, Arr("i32", d, str(d))).text for k, d in enumerate(pool.dims) if k]
        return tuple(indices)

    def pool_read(self, ctx: Ctx, pool, at: dict | None = None) -> str:
        """A pool element, mostly read only where the request owns the page (`?:` evaluates one
        branch), sometimes whatever the owner: NOT_OWNER now and then."""
        indices = self.pool_indices(ctx, pool, at)
        element = f"{pool.name}[{', '.join(indices)}]"
        if self.chance(0.85):
            return f"({self.owner}[{indices[0]}] == req_id ? {element} : {self.literal(pool.elem).text})"
        return element

    def elem_index(self, ctx: Ctx, a: Sym) -> str:
        """An index of array `a`; in a lanes loop, an array the iterations write is read only
        where each writes it (the checker's rule)."""
        if ctx.lanes is not None and a.name in ctx.lanes:
            return ctx.lanes[a.name]
        return self.index(ctx, a.type).text

    def index(self, ctx: Ctx, arr: Arr) -> E:
        """An index for arr: in range by construction (mostly) or dynamic and possibly out of range."""
        n = arr.length
        loop_vars = [s for s in ctx.visible() if s.loop_range is not None]
        r = self.rng.random()
        if r < 0.25 or ctx.depth_left <= 0:
            return E(str(self.rng.randrange(n)), const=True, flex=True)
        if r < 0.45 and loop_vars:
            return E(self.pick(loop_vars).name)  # in range, or not, by the loop's bounds
        ctx.depth_left -= 1
        try:
            t = "u32" if self.chance(0.3) else "i32"
            u = "u" if t == "u32" else ""
            base = self.expr(ctx, t, 1)
            if self.risky():
                # raw (usually out of range), or an i32 remainder (negative for negative operands)
                e = base if self.chance(0.5) else E(f"({base.text} % {n}{u})", base.const, base.flex)
            elif t == "u32" and self.chance(0.4):
                e = E(f"({base.text} % {n}u)", base.const, base.flex)
            elif n & (n - 1) == 0 and self.chance(0.5):
                e = E(f"({base.text} & {n - 1}{u})", base.const, base.flex)
            else:
                e = E(f"clamp({base.text}, 0{u}, {n - 1}{u})", base.const, True)
        finally:
            ctx.depth_left += 1
        if e.const:  # a constant index must be in range (checker); keep it a literal
            return E(str(self.rng.randrange(n)), const=True, flex=True)
        return e

    def expr(self, ctx: Ctx, t, depth: int) -> E:
        if depth <= 0 or ctx.depth_left <= 0 or self.chance(0.2):
            return self.leaf(ctx, t)
        k = self.kind(t)
        gen = {"i32": self.int_expr, "u32": self.int_expr, "f32": self.float_expr, "bool": self.bool_expr,
               "enum": self.enum_expr, "flags": self.flags_expr}[k]
        ctx.depth_left -= 1
        try:
            return gen(ctx, t, depth - 1)
        finally:
            ctx.depth_left += 1

    def common(self, ctx: Ctx, t, d: int):
        """Productions every type has: a conditional, a helper call (when one returns t)."""
        r = self.rng.random()
        if r < 0.5:
            c, a, b = self.expr(ctx, "bool", d), self.expr(ctx, t, d), self.expr(ctx, t, d)
            return E(f"({c.text} ? {a.text} : {b.text})", c.const and a.const and b.const, c.flex or a.flex or b.flex)
        call = self.helper_call(ctx, t, d)
        if call is not None:
            return call
        return self.leaf(ctx, t)

    def helper_call(self, ctx: Ctx, ret, d: int) -> E | None:
        if ctx.lane_parallel:  # lane-parallel code calls scalar builtins only
            return None
        candidates = [h for i, h in enumerate(self.helpers) if h.ret == ret and i < ctx.fn_index]
        self.rng.shuffle(candidates)
        for h in candidates:
            args = []
            for prm in h.params:
                if isinstance(prm.type, Arr):
                    arrays = self.arrays_of(ctx, exact=prm.type)
                    if not arrays:
                        break
                    args.append(self.pick(arrays).name)
                else:
                    args.append(self.expr(ctx, prm.type, d).text)
            else:
                return E(f"{h.name}({', '.join(args)})")  # arguments are typed by the parameters
        return None

    def shift_amount(self, ctx: Ctx, d: int) -> E:
        t = "u32" if self.chance(0.3) else "i32"
        suffix = "u" if t == "u32" else ""
        if self.risky():
            if self.chance(0.4):  # an out-of-range constant (or one at the edge)
                v = self.pick([32, 33, 40, 31, 0] + ([-1, -32] if t == "i32" else [0xFFFFFFFF]))
                return E(f"(-{-v})" if v < 0 else f"{v}{suffix}", True, t == "i32")
            return self.expr(ctx, t, d)  # raw
        if self.chance(0.4):
            return E(f"{self.rng.randrange(32)}{suffix}", True, t == "i32")
        a = self.expr(ctx, t, d)
        return E(f"({a.text} & 31{suffix})", a.const, a.flex)

    def divisor(self, ctx: Ctx, t: str, d: int) -> E:
        if self.risky():
            return self.int_lit(t) if self.chance(0.3) else self.expr(ctx, t, d)  # may be 0
        if self.chance(0.3):
            lit = self.int_lit(t)
            return lit if lit.text not in ("0", "0u", "0x0", "0x0u") else E("(-1)" if t == "i32" else "7u", True, t == "i32")
        b = self.expr(ctx, t, d)
        return E(f"({b.text} | 1{'u' if t == 'u32' else ''})", b.const, b.flex)

    def cast_from(self, ctx: Ctx, target: str, d: int) -> E:
        """`x as target` from a random source type."""
        sources = {"i32": ["u32", "f32", "bool", "i32"] + list(self.enums) + list(self.flagsets),
                   "u32": ["i32", "f32", "bool", "u32"] + list(self.enums) + list(self.flagsets),
                   "f32": ["i32", "u32", "bool", "f32"]}[target]
        src = self.pick(sources)
        a = self.expr(ctx, src, d)
        if src == "f32" and target != "f32" and not self.risky():  # in range (a NaN still fails)
            lo, hi = self.pick({"i32": [("(-1000.0)", "1000.0"), ("(-2147483648.0)", "2147483520.0"), ("(-1.0e9)", "1.0e9")],
                                "u32": [("0.0", "4294967040.0"), ("(-0.99)", "1000.5"), ("(-0.5)", "4294967040.0")]}[target])
            a = E(f"clamp({a.text}, {lo}, {hi})", a.const, a.flex)
        if target == "u32" and a.flex and src in ("i32", "bool"):
            # `as u32` would make the operand's unsuffixed literals u32: pin them to i32 first
            return E(f"(({a.text} as i32) as u32)", a.const)
        return E(f"({a.text} as {target})", a.const)  # a cast passes its own type down: not flexible

    def int_expr(self, ctx: Ctx, t: str, d: int) -> E:
        r = self.rng.random()
        if r < 0.32:
            op = self.pick(["+", "-", "*", "&", "|", "^", "+", "-"])
            a, b = self.expr(ctx, t, d), self.expr(ctx, t, d)
            return E(f"({a.text} {op}{self.sep()}{b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.42:
            op = self.pick(["/", "%"])
            a, b = self.expr(ctx, t, d), self.divisor(ctx, t, d)
            return E(f"({a.text} {op}{self.sep()}{b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.50:
            op = self.pick(["<<", ">>"])
            a, b = self.expr(ctx, t, d), self.shift_amount(ctx, d)
            return E(f"({a.text} {op}{self.sep()}{b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.56:
            op = self.pick(["-", "~"])
            a = self.expr(ctx, t, d)
            if op == "-" and t == "u32" and _U32_LITERAL.fullmatch(a.text):
                op = "~"  # `-3u` is a literal that does not fit in u32 (a compile-time error)
            return E(f"({op}{a.text})", a.const, a.flex)
        if r < 0.68:
            return self.cast_from(ctx, t, d)
        if r < 0.78:
            return self.intrinsic(ctx, t, d)
        if r < 0.88:
            b = self.builtin_call(ctx, t, d)
            if b is not None:
                return b
        return self.common(ctx, t, d)

    def intrinsic(self, ctx: Ctx, t: str, d: int) -> E:
        names = ["min", "max", "clamp"] + (["abs"] if t in ("i32", "f32") else []) + (["sqrt"] * 2 if t == "f32" else [])
        name = self.pick(names)
        n = {"min": 2, "max": 2, "clamp": 3, "abs": 1, "sqrt": 1}[name]
        args = [self.expr(ctx, t, d) for _ in range(n)]
        return E(f"{name}({', '.join(a.text for a in args)})", all(a.const for a in args), any(a.flex for a in args))

    def builtin_call(self, ctx: Ctx, t: str, d: int) -> E | None:
        if t == "f32":  # the exact math builtins, on edge values and ordinary ones alike
            a = self.expr(ctx, "f32", d)
            return E(f"{self.pick(['exp', 'log', 'tanh', 'rsqrt', 'sigmoid'])}({a.text})", False, a.flex)
        if t == "u32":
            a = self.expr(ctx, "u32", d)
            return E(f"hash_u32({a.text})", False, a.flex)
        if t != "i32":
            return None
        options = ["target", "draft"]
        if ctx.kind == "stage" and not ctx.lane_parallel and len(self.arrays_of(ctx, "i32")) >= 1:
            options.append("verify")
        which = self.pick(options)
        if which == "verify":
            arrays = self.arrays_of(ctx, "i32")
            a, b = self.pick(arrays), self.pick(arrays)
            n = self.expr(ctx, "i32", d) if self.risky() else E(str(self.rng.randrange(min(a.type.length, b.type.length) + 1)))
            return E(f"verify_prefix({a.name}, {b.name}, {n.text})", False, True)
        seed, pos, prev = self.expr(ctx, "u32", d), self.expr(ctx, "i32", d), self.expr(ctx, "i32", d)
        vocab = self.expr(ctx, "i32", d) if self.risky() else E(str(self.pick([2, 3, 7, 100, 1000, 32000, INT_MAX])))
        if which == "target":
            return E(f"target_token({seed.text}, {pos.text}, {prev.text}, {vocab.text})", False, True)
        agree = self.expr(ctx, "f32", d) if self.chance(0.5) else self.float_lit()
        return E(f"draft_token({seed.text}, {pos.text}, {prev.text}, {vocab.text}, {agree.text})", False, True)

    def float_expr(self, ctx: Ctx, t: str, d: int) -> E:
        r = self.rng.random()
        if r < 0.4:
            op = self.pick(["+", "-", "*", "/", "+", "*"])
            a, b = self.expr(ctx, "f32", d), self.expr(ctx, "f32", d)
            return E(f"({a.text} {op}{self.sep()}{b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.47:
            a = self.expr(ctx, "f32", d)
            return E(f"(-{a.text})", a.const, a.flex)
        if r < 0.62:
            return self.cast_from(ctx, "f32", d)
        if r < 0.75:
            return self.intrinsic(ctx, "f32", d)
        if r < 0.85:
            return self.builtin_call(ctx, "f32", d)
        return self.common(ctx, t, d)

    def bool_expr(self, ctx: Ctx, t: str, d: int) -> E:
        r = self.rng.random()
        if r < 0.4:
            ot = self.pick(self.all_types() + ["i32", "u32", "f32", "i32"])
            k = self.kind(ot)
            ops = ["==", "!="] + (["<", "<=", ">", ">="] if k in ("i32", "u32", "f32") else [])
            a, b = self.expr(ctx, ot, d), self.expr(ctx, ot, d)
            return E(f"({a.text} {self.pick(ops)} {b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.62:
            a, b = self.expr(ctx, "bool", d), self.expr(ctx, "bool", d)
            return E(f"({a.text} {self.pick(['&&', '||'])}{self.sep()}{b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.7:
            a = self.expr(ctx, "bool", d)
            return E(f"(!{a.text})", a.const, a.flex)
        if r < 0.8 and self.flagsets:
            ft = self.pick(self.flagsets)
            a, b = self.expr(ctx, ft, d), self.expr(ctx, ft, d)
            return E(f"({a.text} has {b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.86:
            paired = self.paired_tests(ctx)
            if paired is not None:
                return paired
        return self.common(ctx, t, d)

    def paired_tests(self, ctx: Ctx) -> E | None:
        """Two tests of one value against constants, joined by && or ||: `(f == F.A) && (f has B)`,
        `(x != 3) || ((x & 6) == 2)`. Random operands almost never test one value twice, and such
        pairs (often mutually exclusive) are what C++ compilers fold, and once refused to compile."""
        types = [t for t in ["i32", "u32"] + list(self.flagsets) if self.scalars_of(ctx, t)]
        if not types:
            return None
        t = self.pick(types)
        x = self.pick(self.scalars_of(ctx, t)).name
        if t in self.flagsets:
            def value() -> str:
                picked = {self.member(t).text for _ in range(self.rng.randrange(1, 3))}
                return " | ".join(sorted(picked))

            tests = [lambda: f"({x} {self.pick(['==', '!='])} {value()})", lambda: f"({x} has {value()})",
                     lambda: f"(!({x} has {value()}))",
                     lambda: f"(({x} & {value()}) {self.pick(['==', '!='])} {value()})"]
        else:
            suffix = "u" if t == "u32" else ""

            def value() -> str:
                return f"{self.pick([0, 1, 2, 3, 4, 6, 7, 8, 255])}{suffix}"

            tests = [lambda: f"({x} {self.pick(['==', '!='])} {value()})",
                     lambda: f"(({x} & {value()}) {self.pick(['==', '!='])} {value()})"]
        first, second = self.pick(tests)(), self.pick(tests)()
        return E(f"({first} {self.pick(['&&', '||'])} {second})", const=any(c.name == x for c in self.consts))

    def enum_expr(self, ctx: Ctx, t: str, d: int) -> E:
        return self.common(ctx, t, d)

    def flags_expr(self, ctx: Ctx, t: str, d: int) -> E:
        r = self.rng.random()
        if r < 0.45:
            a, b = self.expr(ctx, t, d), self.expr(ctx, t, d)
            return E(f"({a.text} {self.pick(['|', '&', '^'])} {b.text})", a.const and b.const, a.flex or b.flex)
        if r < 0.6:
            a = self.expr(ctx, t, d)
            return E(f"(~{a.text})", a.const, a.flex)
        return self.common(ctx, t, d)
