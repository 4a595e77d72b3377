"""Whole programs: declarations (consts, enums, flag sets, params, tensors, pools,
request and shared fields), helpers, stages of every kind (a pool's page manager among
them), traces, `done when`; and the launches (params, tensor values, inputs, settings)."""

from __future__ import annotations
import math
import random
from ....core.ir import COLLECTIVE_OPS
from .model import Arr, Ctx, E, F32_INPUTS, Helper, I32_EDGES, INT_MAX, INT_MIN, Launch, POOL_NASTY_NAMES, Pool, SCALARS, Sym, U32_EDGES, struct_f32


class ProgramGen:
    """Generator productions: whole programs (a mixin of Generator, base.py)."""

    def declare(self) -> None:
        L = self.lines
        L.append(f"pipeline {self.pick(['fuzz', 'fuzz', 'fuzz', 'Request', 'std', 'float', 'M_PI', 'stage_s'])}"
                 if self.nasty else "pipeline fuzz")
        L.append("")
        # consts: array lengths first, then one or two of each scalar type
        for _ in range(self.rng.randrange(1, 3)):
            name = self.fresh("N")
            n = self.pick([1, 2, 3, 4, 4, 5, 8])
            self.consts.append(Sym(name, "i32", mutable=False, value=n, length_const=True))
            L.append(f"const {name}: i32 = {n}")
        for t in SCALARS:
            for _ in range(self.rng.randrange(0, 3)):
                name = self.fresh("C")
                value = self.literal(t) if t != "bool" else E(self.pick(["true", "false"]), True)
                if t == "i32" and self.consts and self.chance(0.3):
                    other = self.pick([c for c in self.consts if c.type == "i32"])
                    value = E(f"({other.name} * {self.pick([2, -3, 1000, 65537])})", True)
                self.consts.append(Sym(name, t, mutable=False))
                L.append(f"const {name}: {t} = {value.text}")
        # enums and flag sets
        for _ in range(self.rng.randrange(1, 3)):
            name = self.fresh("E")
            self.enums[name] = [self.fresh("M") for _ in range(self.rng.randrange(1, 5))]
            L.append(f"enum {name} {{ {', '.join(self.enums[name])} }}")
        for _ in range(self.rng.randrange(1, 3)):
            name = self.fresh("F")
            n = self.pick([1, 2, 3, 5, 8, 32]) if self.chance(0.9) else 31
            self.flagsets[name] = [self.fresh("X") for _ in range(n)]
            L.append(f"flags {name} {{ {', '.join(self.flagsets[name])}{',' if self.chance(0.2) else ''} }}")
        # params (after the types, so enum and flag params can have defaults)
        for t in list(SCALARS) + [self.pick(self.enums)] * self.rng.randrange(0, 2) + [self.pick(self.flagsets)] * self.rng.randrange(0, 2):
            name = self.fresh("P")
            self.params.append(Sym(name, t, mutable=False))
            L.append(f"param {name}: {t} = {self.literal(t).text}")
        for _ in range(self.rng.choice([0, 0, 1, 2])):  # weight tensors, bound at launch
            name = self.fresh("T")
            dims = tuple(self.pick([1, 2, 3, 4, 5, 8]) for _ in range(self.rng.randrange(1, 4)))
            self.tensors.append((name, dims))
            L.append(f"tensor {name}: f32[{', '.join(str(d) for d in dims)}]")
        owner_line = self.declare_pools()
        L.append("")
        # request fields: the round counter, then at least one scalar of every type and a few arrays
        self.count_field = self.fresh("count")
        fields = [Sym(self.count_field, "i32")]
        types = self.all_types() + [self.pick(SCALARS) for _ in range(self.rng.randrange(0, 4))]
        for t in types:
            fields.append(Sym(self.fresh("f"), t))
        for _ in range(self.rng.randrange(2, 5)):
            elem = self.pick(["i32", "i32", "u32", "f32", "bool"] + list(self.enums) + list(self.flagsets))
            fields.append(Sym(self.fresh("a"), self.array_type(elem)))
        self.rng.shuffle(fields)
        L.append("request {")
        for f in fields:
            L.append(f"    {f.name}: {self.type_text(f.type)}{self.field_init(f.type)}")
        L.append("}")
        self.fields = fields
        shared = [Sym(self.fresh("s"), self.pick(self.all_types())) for _ in range(self.rng.randrange(1, 4))]
        for _ in range(self.rng.randrange(0, 3)):
            shared.append(Sym(self.fresh("sa"), self.array_type(self.pick(["i32", "u32", "f32"]))))
        L.append("shared {")
        for f in shared:
            L.append(f"    {f.name}: {self.type_text(f.type)}{self.field_init(f.type)}")
        if owner_line:  # not among self.shared: only the page manager writes it
            L.append(owner_line)
        L.append("}")
        self.shared = shared

    def declare_pools(self) -> str | None:
        """Pools (in half the programs), all owned by one shared i32 array: their declarations,
        and the owner's line for the shared block."""
        # decided apart from the main stream: a seed without pools writes the program it wrote
        # before pools existed (the seeds docs and tests name still mean the same programs)
        if random.Random(f"pools {self.seed}").random() >= 0.5 or self.schedule_free:
            return None
        self.derived = self.derived + POOL_NASTY_NAMES
        pages = self.pick([1, 2, 3, 4, 6])
        self.owner = self.fresh("own")
        for _ in range(self.rng.randrange(1, 3)):
            name = self.fresh("pl")
            dims = (pages,) + tuple(self.pick([1, 2, 3, 4, 8, 40]) for _ in range(self.rng.randrange(0, 3)))
            pool = Pool(name, self.pick(["f32", "f32", "i32", "u32"]), dims, self.owner)
            self.pools.append(pool)
            self.lines.append(f"pool {name}: {pool.elem}[{', '.join(map(str, dims))}] owned by {self.owner}")
        length = pages + self.pick([0, 0, 0, 1, 3])
        init = self.pick([" = -1", " = -1", " = -1", "", " = 1"])  # without: request 0 owns every page
        return f"    {self.owner}: i32[{length}]{init}"

    def page_manager(self, name: str) -> list[str]:
        """An arbiter granting free pages to the requests (their 'own' page req_id % PAGES, or
        another now and then), freeing them, and sometimes taking one from its owner, whose next
        access then fails with NOT_OWNER. Freed and re-granted pages keep what was written."""
        pages, own, count = self.pools[0].dims[0], self.owner, self.count_field
        ctx = Ctx("arbiter")
        self.push(ctx)
        k = self.new_local(ctx, "k")
        free = self.pick([1, 3, 7])
        guard = f" when {self.expr(Ctx('guard', depth_left=3), 'bool', 1).text}" if self.chance(0.3) else ""
        lines = [f"arbiter {name}{guard} {{",
                 f"    for {k} in 0..{pages} {{",
                 f"        if {own}[{k}] < 0 && ({k} == req_id % {pages} || ((req_id * 7 + {k} * 3 + {count}) & 3) == 0) {{",
                 f"            {own}[{k}] = req_id",
                 f"        }} elif {own}[{k}] == req_id && ((req_id + {k} * 5 + {count}) & {free}) == 1 {{",
                 f"            {own}[{k}] = -1",
                 "        }",
                 "    }"]
        if self.chance(0.3):  # take a page, whoever owns it (an index that may be out of range)
            page = f"(req_id + {count}) % {pages}" if self.risky() else f"clamp({count} % {pages}, 0, {pages - 1})"
            lines.append(f"    if (({count} + req_id) & 3) == 2 {{")
            lines.append(f"        {own}[{page}] = req_id")
            lines.append("    }")
        lines += self.block(ctx, self.rng.randrange(0, 3), 1, 1)
        self.pop(ctx)
        return lines + ["}"]

    def array_type(self, elem: str) -> Arr:
        lens = [c for c in self.consts if getattr(c, "length_const", False)]
        if lens and self.chance(0.6):
            c = self.pick(lens)
            return Arr(elem, c.value, c.name)
        n = self.pick([1, 2, 3, 4, 6, 8, 16])
        return Arr(elem, n, str(n))

    def type_text(self, t) -> str:
        return t.decl() if isinstance(t, Arr) else t

    def field_init(self, t) -> str:
        """An initial value (mostly none): a literal, a const, a param, or a param-dependent expression."""
        elem = t.elem if isinstance(t, Arr) else t
        r = self.rng.random()
        if r < 0.5:
            return ""
        named = [s for s in self.consts + self.params if s.type == elem]
        if r < 0.75 or not named:
            return f" = {self.literal(elem).text}"
        s = self.pick(named)
        if self.kind(elem) in ("i32", "u32") and self.chance(0.5):
            return f" = {s.name} + {self.int_lit(elem).text}"  # wraps; cannot fail
        return f" = {s.name}"

    def helper(self, index: int, name: str) -> list[str]:
        params = []
        for _ in range(self.rng.randrange(1, 4)):
            arrays = [f.type for f in self.fields if isinstance(f.type, Arr)]
            if arrays and self.chance(0.25):
                t = self.pick(arrays)
            else:
                t = self.pick(self.all_types() + ["i32", "f32"])
            params.append(Sym(self.fresh("q"), t, mutable=False))
        ret = self.pick(self.all_types() + ["i32", "f32", "u32"])
        h = Helper(name, params, ret)
        ctx = Ctx("fn", fn_index=index, ret=ret)
        self.push(ctx, {p.name: p for p in params})
        body = self.block(ctx, self.rng.randrange(0, 5), 2, 1)
        final = self.expr(ctx, ret, 3)
        body.append(f"    return {final.text}")
        self.pop(ctx)
        sig = ", ".join(f"{p.name}: {self.type_text(p.type)}" for p in params)
        self.helpers.append(h)
        return [f"fn {name}({sig}) -> {ret} {{", *body, "}"]

    def stage(self, name: str, kind: str, first: bool) -> list[str]:
        guard = ""
        if not first and self.chance(0.7):
            gctx = Ctx("guard", depth_left=5)
            guard = f" when {self.expr(gctx, 'bool', self.rng.randrange(1, 4)).text}"
        ctx = Ctx(kind)
        self.push(ctx)
        body = []
        if first:
            body.append(f"    {self.count_field} += 1")
        body += self.block(ctx, self.rng.randrange(2, 8), 2, 1)
        for _ in range(self.rng.randrange(0, 4) if kind == "collective" else 0):
            body.append(self.collective_let(ctx))  # at the top level, between statements
            body += self.block(ctx, self.rng.randrange(0, 4), 2, 1)
        self.pop(ctx)
        return [f"{kind} {name}{guard} {{", *body, "}"]

    def collective_let(self, ctx: Ctx) -> str:
        """`let c = op(e)` in a collective stage (docs/semantics.md §13.1)."""
        op, t = self.pick([("scan", "i32"), ("scan", "u32"), ("sum", "i32"), ("sum", "u32"), ("count", "bool"),
                           ("min_of", "i32"), ("max_of", "u32"), ("min_of", "f32"), ("max_of", "f32"),
                           ("argmin", "i32"), ("argmax", "f32"), ("argmin", "u32")])
        value = self.expr(ctx, t, self.rng.randrange(1, 4))
        name = self.new_local(ctx, "c")
        result = "i32" if op in ("count", "argmin", "argmax") else t
        ctx.scopes[-1][name] = Sym(name, result)
        return f"    let {name} = {op}({value.text})"

    def program(self) -> str:
        # names of helpers and stages first, so that other names can collide with what they become
        # (a function may not be named after a collective: `sum(x)` calls the collective)
        helper_names = [self.fresh("h", avoid=COLLECTIVE_OPS) for _ in range(self.rng.randrange(1, 4))]
        kinds = ["stage"] * self.rng.randrange(2, 5) + ["arbiter"] * self.rng.choice([0, 1, 1, 2]) \
            + ["collective"] * self.rng.choice([0, 1, 1, 2])
        if self.schedule_free:
            kinds = [kind for kind in kinds if kind == "stage"]
        rest = kinds[1:]  # the first is the stage counting rounds; the others in any order
        self.rng.shuffle(rest)
        kinds = kinds[:1] + rest
        stages = [self.fresh({"stage": "s", "arbiter": "arb", "collective": "col"}[kind]) for kind in kinds]
        self.derived = [f"fn_{h}" for h in helper_names] + [f"{prefix}_{s}" for s in stages
                                                            for prefix in ("stage", "guard", "trace")]
        self.declare()
        if self.pools:  # their page manager, an arbiter
            at = self.rng.randrange(1, len(kinds) + 1)
            kinds.insert(at, "pages")
            stages.insert(at, self.fresh("pages"))
        L = self.lines
        for i, name in enumerate(helper_names):
            L.append("")
            L += self.helper(i, name)
        for i, (kind, name) in enumerate(zip(kinds, stages)):
            L.append("")
            L += self.page_manager(name) if kind == "pages" else self.stage(name, kind, first=(i == 0))
        L += self.proc_lines
        L.append("")
        names = [f.name for f in self.fields]
        for name in stages:
            if self.chance(0.85):
                k = self.rng.randrange(max(1, len(names) // 2), len(names) + 1)
                L.append(f"trace {name}: {', '.join(self.rng.sample(names, k))}")
        limit = self.rng.randrange(2, 7)
        stop = f"{self.count_field} >= {limit}"
        r = self.rng.random()
        if r < 0.6:
            L.append(f"done when {stop}")
        else:
            dctx = Ctx("done", depth_left=4)
            extra = self.expr(dctx, "bool", 3).text
            L.append(f"done when ({stop}) || {extra}" if r < 0.85 else f"done when {extra} || ({stop})")
        return "\n".join(L) + "\n"

    def value(self, t):
        k = self.kind(t)
        if k == "i32":
            return self.pick(I32_EDGES) if self.chance(0.6) else self.rng.randrange(INT_MIN, INT_MAX + 1)
        if k == "u32":
            return self.pick(U32_EDGES) if self.chance(0.6) else self.rng.randrange(0, 1 << 32)
        if k == "f32":
            return self.pick(F32_INPUTS) if self.chance(0.6) else self.rng.uniform(-1e4, 1e4)
        if k == "bool":
            return self.chance(0.5)
        if k == "enum":
            return self.rng.randrange(len(self.enums[t]))
        return self.rng.randrange(1 << len(self.flagsets[t]))

    def crowd_launch(self) -> Launch:
        """A launch of hundreds of requests (programs with a collective stage): its participants
        span many warps and blocks, and the collectives many chunks of a block. Drawn on a stream
        of its own, so the other launches of a seed stay what they were."""
        main, self.rng = self.rng, random.Random(f"crowd {self.seed}")
        try:
            launch = self.launch(requests=self.rng.randrange(150, 401))
            return Launch(launch.params, launch.inputs, self.pick([64, 128, 256, 512]), self.pick([2, 4, 8]))
        finally:
            self.rng = main

    def launch(self, requests: int | None = None) -> Launch:
        params = {p.name: self.value(p.type) for p in self.params if self.chance(0.5)}
        for name, dims in self.tensors:  # every tensor is bound: edge values and ordinary ones
            size = math.prod(dims)
            values = [self.value("f32") for _ in range(size)]
            params[name] = struct_f32(values).reshape(dims)
        inputs = []
        for _ in range(requests if requests is not None else self.rng.randrange(1, 7)):
            inp = {}
            for f in self.fields:
                if f.name == self.count_field:
                    if self.chance(0.05):
                        inp[f.name] = self.rng.randrange(-3, 10)
                    continue
                if not self.chance(0.6):
                    continue
                if isinstance(f.type, Arr):
                    inp[f.name] = [self.value(f.type.elem) for _ in range(self.rng.randrange(0, f.type.length + 1))]
                else:
                    inp[f.name] = self.value(f.type)
            inputs.append(inp)
        max_rounds = self.pick([50, 50, 50, 12, 6, 3, 1])
        return Launch(params, inputs, self.rng.randrange(1, 5), max_rounds)
