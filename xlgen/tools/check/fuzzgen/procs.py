"""Procs (docs/language.md, `proc`): now and then a statement of a per-request stage is the
use of a new proc, whose body is stage code generated as usual in a context of its own.

- Value parameters take locals of the using code (its loop variables among them); the
  body reads them under the parameters' names.
- Array fields, tensors and pools the body names become parameters afterwards: the body's
  text names the parameter, the use passes the field (so the checker's substitution is
  what makes the program mean what the generator meant).
- The body's locals often take names the using stage already has (live or closed), so the
  checker's renaming is exercised.
- A body may use procs of its own, one level down.

Decided on a stream of its own per program (`random.Random(f"procs {seed}")`), so a seed
whose program has no procs writes the program it wrote before procs existed.
"""

from __future__ import annotations

import re

from .model import Arr, Ctx, NASTY_NAMES, Sym

MAX_PROC_NESTING = 2  # a proc in a proc's body, not deeper


class ProcGen:
    """Generator productions: procs and their uses (a mixin of Generator, base.py)."""

    def wants_proc(self, ctx: Ctx, depth: int) -> bool:
        """Whether this statement is the use of a new proc (only in programs drawn to have them)."""
        return (self.proc_rate > 0 and ctx.kind == "stage" and ctx.lanes is None and not ctx.reduction
                and depth > 0 and self.proc_nesting < MAX_PROC_NESTING and self.chance(self.proc_rate))

    def proc_use(self, ctx: Ctx, ind: int) -> list[str]:
        name = self.fresh("pr", avoid=NASTY_NAMES)
        params, args = [], []
        outer = [s for s in ctx.visible() if not isinstance(s.type, Arr)]
        scope = {}
        for s in self.rng.sample(outer, min(len(outer), self.rng.randrange(0, 4))):
            p = self.fresh("q")
            scope[p] = Sym(p, s.type, mutable=False, loop_range=s.loop_range)
            params.append(f"{p}: {s.type}")
            args.append(s.name)
        body_ctx = Ctx("stage")
        # The using code's names, free for the body's locals: the checker renames them apart.
        body_ctx.dead = [s.name for s in ctx.visible()] + list(ctx.dead)
        self.push(body_ctx, scope)
        self.proc_nesting += 1
        body = self.block(body_ctx, self.rng.randrange(1, 5), 2, 1)
        self.proc_nesting -= 1
        self.pop(body_ctx)
        text = "\n".join(body)
        named = [(f.name, f"{f.type.elem}[]") for f in self.fields if isinstance(f.type, Arr)]
        named += [(t, "tensor") for t, _ in self.tensors] + [(p.name, "pool") for p in self.pools]
        for global_name, kind in named:
            if global_name in NASTY_NAMES or not re.search(rf"\b{global_name}\b", text) or not self.chance(0.6):
                continue
            p = self.fresh("pa", avoid=NASTY_NAMES)
            text = re.sub(rf"\b{global_name}\b", p, text)
            params.append(f"{p}: {kind}")
            args.append(global_name)
        self.proc_lines += ["", f"proc {name}({', '.join(params)}) {{", *text.split("\n"), "}"]
        return [f"{'    ' * ind}{name}({', '.join(args)})"]
