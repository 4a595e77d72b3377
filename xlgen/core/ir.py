"""The typed IR: what the checker produces and every emitter consumes.

Every name is resolved (a Var says whether it is a local, a request field, a
shared field or a launch parameter), every expression carries its type, and
constants are folded to values. Compound assignments are desugared. Emitters
walk these nodes with a table from node kind / operator to target code.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Union

from .diagnostics import NOWHERE, Loc

# ---- types ----------------------------------------------------------------------


@dataclass(frozen=True)
class Scalar:
    name: str  # "i32" | "u32" | "f32" | "bool"

    def __str__(self) -> str:
        return self.name


I32, U32, F32, BOOL = Scalar("i32"), Scalar("u32"), Scalar("f32"), Scalar("bool")
SCALARS = {t.name: t for t in (I32, U32, F32, BOOL)}


@dataclass(frozen=True)
class EnumType:
    """An enum (values 0..n-1) or, with is_flags, a flag set (bit i = member i)."""

    name: str
    members: tuple[str, ...]
    is_flags: bool = False

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArrayType:
    elem: Union[Scalar, EnumType]
    length: int | None  # None: any length (builtin parameters only)

    def __str__(self) -> str:
        return f"{self.elem}[{'' if self.length is None else self.length}]"


Type = Union[Scalar, EnumType, ArrayType]


def is_int(t) -> bool:
    return t in (I32, U32)


def is_numeric(t) -> bool:
    return t in (I32, U32, F32)


def storage_word(t) -> str:
    """How a scalar is stored in a 32-bit word: 'i' signed, 'u' unsigned, 'f' binary32."""
    if t == F32:
        return "f"
    if t == I32 or (isinstance(t, EnumType) and not t.is_flags):
        return "i"
    return "u"


# ---- expressions ------------------------------------------------------------------


@dataclass(frozen=True)
class Expr:
    pass


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool  # ints already wrapped to the type; f32 already rounded
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)
    name: str | None = None  # the constant or enum member this came from, for readable output


# Where a variable lives. Emitters map each kind to an access path.
LOCAL, FIELD, SHARED, PARAM, REQ_ID = "local", "field", "shared", "param", "req_id"


@dataclass(frozen=True)
class Var(Expr):
    kind: str
    name: str
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Load(Expr):
    """`base[index]`; `checked` is False when the index is statically in range."""

    base: Var
    index: Expr
    type: Type
    checked: bool = True
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class TensorLoad(Expr):
    """`t[i, j, ...]`: an element of a read-only tensor bound at launch. `checked[k]` is
    False where index k is statically in range. Elements are stored row-major."""

    tensor: str
    indices: tuple[Expr, ...]
    dims: tuple[int, ...]
    checked: tuple[bool, ...]
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class PoolLoad(Expr):
    """`p[i0, i1, ...]`: an element of a pool (launch-wide storage, row-major). Each index is
    checked against its dimension (`checked[k]` False: statically in range), then the owner:
    page `i0` must belong to the reading request (docs/semantics.md §13.3)."""

    pool: "Pool"
    indices: tuple[Expr, ...]
    checked: tuple[bool, ...]
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "-", "!", "~"
    operand: Expr
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # + - * / % << >> & | ^ == != < <= > >= && || has
    left: Expr
    right: Expr
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    then: Expr
    otherwise: Expr
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Intrinsic(Expr):
    name: str  # min, max, abs, clamp, sqrt
    args: tuple[Expr, ...]
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Call(Expr):
    """A call of a helper function (`builtin=False`) or a prelude builtin."""

    func: str
    args: tuple[Expr, ...]
    type: Type | None
    builtin: bool = False
    warp: bool = False
    loc: Loc = field(default=NOWHERE, compare=False)


def may_read_shared(e: Expr) -> bool:
    """Whether evaluating `e` may read shared state: a shared variable, or a call of a
    helper (whose body is not looked into: conservatively yes)."""
    if isinstance(e, Var):
        return e.kind == SHARED
    if isinstance(e, Load):
        return e.base.kind == SHARED or may_read_shared(e.index)
    if isinstance(e, TensorLoad):
        return any(may_read_shared(i) for i in e.indices)
    if isinstance(e, PoolLoad):
        return True  # its owner check reads the owner array
    if isinstance(e, Call) and not e.builtin:
        return True
    children = {Unary: ("operand",), Binary: ("left", "right"), Select: ("cond", "then", "otherwise"),
                Cast: ("operand",)}.get(type(e), ())
    args = e.args if isinstance(e, (Intrinsic, Call)) else ()
    return any(may_read_shared(getattr(e, name)) for name in children) or any(may_read_shared(a) for a in args)


# Builtins of the prelude that never raise: the exact math functions (NaN or inf where undefined)
# and the hash (xlgen/semantics/builtins.py and xl_runtime.cuh; tests/test_builtins_infallible.py
# checks both). No error test follows their calls.
INFALLIBLE_BUILTINS = frozenset({"exp", "log", "tanh", "sigmoid", "rsqrt", "hash_u32"})


def infallible_call(e) -> bool:
    """A call of a builtin that never raises (its arguments still may)."""
    return isinstance(e, Call) and e.builtin and e.func in INFALLIBLE_BUILTINS


def may_raise(e) -> bool:
    """Can evaluating this expression raise a runtime error?"""
    if e is None:
        return False
    if isinstance(e, Load):
        return e.checked or may_raise(e.index)
    if isinstance(e, TensorLoad):
        return any(e.checked) or any(may_raise(i) for i in e.indices)
    if isinstance(e, PoolLoad):
        return True  # NOT_OWNER
    if infallible_call(e):
        return any(may_raise(a) for a in e.args)
    if isinstance(e, Call):
        return True  # helpers and builtins may raise inside
    if isinstance(e, Binary):
        if e.op in ("/", "%") and e.type != F32 or e.op in ("<<", ">>"):
            return True
        return may_raise(e.left) or may_raise(e.right)
    if isinstance(e, Cast):
        if e.operand.type == F32 and is_int(e.type):
            return True
        return may_raise(e.operand)
    if isinstance(e, Unary):
        return may_raise(e.operand)
    if isinstance(e, Select):
        return may_raise(e.cond) or may_raise(e.then) or may_raise(e.otherwise)
    if isinstance(e, Intrinsic):
        return any(may_raise(a) for a in e.args)
    return False


def local_condition(guard: Expr | None) -> Expr | None:
    """A necessary condition of `guard` that reads no shared state, or None when there is
    none (no guard, or every part reads shared state): the local conjuncts of an `&&` chain.
    The GPU evaluates it before phase 2 to skip requests whose phase-2 guards cannot hold.
    A conjunct counts only when nothing evaluated before it can raise: `a[i] > 0 && flag`
    with `flag` false still fails when `a[i]` does (found by fuzzing: seed 5523)."""
    if guard is None:
        return None
    if not may_read_shared(guard):
        return guard
    if isinstance(guard, Binary) and guard.op == "&&":
        left = local_condition(guard.left)
        right = local_condition(guard.right) if not may_raise(guard.left) else None
        if left is None or right is None:
            return left if right is None else right
        return Binary("&&", left, right, BOOL, guard.loc)
    return None


# ---- statements -------------------------------------------------------------------


@dataclass(frozen=True)
class Stmt:
    pass


@dataclass(frozen=True)
class Let(Stmt):
    name: str
    type: Type
    value: Expr
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Assign(Stmt):
    target: Var
    index: Expr | None
    value: Expr
    checked: bool = True  # index check needed
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class PoolStore(Stmt):
    """`p[i0, i1, ...] = value`: the value, then each index (checked like PoolLoad's), then
    the owner check, then the store."""

    pool: "Pool"
    indices: tuple[Expr, ...]
    checked: tuple[bool, ...]
    value: Expr
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class If(Stmt):
    arms: tuple[tuple[Expr, tuple[Stmt, ...]], ...]
    otherwise: tuple[Stmt, ...]
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class For(Stmt):
    var: str
    start: int
    stop: int
    body: tuple[Stmt, ...]
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Lanes(Stmt):
    """`lanes for var in start..stop { body }`: independent iterations spread over the lanes
    of the request's warp (docs/semantics.md §13.2). The checker has proved that no two
    iterations write the same element and that none reads an element another writes."""

    var: str
    start: Expr
    stop: Expr
    body: tuple[Stmt, ...]
    loc: Loc = field(default=NOWHERE, compare=False)

    @property
    def by_warp(self) -> bool:
        """Does an iteration hold a reduction? Then each iteration needs a whole warp: the
        warp runs them one after another (its lanes share each reduction)."""
        return any(isinstance(s, Reduce) for s in statements(self.body))


# Reductions over an index range (docs/semantics.md §13.2): `let name = op(var in start..stop: value)`.
# sum: lane l of 32 adds the elements l, l + 32, ... in order, then a fixed butterfly;
# max/min: by IEEE totalOrder with every NaN one value, greater than +inf;
# argmax/argmin: the least index holding the greatest/least element.
REDUCE_OPS = ("sum", "max", "min", "argmax", "argmin")
REDUCE_LANES = 32  # the width of the defined order of a sum: a warp


@dataclass(frozen=True)
class Reduce(Stmt):
    name: str
    op: str  # one of REDUCE_OPS
    var: str
    start: Expr
    stop: Expr
    value: Expr
    type: Type  # the result's: the element type, or i32 for argmax/argmin
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Break(Stmt):
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Continue(Stmt):
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Return(Stmt):
    value: Expr
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Collective(Stmt):
    """`let name = op(value)` at the top level of a collective stage: every participating
    request contributes `value`; `name` gets the collective's result (docs/semantics.md §13.1).
    `type` is the result's type; `value.type` the contribution's."""

    name: str
    op: str  # one of COLLECTIVE_OPS
    value: Expr
    type: Type
    loc: Loc = field(default=NOWHERE, compare=False)


# Collective operations over the participants of a collective stage, in request-id order.
# scan: exclusive prefix sum; sum; count (of true); min_of/max_of (IEEE totalOrder for f32);
# argmin/argmax: the req_id of the least/greatest contribution, ties to the lowest id.
COLLECTIVE_OPS = ("scan", "sum", "count", "min_of", "max_of", "argmin", "argmax")


# Collectives one pass may combine (the runtime's XL_COLL_WIDTH, xlgen/runtime/gpu.py's COLL_WIDTH).
COLLECTIVE_GROUP_MAX = 8


def local_names(e) -> set[str]:
    """The names of the locals an expression reads (calls' arguments included)."""
    if isinstance(e, Var):
        return {e.name} if e.kind == LOCAL else set()
    found = set()
    for name in getattr(e, "__dataclass_fields__", ()):
        value = getattr(e, name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, Expr):
                found |= local_names(v)
    return found


def collective_groups(body) -> tuple[list[list[Stmt]], list[list[Collective]]]:
    """A collective stage's body cut into segments at its collectives, and the collectives
    between them in groups that one pass combines: a run of collectives with nothing between
    them, where no contribution but the first reads an earlier one's result or may raise. Then
    every participant reaches the run's last collective exactly when it reaches the first, with
    the same contributions: the bits of one pass per collective (docs/gpu.md, phase 2 over the grid)."""
    segments: list[list[Stmt]] = [[]]
    groups: list[list[Collective]] = []
    for st in body:
        if not isinstance(st, Collective):
            segments[-1].append(st)
            continue
        group = groups[-1] if groups and not segments[-1] else None
        if (group is None or len(group) == COLLECTIVE_GROUP_MAX or may_raise(st.value)
                or local_names(st.value) & {c.name for c in group}):
            groups.append([st])
            segments.append([])
        else:
            group.append(st)
    return segments, groups


# Reductions that one pass takes together at most (each keeps its accumulator in registers).
REDUCTION_RUN_MAX = 8


def reduction_runs(stmts) -> list[list[Stmt]]:
    """A block's statements in runs that one pass over the elements computes: reductions side by
    side over the same range (equal bounds), where none reads an earlier one's result; every
    other statement a run of its own. Elements only read, so taking the run's elements together
    gives each reduction its own bits and its own first failing element; the results are then
    taken in program order (docs/gpu.md, "Reductions side by side")."""
    runs: list[list[Stmt]] = []
    for st in stmts:
        run = runs[-1] if runs else None
        if (isinstance(st, Reduce) and run and isinstance(run[0], Reduce) and len(run) < REDUCTION_RUN_MAX
                and (st.start, st.stop) == (run[0].start, run[0].stop)
                and not local_names(st.value) & {r.name for r in run}):  # (equal bounds: the first's, read before any)
            run.append(st)
        else:
            runs.append([st])
    return runs


@dataclass(frozen=True)
class Accumulate(Stmt):
    """`s += e` / `s -= e` on shared state in a collective stage: every request's
    contributions are added to the value from before the stage (integers wrap, so the order
    does not matter). `-=` is desugared to adding the wrapped negation."""

    target: Var
    index: Expr | None
    value: Expr
    checked: bool = True
    loc: Loc = field(default=NOWHERE, compare=False)


def statements(stmts):
    """Every statement of a list, nested ones included (those of `if`s and loops)."""
    stack = list(stmts)
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, If):
            stack.extend(x for _, body in s.arms for x in body)
            stack.extend(s.otherwise)
        elif isinstance(s, (For, Lanes)):
            stack.extend(s.body)


def writes_shared(stmts) -> bool:
    """Whether statements may write shared state: a claim (`=`) or a sum (`+=`) in a collective
    stage, at any depth (procs are inlined; functions cannot write state)."""
    return any(isinstance(s, Accumulate) or isinstance(s, Assign) and s.target.kind == SHARED
               for s in statements(stmts))


def fields_written(stages) -> set[str]:
    """The request fields the stages' bodies may write: their assignments (at any depth), and
    any array field passed to a call (conservatively: an array argument is a reference).
    Functions cannot write state and procs are inlined, so nothing else writes."""
    return {name for name in state_access([s.body for s in stages])[1] if not name.startswith("pool ")}


ANY_POOL = "pool *"  # (state_access) every pool: a helper's call, whose body is not looked into


def state_access(node, own_only: bool = False) -> tuple[set[str], set[str]]:
    """The request fields and pools (`pool <name>`, or ANY_POOL) a statement or expression may
    touch (read or write), and those it may write: assignments, array fields passed to a call (a
    reference), pool stores; a helper's call may touch and write any pool. `own_only`: an `if`'s
    conditions and a `for`'s bounds only, not the statements nested in them."""
    touched: set[str] = set()
    written: set[str] = set()
    stack: list = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, (tuple, list)):
            stack.extend(x)
            continue
        if own_only and x is node and isinstance(x, If):
            stack.extend(cond for cond, _ in x.arms)
            continue
        if own_only and x is node and isinstance(x, For):
            continue  # (constant bounds)
        if isinstance(x, Var) and x.kind == FIELD:
            touched.add(x.name)
        elif isinstance(x, Assign) and x.target.kind == FIELD:
            written.add(x.target.name)
        elif isinstance(x, (PoolLoad, PoolStore)):
            touched.add(f"pool {x.pool.name}")
            if isinstance(x, PoolStore):
                written.add(f"pool {x.pool.name}")
        elif isinstance(x, Call):
            written |= {a.name for a in x.args if isinstance(a, Var) and a.kind == FIELD and isinstance(a.type, ArrayType)}
            if not x.builtin:
                touched.add(ANY_POOL)
                written.add(ANY_POOL)
        if isinstance(x, (Stmt, Expr)):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__ if f not in ("loc", "type", "pool"))
    return touched | written, written


@dataclass(frozen=True)
class ExprStmt(Stmt):
    expr: Call
    loc: Loc = field(default=NOWHERE, compare=False)


# ---- declarations -------------------------------------------------------------------


@dataclass(frozen=True)
class ParamDecl:
    name: str
    type: Scalar
    default: int | float | bool
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class FieldDecl:
    name: str
    type: Type
    init: Expr | None  # a constant expression over consts and launch params; None: zero
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class FnParam:
    name: str
    type: Type


@dataclass(frozen=True)
class Builtin:
    name: str
    params: tuple[FnParam, ...]
    ret: Type | None
    warp: bool
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Tensor:
    """A read-only tensor bound at launch by name (docs/language.md, Tensors)."""

    name: str
    elem: Scalar
    dims: tuple[int, ...]
    loc: Loc = field(default=NOWHERE, compare=False)

    @property
    def size(self) -> int:
        return math.prod(self.dims)


@dataclass(frozen=True)
class Pool:
    """Launch-wide writable storage, zero at launch (docs/language.md, Pools). Page p (index 0)
    may be touched only by request `owner[p]`, `owner` a shared i32 array written in phase 2."""

    name: str
    elem: Scalar  # i32, u32 or f32
    dims: tuple[int, ...]
    owner: str
    loc: Loc = field(default=NOWHERE, compare=False)

    @property
    def size(self) -> int:
        return math.prod(self.dims)


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[FnParam, ...]
    ret: Type
    body: tuple[Stmt, ...]
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # "stage" | "arbiter" | "collective"
    guard: Expr | None
    body: tuple[Stmt, ...]
    index: int  # position among all stages; identifies the stage in traces and errors
    loc: Loc = field(default=NOWHERE, compare=False)

    @property
    def is_arbiter(self) -> bool:
        return self.kind == "arbiter"

    @property
    def is_collective(self) -> bool:
        return self.kind == "collective"

    @property
    def in_phase2(self) -> bool:
        """Arbiters and collective stages run after every request's per-request stages."""
        return self.kind != "stage"


@dataclass(frozen=True)
class Trace:
    stage: str
    fields: tuple[str, ...]
    index: int
    loc: Loc = field(default=NOWHERE, compare=False)


# ---- what the pipeline declares for the tools (they change no generated code) ----------


@dataclass(frozen=True)
class Output:
    """`output FIELD[COUNT]`: the request's output is the first COUNT elements of FIELD."""
    field: str
    count: str
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class MetricTerm:
    """AGG over FIELD: of the final state (stage None) or of STAGE's trace records."""
    agg: str  # one of METRIC_AGGREGATES
    field: str
    stage: str | None = None
    shared: bool = False  # FIELD is a shared field (final state only)


@dataclass(frozen=True)
class Metric:
    """`metric NAME[GROUP] = TERM [/ TERM]`: one value, and one per member of GROUP's enum."""
    name: str
    terms: tuple[MetricTerm, ...]  # one, or a numerator and a denominator
    group: str | None = None  # a request field of an enum type
    loc: Loc = field(default=NOWHERE, compare=False)


METRIC_AGGREGATES = ("sum", "mean", "min", "max", "var")


@dataclass(frozen=True)
class Tooling:
    """The declarations xlgen's tools read (sim, diff, bench, demo): docs/language.md."""
    output: Output | None = None
    progress: str | None = None  # a traced stage whose trace holds output.count
    metrics: tuple[Metric, ...] = ()
    companion: str | None = None  # the companion module's path (resolved against the declaring file)
    companion_loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Program:
    name: str
    main_file: str
    consts: dict[str, Const]
    params: tuple[ParamDecl, ...]
    enums: tuple[EnumType, ...]
    request_fields: tuple[FieldDecl, ...]
    shared_fields: tuple[FieldDecl, ...]
    builtins: dict[str, Builtin]
    functions: tuple[Function, ...]  # in dependency order: callees first
    stages: tuple[Stage, ...]
    traces: tuple[Trace, ...]
    done: Expr
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    library: bool = False  # checked on its own, without `pipeline NAME`: nothing to build
    tensors: tuple[Tensor, ...] = ()
    pools: tuple[Pool, ...] = ()
    tooling: Tooling = field(default_factory=Tooling)

    def field(self, name: str) -> FieldDecl:
        return next(f for f in self.request_fields if f.name == name)

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def pool_owner(self, pool: Pool) -> Var:
        """The shared i32 array a pool's owner check reads."""
        f = next(f for f in self.shared_fields if f.name == pool.owner)
        return Var(SHARED, f.name, f.type)

    @property
    def per_request_stages(self) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if not s.in_phase2)

    @property
    def phase2_stages(self) -> tuple[Stage, ...]:
        """Arbiters and collective stages, in declaration order."""
        return tuple(s for s in self.stages if s.in_phase2)

    @property
    def arbiter_stages(self) -> tuple[Stage, ...]:
        return tuple(s for s in self.stages if s.is_arbiter)
