"""What a runtime error record names (docs/semantics.md §12): the builtin, array, tensor,
pool or shared field a failing check was about, by an id every backend writes alike.

The ids number the program's subjects in a fixed order, from 1 (0: none): the prelude's
builtins first (so theirs never change: semantics/ops.py SUBJECT_*, xl_runtime.cuh
XL_SUBJECT_*), then request fields, shared fields, helpers' array parameters, tensors and
pools, each in declaration order. The emitters write a check's id into the code; the tools
map a record's id back to its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir

# A check's site packs its subject and a position (a dimension, a parameter, an operator):
# subject << SITE_SHIFT | position. What the generated code passes to a check.
SITE_SHIFT = 16


def site(subject: int, position: int = 0) -> int:
    return subject << SITE_SHIFT | position


@dataclass(frozen=True)
class Subject:
    kind: str  # "builtin", "request", "shared", "parameter", "tensor", "pool"
    name: str
    dims: tuple[int, ...] = ()  # an array's, tensor's or pool's lengths (a scalar: ())
    function: str | None = None  # a parameter's helper
    params: tuple[str, ...] = ()  # a builtin's parameter names

    def describe(self) -> str:
        """How an error message names it: `'tokens'`, `tensor 'w_up'`, `parameter 'a' of f`."""
        if self.kind in ("tensor", "pool", "builtin"):
            return f"{self.kind} '{self.name}'"
        if self.kind == "parameter":
            return f"parameter '{self.name}' of {self.function}"
        return f"'{self.name}'"


def subjects(program: ir.Program) -> list[Subject]:
    """The program's subjects; subject id k is element k - 1."""
    out = [Subject("builtin", b.name, params=tuple(p.name for p in b.params)) for b in program.builtins.values()]
    for kind, fields in (("request", program.request_fields), ("shared", program.shared_fields)):
        out += [Subject(kind, f.name, _dims(f.type)) for f in fields]
    for f in program.functions:
        out += [Subject("parameter", a.name, _dims(a.type), f.name) for a in f.params
                if isinstance(a.type, ir.ArrayType)]
    out += [Subject("tensor", t.name, t.dims) for t in program.tensors]
    out += [Subject("pool", p.name, p.dims) for p in program.pools]
    return out


def _dims(t: ir.Type) -> tuple[int, ...]:
    return (t.length,) if isinstance(t, ir.ArrayType) else ()


class Sites:
    """The sites of a program's checks, by what the emitters see: an array (a Var, inside
    helper `function` or a stage), a tensor's or a pool's dimension."""

    def __init__(self, program: ir.Program):
        self.ids = {(s.kind, s.function, s.name): k for k, s in enumerate(subjects(program), 1)}

    def array(self, var: ir.Var, function: str | None) -> int:
        kind = {ir.FIELD: "request", ir.SHARED: "shared", ir.LOCAL: "parameter"}.get(var.kind)
        return site(self.ids.get((kind, function if kind == "parameter" else None, var.name), 0))

    def of(self, kind: str, name: str, position: int = 0) -> int:
        return site(self.ids.get((kind, None, name), 0), position)


def subject(program: ir.Program, subject_id: int) -> Subject | None:
    table = subjects(program)
    return table[subject_id - 1] if 1 <= subject_id <= len(table) else None
