"""The untyped syntax tree: what the parser read, with a location on every node.

Nodes compare equal regardless of location, so parse -> print -> parse can be
checked with `==`. The checker (xlgen/frontend/checker/) turns this tree into the
typed IR (xlgen/core/ir.py); nothing downstream of the checker sees these nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.diagnostics import NOWHERE, Loc


def _loc():
    return field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Node:
    pass


# ---- expressions ---------------------------------------------------------------


@dataclass(frozen=True)
class IntLit(Node):
    text: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class FloatLit(Node):
    text: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class BoolLit(Node):
    value: bool
    loc: Loc = _loc()


@dataclass(frozen=True)
class Name(Node):
    id: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Member(Node):
    """`Enum.MEMBER` (a qualified enum or flag constant)."""

    base: str
    member: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Index(Node):
    base: str
    index: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class MultiIndex(Node):
    """`t[i, j, ...]`: an element of a tensor with two or more dimensions."""

    base: str
    indices: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class Reduction(Node):
    """`op(var in start..stop: value)`: sum, max, min, argmax or argmin over an index range."""

    op: str
    var: str
    start: Node
    stop: Node
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class Unary(Node):
    op: str
    operand: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Conditional(Node):
    cond: Node
    then: Node
    otherwise: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Cast(Node):
    operand: Node
    to: str
    loc: Loc = _loc()


# ---- types ------------------------------------------------------------------


@dataclass(frozen=True)
class TypeRef(Node):
    name: str
    length: Node | None = None  # array length (a constant expression)
    open_array: bool = False  # `T[]`, builtin parameters only
    loc: Loc = _loc()


# ---- statements -------------------------------------------------------------


@dataclass(frozen=True)
class Let(Node):
    name: str
    type: TypeRef | None
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Assign(Node):
    target: str
    index: Node | None
    op: str  # "=", "+=", ...
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class MultiAssign(Node):
    """`p[i, j, ...] = e`: an element of a pool with two or more dimensions."""

    target: str
    indices: tuple[Node, ...]
    op: str
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class If(Node):
    arms: tuple[tuple[Node, tuple[Node, ...]], ...]  # (condition, body) for if and each elif
    otherwise: tuple[Node, ...] | None
    loc: Loc = _loc()


@dataclass(frozen=True)
class For(Node):
    var: str
    start: Node
    stop: Node
    body: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class Lanes(Node):
    """`lanes for var in start..stop { body }`: independent iterations spread over the lanes."""

    var: str
    start: Node
    stop: Node
    body: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class Break(Node):
    loc: Loc = _loc()


@dataclass(frozen=True)
class Continue(Node):
    loc: Loc = _loc()


@dataclass(frozen=True)
class Return(Node):
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class CallStmt(Node):
    call: Call
    loc: Loc = _loc()


# ---- declarations -------------------------------------------------------------


@dataclass(frozen=True)
class Ident(Node):
    name: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Import(Node):
    path: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Const(Node):
    name: str
    type: TypeRef
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class Param(Node):
    name: str
    type: TypeRef
    value: Node
    loc: Loc = _loc()


@dataclass(frozen=True)
class EnumDecl(Node):
    name: str
    members: tuple[Ident, ...]
    is_flags: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True)
class Field(Node):
    name: str
    type: TypeRef
    init: Node | None
    loc: Loc = _loc()


@dataclass(frozen=True)
class StateBlock(Node):
    """`request { ... }` (per-request) or `shared { ... }` (one copy for all requests)."""

    kind: str  # "request" | "shared"
    fields: tuple[Field, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class FnParam(Node):
    name: str
    type: TypeRef
    loc: Loc = _loc()


@dataclass(frozen=True)
class BuiltinDecl(Node):
    name: str
    params: tuple[FnParam, ...]
    ret: TypeRef | None
    warp: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True)
class TensorDecl(Node):
    """`tensor NAME: f32[D0, D1, ...]`: read-only weights bound at launch."""

    name: str
    elem: str
    dims: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class PoolDecl(Node):
    """`pool NAME: T[D0, D1, ...] owned by OWNER`: launch-wide storage whose page p (the
    first index) only request OWNER[p] may read or write."""

    name: str
    elem: str
    dims: tuple[Node, ...]
    owner: Ident
    loc: Loc = _loc()


@dataclass(frozen=True)
class FnDecl(Node):
    name: str
    params: tuple[FnParam, ...]
    ret: TypeRef
    body: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class ProcDecl(Node):
    """`proc NAME(params) { body }`: a named piece of a per-request stage. A use of it is a
    statement; the checker puts the body there with the arguments in place of the parameters."""

    name: str
    params: tuple[FnParam, ...]
    body: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class StageDecl(Node):
    kind: str  # "stage" (per request) | "arbiter" (serial, request-id order) | "collective" (all at once)
    name: str
    guard: Node | None
    body: tuple[Node, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class TraceDecl(Node):
    stage: str
    fields: tuple[Ident, ...]
    loc: Loc = _loc()


@dataclass(frozen=True)
class DoneDecl(Node):
    cond: Node
    loc: Loc = _loc()


# ---- declarations for the tools (docs/language.md, "Declarations for the tools") ----


@dataclass(frozen=True)
class OutputDecl(Node):
    """`output FIELD[COUNT]`: a request's output is FIELD's first COUNT elements."""
    field: Ident
    count: Ident
    loc: Loc = _loc()


@dataclass(frozen=True)
class ProgressDecl(Node):
    """`progress STAGE`: each trace record of STAGE may bring new output."""
    stage: Ident
    loc: Loc = _loc()


@dataclass(frozen=True)
class MetricTerm(Node):
    """`AGG(FIELD)` over the final state, or `AGG(STAGE.FIELD)` over STAGE's trace records."""
    agg: Ident
    field: Ident
    stage: Ident | None = None
    loc: Loc = _loc()


@dataclass(frozen=True)
class MetricDecl(Node):
    """`metric NAME[GROUP] = TERM` or `... = TERM / TERM`."""
    name: str
    group: Ident | None
    terms: tuple[MetricTerm, ...]
    op: str | None = None  # the operator between two terms, as written ('/' is the only one accepted)
    loc: Loc = _loc()


@dataclass(frozen=True)
class CompanionDecl(Node):
    """`companion "FILE.py"`: the pipeline's Python companion module, relative to this file."""
    path: str
    loc: Loc = _loc()


@dataclass(frozen=True)
class Module(Node):
    pipeline: str | None
    items: tuple[Node, ...]
    file: str = field(default="", compare=False)
    loc: Loc = _loc()
    # Comments and blank lines for `xlgen fmt` (see xlgen/frontend/comments.py); not part of equality.
    comments: dict = field(default_factory=dict, compare=False, repr=False)
