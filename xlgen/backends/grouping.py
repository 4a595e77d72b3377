"""Weight-once passes: which lanes loops the C++ emitter runs a row at a time (docs/gpu.md,
"Several positions per weight read").

A pass over several positions is written as a lanes loop over position x row,

    lanes for e in 0..cnt * TD {
        let t = e / TD          # the position
        let i = e % TD          # the row
        let q = sum(j in 0..TD: wq[l, i, j] * h[t * TD + j])
        tq[e] = q
    }

where iteration (t, i) reads weight row i. Run as written, one iteration after another, a
warp reads row i once per position. Iterations are independent (the checker proves it), so
the mapping is free: a warp can take every position of row i together, reading each weight
once for all of them while each position's sum still adds its own elements in the defined
order (§13.2: lane l adds elements l, l + 32, ... then the butterfly). Bits are unchanged.

`plan(lanes, bound)` says whether a loop has that shape: its body starts with lets that split
the loop variable by one constant K (`e / K`, the position; `e % K`, the row), then sums whose
bounds read no local of the body but the row (so they are the same for every position) and
whose elements read only the split lets, the loop variable, the sum's own variable and names
from outside the loop; the rest of the body (the
tail) is arbitrary and runs per position afterwards. Only the fast path of a versioned loop
(`bound`: its range within 0..bound-1) is grouped, a group holding at most ceil(bound / K)
positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import ir
from . import ranges

MAX_GROUP = 16  # positions per group: one accumulator each per sum, in registers


@dataclass(frozen=True)
class Group:
    k: int  # rows: the loop variable is position * k + row
    size: int  # positions per group (G)
    positions: tuple[str, ...]  # lets holding `var / k`
    rows: tuple[str, ...]  # lets holding `var % k`
    sums: tuple[ir.Reduce, ...]  # the head's sums, in order
    tail: tuple[ir.Stmt, ...]  # the rest of the body, per position

    def per_position(self, var: str) -> set[str]:
        """Names whose value differs between the positions of a group."""
        return {var, *self.positions}


def _split(s: ir.Stmt, var: str) -> tuple[str, int] | None:
    """('/', K) or ('%', K) for `let x = var / K` or `var % K` with K a positive i32 constant."""
    if not (isinstance(s, ir.Let) and isinstance(s.value, ir.Binary) and s.value.op in ("/", "%")):
        return None
    left, right = s.value.left, s.value.right
    if not (isinstance(left, ir.Var) and left.kind == ir.LOCAL and left.name == var and left.type == ir.I32):
        return None
    if not (isinstance(right, ir.Const) and right.type == ir.I32 and right.value > 0):
        return None
    return s.value.op, int(right.value)


def locals_read(e: ir.Expr) -> set[str]:
    """The locals an expression reads."""
    out: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, ir.Var) and x.kind == ir.LOCAL:
            out.add(x.name)
        stack.extend(ranges.children(x))
    return out


def _simple(e: ir.Expr) -> bool:
    """Reads only locals, constants, fields, params, tensors and arrays (no pools: owner checks;
    no calls: helpers may do anything)."""
    if isinstance(e, (ir.PoolLoad, ir.Call)):
        return False
    return all(_simple(c) for c in ranges.children(e))


def plan(s: ir.Lanes, bound: int | None) -> Group | None:
    if bound is None or not s.by_warp:
        return None
    body = list(s.body)
    k = None
    positions, rows = [], []
    while body and (split := _split(body[0], s.var)) is not None:
        op, kk = split
        if k not in (None, kk):
            return None
        k = kk
        (positions if op == "/" else rows).append(body.pop(0).name)
    if k is None:
        return None
    head_locals = {s.var, *positions, *rows}
    body_locals = {x.name for x in ir.statements(s.body) if isinstance(x, (ir.Let, ir.Reduce))}
    sums = []
    while body and isinstance(body[0], ir.Reduce) and body[0].op == "sum":
        r = body[0]
        # bounds the same for every position: they read no local of the body but the rows (not
        # the position, nor an earlier sum: fuzz seed 4103995)
        if (locals_read(r.start) | locals_read(r.stop)) & ((body_locals | {s.var}) - set(rows)):
            break
        # elements read the split, their own variable and names from outside the loop only
        if (locals_read(r.value) - {r.var} - head_locals) & body_locals:
            break
        if not (_simple(r.value) and _simple(r.start) and _simple(r.stop)):
            break
        sums.append(body.pop(0))
    if not sums:
        return None
    size = min(-(-bound // k), MAX_GROUP)
    if size < 2:
        return None
    return Group(k, size, tuple(positions), tuple(rows), tuple(sums), tuple(body))


def invariant_operand(e: ir.Expr, moving: set[str]) -> ir.Expr | None:
    """The largest subexpression of a sum's element that is the same for every position of a
    group and reads memory (the weight): computed once per element for the group. None when
    there is no single such subexpression."""
    found: list[ir.Expr] = []

    def reads_memory(x) -> bool:
        return isinstance(x, (ir.TensorLoad, ir.Load)) or any(reads_memory(c) for c in ranges.children(x))

    def visit(x):
        if not (locals_read(x) & moving):
            if reads_memory(x):
                found.append(x)
            return
        for c in ranges.children(x):
            visit(c)

    visit(e)
    return found[0] if len(found) == 1 else None
