"""What the checker's parts share: the checking context (scopes, what the code may touch),
the language's fixed sets (operators, intrinsics, collectives, reductions, limits) and small
helpers over the AST and the IR (constant folding among them)."""

from __future__ import annotations
import math
from dataclasses import dataclass, field
from .. import ast as A
from ...core import ir
from ...core.diagnostics import Loc
from ...core.ir import BOOL, F32, I32, U32
from ..parser import KEYWORDS
from ...semantics.py_ops import evaluate_const
from ...semantics import ops


PRELUDE_NAME = "<prelude>"


MAX_LOOP_TRIP = 1 << 20  # a bound this large is almost certainly a mistake


# Longest chain of function calls (f calls g calls h ...). The simulator runs a call as a Python
# call and the GPU inlines it; a chain this long is a generated program gone wrong.
MAX_CALL_DEPTH = 100


RESERVED = {"req_id", "min", "max", "abs", "clamp", "sqrt"} | set(ir.SCALARS)


ARITH_OPS = {"+", "-", "*", "/", "%"}


BIT_OPS = {"&", "|", "^"}


SHIFT_OPS = {"<<", ">>"}


ORDER_OPS = {"<", "<=", ">", ">="}


EQ_OPS = {"==", "!="}


LOGIC_OPS = {"&&", "||"}


MAX_TENSOR_ELEMENTS = 1 << 28  # 1 GiB of f32: more is a mistake in a declaration (tensors and pools)
MAX_POOL_TOTAL_ELEMENTS = 1 << 29  # all pools together (every backend allocates them at once): 2 GiB
MAX_DIMENSIONS = 64  # of a tensor or pool: numpy's limit (the simulator shapes them as numpy arrays)


POOL_ELEMENTS = (I32, U32, F32)


# Reductions (`let x = sum(j in 0..n: e)`): the element types each takes, and the result's
# type (None: the element's).
REDUCE_TYPES = {"sum": ((I32, U32, F32), None), "max": ((I32, U32, F32), None), "min": ((I32, U32, F32), None),
                "argmax": ((I32, U32, F32), I32), "argmin": ((I32, U32, F32), I32)}


assert set(REDUCE_TYPES) == set(ir.REDUCE_OPS)


INTRINSIC_ARITY = {"min": 2, "max": 2, "abs": 1, "clamp": 3, "sqrt": 1}


# Collectives (`let x = scan(e)` at the top level of a collective stage): the types a
# contribution may have, and the result's type (None: the contribution's).
COLLECTIVE_TYPES = {
    "scan": ((I32, U32), None), "sum": ((I32, U32), None), "count": ((BOOL,), I32),
    "min_of": ((I32, U32, F32), None), "max_of": ((I32, U32, F32), None),
    "argmin": ((I32, U32, F32), I32), "argmax": ((I32, U32, F32), I32),
}


assert set(COLLECTIVE_TYPES) == set(ir.COLLECTIVE_OPS)


@dataclass
class Global:
    kind: str  # const, param, type, member, field, shared, builtin, fn, stage
    loc: Loc
    node: object = None


@dataclass
class Local:
    type: ir.Type
    loc: Loc
    mutable: bool = True
    used: bool = False
    value_range: tuple[int, int] | None = None  # known (min, max) of a loop variable


@dataclass
class LanesScope:
    """The `lanes for` loop being checked: its variable, where its body's scope starts, and
    the elements its iterations write (array name -> index expressions; pool name -> tuples
    of index expressions)."""

    var: str
    scope_depth: int
    loop_depth: int
    writes: dict[str, list] = field(default_factory=dict)


@dataclass
class Context:
    """What the code being checked may touch."""

    kind: str  # "stage", "arbiter", "collective", "fn", "guard", "done", "const", "init"
    ret: ir.Type | None = None
    scopes: list[dict[str, Local]] = field(default_factory=list)
    loop_depth: int = 0
    callees: set[str] = field(default_factory=set)
    # In a collective stage: how each shared field is written ("=" or "+=") and where first.
    shared_modes: dict[str, tuple[str, Loc]] = field(default_factory=dict)
    lanes: LanesScope | None = None  # inside a `lanes for` body
    reduction: str | None = None  # inside a reduction's element expression: its operation
    loop_floor: int = 0  # the loop depth where a proc's body starts: its break cannot leave it
    taken: set[str] = field(default_factory=set)  # in a stage: every name its code uses (procs.py)

    @property
    def lane_parallel(self) -> bool:
        """Code that runs once per lane (a lanes iteration or a reduction element)."""
        return self.lanes is not None or self.reduction is not None

    @property
    def reaches_pools(self) -> bool:
        """Pools are touched only in per-request stages, where requests run apart (phase 1)
        and each reaches only the pages it owns (docs/semantics.md §13.3)."""
        return self.kind == "stage"

    @property
    def sees_request(self) -> bool:
        return self.kind in ("stage", "arbiter", "collective", "guard", "done")

    @property
    def at_stage_top(self) -> bool:
        """Directly in a stage body: not inside an `if` or a loop."""
        return len(self.scopes) == 1 and self.loop_depth == 0

    @property
    def is_constant(self) -> bool:
        return self.kind in ("const", "init")

    def lookup(self, name: str) -> Local | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None


def _parse_int(text: str) -> tuple[int | None, bool]:
    """The value of an integer literal (None when it has no digits, as in `0x_`)."""
    unsigned = text.endswith("u")
    body = text[:-1] if unsigned else text
    body = body.replace("_", "")
    base = 16 if body[:2].lower() == "0x" else 10
    digits = body[2:] if base == 16 else body
    if not digits:
        return None, unsigned
    if len(digits.lstrip("0")) > 20:  # far beyond 32 bits (and int() refuses very long strings)
        return 1 << 80, unsigned
    return int(digits, base), unsigned


MAX_FLOAT_DIGITS = 1000


def _float_literal(text: str) -> float | None:
    """The f32 value of a float literal (None: too many digits to round exactly).

    Magnitudes far outside f32 are decided from the exponent alone, so that
    `1e999999999` costs nothing (exact rounding would build a 10**999999999).
    """
    mantissa, _, exp_text = text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    significant = (whole + frac).lstrip("0")
    if not significant:
        return 0.0
    if len(whole) + len(frac) > MAX_FLOAT_DIGITS:
        return None
    exp_digits = exp_text.lstrip("+-").lstrip("0")
    if len(exp_digits) > 6:
        return math.inf if not exp_text.startswith("-") else 0.0
    exp = int(exp_text) if exp_text else 0
    whole_digits = whole.lstrip("0")
    if whole_digits:
        order = len(whole_digits) - 1 + exp  # the value is about 10**order
    else:
        order = exp - (len(frac) - len(frac.lstrip("0")) + 1)
    if order > 39:  # f32's largest finite value is about 3.4e38
        return math.inf
    if order < -46:  # below half the smallest subnormal (about 1.4e-45): rounds to zero
        return 0.0
    return ops.decimal_to_f32(text)


def _short(text: str) -> str:
    """A literal as quoted in a message (very long ones abbreviated)."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]}"


def _reserved(name: str) -> str | None:
    """Why `name` cannot be declared, or None."""
    if name.startswith("xl_"):
        return "names starting with 'xl_' are reserved for generated code"
    if name in KEYWORDS:
        return f"'{name}' is a keyword and cannot be used as a name"
    if name in RESERVED:
        return f"'{name}' is a reserved name"
    return None


def _flexible_int(node: A.Node) -> bool:
    """An unsuffixed integer literal (maybe negated): it takes i32 or u32 from context."""
    if isinstance(node, A.IntLit):
        return not node.text.endswith("u")
    if isinstance(node, A.Unary) and node.op == "-":
        return _flexible_int(node.operand)
    return False


def _mentions_params(e: ir.Expr) -> bool:
    if isinstance(e, ir.Var):
        return True
    return any(_mentions_params(c) for c in _children(e))


def _names_in(node: A.Node) -> set[str]:
    """Every name an expression mentions (without recursing: expressions may be deep)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name):
            out.add(n.id)
        elif isinstance(n, A.Index):
            out.add(n.base)
        for value in vars(n).values():
            if isinstance(value, A.Node):
                stack.append(value)
            elif isinstance(value, tuple):
                stack.extend(v for v in value if isinstance(v, A.Node))
    return out


def _always_returns(stmts) -> bool:
    for s in stmts:
        if isinstance(s, A.Return):
            return True
        if isinstance(s, A.If) and s.otherwise is not None:
            if all(_always_returns(body) for _, body in s.arms) and _always_returns(s.otherwise):
                return True
    return False


def _fold(e: ir.Expr) -> ir.Expr:
    """Replace an operation on constants by its value (exactly as at run time).

    An operation that would raise at run time (1 / 0) is left alone: the error
    belongs to the run, where every backend reports it the same way.
    """
    if isinstance(e, (ir.Const, ir.Var, ir.Load, ir.Call, ir.TensorLoad, ir.PoolLoad)):
        return e
    children = _children(e)
    if not children or not all(isinstance(c, ir.Const) for c in children):
        return e
    try:
        value = evaluate_const(e)
    except ops.XlRuntimeError:
        return e
    return ir.Const(value, e.type, e.loc)


def _not_constant(e: ir.Expr, what: str) -> str:
    """The message for a compile-time value that did not fold: why, if evaluating it fails."""
    stack = [e]
    failure = None
    while stack:
        x = stack.pop()
        if isinstance(x, (ir.Var, ir.Load, ir.Call, ir.TensorLoad, ir.PoolLoad)):
            return f"{what} must be a constant expression"
        kids = _children(x)
        if failure is None and kids and all(isinstance(k, ir.Const) for k in kids):
            try:
                evaluate_const(x)
            except ops.XlRuntimeError as exc:
                failure = str(exc)
        stack.extend(kids)
    if failure is not None:
        return f"{what} cannot be computed at compile time: {failure}"
    return f"{what} must be a constant expression"


def _children(e: ir.Expr):
    if isinstance(e, ir.Unary):
        return (e.operand,)
    if isinstance(e, ir.Binary):
        return (e.left, e.right)
    if isinstance(e, ir.Select):
        return (e.cond, e.then, e.otherwise)
    if isinstance(e, ir.Cast):
        return (e.operand,)
    if isinstance(e, ir.Intrinsic):
        return e.args
    return ()


def _expr_children(e: ir.Expr):
    """Every sub-expression of e, loads' indices and calls' arguments included."""
    if isinstance(e, ir.Load):
        return (e.index,)
    if isinstance(e, (ir.TensorLoad, ir.PoolLoad)):
        return e.indices
    if isinstance(e, ir.Call):
        return e.args
    return _children(e)


def _stmt_exprs(s: ir.Stmt) -> tuple:
    """The expressions a statement evaluates itself (not those of its nested statements)."""
    if isinstance(s, (ir.Let, ir.Return, ir.Collective)):
        return (s.value,)
    if isinstance(s, (ir.Assign, ir.Accumulate)):
        return tuple(x for x in (s.value, s.index) if x is not None)
    if isinstance(s, ir.PoolStore):
        return (s.value, *s.indices)
    if isinstance(s, ir.ExprStmt):
        return (s.expr,)
    if isinstance(s, ir.If):
        return tuple(c for c, _ in s.arms)
    if isinstance(s, ir.Lanes):
        return (s.start, s.stop)
    if isinstance(s, ir.Reduce):
        return (s.start, s.stop, s.value)
    return ()


def _loads_in(stmts):
    """Every array and pool load in a statement list, nested statements included."""
    for st in ir.statements(stmts):
        stack = list(_stmt_exprs(st))
        while stack:
            e = stack.pop()
            if isinstance(e, (ir.Load, ir.PoolLoad)):
                yield e
            stack.extend(_expr_children(e))


def element_key(load) -> tuple[str, object]:
    """What a lanes loop's independence rule compares for a load: the array or pool, and the
    index (a pool's: the tuple of indices), as LanesScope.writes records them."""
    if isinstance(load, ir.PoolLoad):
        return load.pool.name, tuple(load.indices)
    return load.base.name, load.index


def _mentions(e: ir.Expr, names: set[str]) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var) and x.kind == ir.LOCAL and x.name in names:
            return True
        stack.extend(_expr_children(x))
    return False


def _distinct_per_iteration(index: ir.Expr, var: str, inner: set[str]) -> bool:
    """Is `index` `i + k`, `k + i`, `i - k`, `c * i + k` (or without k) with c an odd constant
    and k free of the loop variable and of the iteration's locals?"""
    def is_var(e):
        return isinstance(e, ir.Var) and e.kind == ir.LOCAL and e.name == var

    def scaled(e):  # i, c * i, i * c with c odd
        if is_var(e):
            return True
        if isinstance(e, ir.Binary) and e.op == "*":
            for a, b in ((e.left, e.right), (e.right, e.left)):
                if is_var(a) and isinstance(b, ir.Const) and int(b.value) % 2 == 1:
                    return True
        return False

    def invariant(e):
        return not _mentions(e, inner)

    if scaled(index):
        return True
    if isinstance(index, ir.Binary) and index.op in ("+", "-"):
        if scaled(index.left) and invariant(index.right):
            return True
        if index.op == "+" and scaled(index.right) and invariant(index.left):
            return True
    return False
