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

The same freedom gives a second tile: R rows of one position together (a decode step has one
position), each lane holding a partial of every row, the rows' loads in flight together and
the activation read once per element for all of them; a transposed butterfly then leaves each
row's sum in lanes of its own, and each row's tail runs on one of them.

`plan(lanes, bound)` says whether a loop has the first shape: its body starts with lets that
split the loop variable by one constant K (`e / K`, the position; `e % K`, the row), lets
computed from those alone (`row = t * H + i / HEAD`), then (optionally) preludes, lets and
reductions reading the position but no row (an RMS norm's `ss = sum(j in 0..D: x[t * D + j] *
x[t * D + j])`, `n = rsqrt(ss / D as f32 + EPS)`; or the head's lets the same over a tile's rows,
as a softmax's `m = max(s in 0..lo + t + 1: att[row * ctx + s])`: a tile computes them once per
position, as an iteration would, and fails as a whole where one fails), then sums whose start reads no local of
the body (the same for every iteration: lane l's elements are l, l + 32, ... from it), whose stop
may read the head (attention's causal `0..lo + t + 1`: each sum of a tile adds its own elements
only) and whose elements read only those lets, the loop variable, the sum's own variable, names
from outside the loop and pools (an element that fails fails its tile, which then runs an
iteration at a time); the rest of the body (the tail) is arbitrary and runs per iteration
afterwards. Only the fast path of a versioned loop (`bound`: its range within 0..bound-1) is
grouped, a group holding at most ceil(bound / K) positions. `rows_plan(lanes)` says whether a
loop has the second: the same head (with or without a split; bounds reading no local but the
position), elements that may read pools, and a tail without reductions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import ir
from . import ranges

MAX_GROUP = 16  # positions per group: one accumulator each per sum, in registers
TILE_ROWS_MAX = 32  # rows per tile of rows at most (xl_rows_per_tile: a power of two <= 32)


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
    return {x.name for x in ranges.subexpressions(e) if isinstance(x, ir.Var) and x.kind == ir.LOCAL}


def _simple(e: ir.Expr, pools: bool = False, builtins: bool = False) -> bool:
    """Reads only locals, constants, fields, params, tensors and arrays, and calls builtins that
    cannot fail (ir.INFALLIBLE_BUILTINS: `exp`); no other calls (helpers may do anything); pools
    only where a tile can fall back on the checked loop (their owner checks); other builtins
    likewise, only where it can."""
    if (isinstance(e, ir.Call) and not (builtins and e.builtin and not e.warp) and not ir.infallible_call(e)
            or isinstance(e, ir.PoolLoad) and not pools):
        return False
    return all(_simple(c, pools, builtins) for c in ranges.children(e))


@dataclass(frozen=True)
class Rows:
    """The start of a loop's body (_head): lets splitting the loop variable by one constant K,
    lets computed from them (`row = t * H + i / HEAD`), then sums, then the tail. As rows_plan
    gives it, a loop whose fast path may run a tile of rows of one position at a time
    (xl_lanes_grouped's rows path): each warp holds a partial of each of R rows, their loads in
    flight together, and each row's tail runs on one lane. So the tail must hold no reduction
    (a lane runs it alone). The sums' elements may fail (a pool's owner check): a tile in which
    one did runs again as the loop runs off its fast path, an iteration at a time, and fails
    there as it must."""

    k: int | None  # rows: the loop variable is position * k + row (None: no split; it is the row)
    positions: tuple[str, ...]  # lets holding `var / k`
    rows: tuple[str, ...]  # lets holding `var % k`
    lets: tuple[ir.Let, ...]  # lets computed from them, per row
    sums: tuple[ir.Reduce, ...]
    tail: tuple[ir.Stmt, ...]
    # lets and reductions between the lets and the sums that read no row (a norm: `let ss =
    # sum(j in 0..D: x[t * D + j] * x[t * D + j])`, `let n = rsqrt(ss / D as f32 + EPS)`):
    # computed once per position of a tile by its warp, as an iteration computes them
    preludes: tuple[ir.Stmt, ...] = ()

    def prelude_names(self) -> set[str]:
        return {x.name for x in self.preludes}

    def preludes_per_tile(self, var: str) -> bool:
        """Whether a prelude reads a let the same over a tile's rows (per_tile: attention's `row`):
        the preludes are then a tile's rows' as well as its positions'."""
        names = self.per_tile(var)
        return any(locals_read(e) & names for x in self.preludes
                   for e in ((x.start, x.stop, x.value) if isinstance(x, ir.Reduce) else (x.value,)))

    def per_row(self, var: str) -> set[str]:
        """Names whose value may differ between the rows of a tile (the head's lets but those
        the same over every tile: per_tile)."""
        return _moving(self.lets, {var, *self.rows}) - self.per_tile(var)

    def per_tile(self, var: str) -> set[str]:
        """The head's lets whose value is the same for every row of a tile of rows: those that
        read the row only as `row / C`, C a multiple of 32 (`i / HEAD`), neither the loop
        variable nor any other let but such ones. A tile is R <= 32 rows (a power of two)
        starting at a multiple of R within its one position, and rows are not negative, so `row
        / C` is the same over it. Only with a split (without one, tiles start wherever the loop
        does)."""
        if self.k is None:
            return set()
        rows, same, lets = set(self.rows), set(), {y.name for y in self.lets}
        for x in self.lets:
            reads = locals_read(x.value)
            if _reads_rows_only_over(x.value, rows, TILE_ROWS_MAX) and var not in reads and not (reads & lets) - same:
                same.add(x.name)
        return same


@dataclass(frozen=True)
class Group(Rows):
    """As plan gives it, a loop over position x row whose fast path may run a tile of R rows x up
    to `size` positions (xl_lanes_grouped's grouped path): each weight read once for the tile's
    positions, each activation once for its rows. Its sums' stops may differ between the
    iterations of a tile (attention's causal `0..lo + t + 1`): each sum adds its own elements
    only. Elements that may fail (a pool's owner check) fail the tile, which then runs an
    iteration at a time, as a tile of rows does."""

    size: int = 1  # positions per group (G)

    def per_position(self, var: str) -> set[str]:
        """Names whose value differs between the positions of a tile."""
        return _moving(self.lets, {var, *self.positions}) | self.prelude_names()

    def ragged(self, r: ir.Reduce, var: str) -> bool:
        """Whether sum `r` stops at a bound that differs between the iterations of a tile."""
        return bool(locals_read(r.stop) & _moving(self.lets, {var, *self.positions, *self.rows}))


def _reads_rows_only_over(e: ir.Expr, rows: set[str], unit: int) -> bool:
    """Whether `e` reads the locals `rows` only as `row / C`, C an i32 constant multiple of `unit`."""
    if (isinstance(e, ir.Binary) and e.op == "/" and isinstance(e.left, ir.Var) and e.left.name in rows
            and isinstance(e.right, ir.Const) and e.right.type == ir.I32 and e.right.value > 0
            and e.right.value % unit == 0):
        return True
    if isinstance(e, ir.Var) and e.kind == ir.LOCAL and e.name in rows:
        return False
    return all(_reads_rows_only_over(c, rows, unit) for c in ranges.children(e))


def _moving(lets: tuple[ir.Let, ...], names: set[str]) -> set[str]:
    """`names` and the head's lets: what the part of an element hoisted out of a tile may not
    read (the lets are evaluated per iteration, where the element is; not where it is hoisted)."""
    return set(names) | {x.name for x in lets}


def _head(s: ir.Lanes, ragged: bool) -> Rows | None:
    """The loop's head, or None (two different splits). The sums' elements read only the head's
    lets, the loop variable, their own variable and names from outside the loop (pools too: a
    tile whose element failed runs again as the checked loop does). Their bounds read no local
    of the body but the positions (a tile of rows: one position), or (`ragged`: a weight-once
    tile) a start the same for every iteration and a stop that may read the whole head."""
    body = list(s.body)
    k = None
    positions, rows = [], []
    while body and (split := _split(body[0], s.var)) is not None:
        op, kk = split
        if k not in (None, kk):
            return None
        k = kk
        (positions if op == "/" else rows).append(body.pop(0).name)
    assigned = {x.target.name for x in ir.statements(s.body) if isinstance(x, ir.Assign) and x.target.kind == ir.LOCAL}
    body_locals = {x.name for x in ir.statements(s.body) if isinstance(x, (ir.Let, ir.Reduce))}
    head_names = {s.var, *positions, *rows}
    lets = []
    while (body and isinstance(body[0], ir.Let) and body[0].name not in assigned and _simple(body[0].value)
           and not (locals_read(body[0].value) - head_names) & body_locals):
        head_names.add(body[0].name)
        lets.append(body.pop(0))
    may_start = set() if ragged else set(positions)
    may_stop = set(head_names) if ragged else set(positions)

    def take_sums(body: list, names: set[str]) -> list[ir.Reduce]:
        sums = []
        while body and isinstance(body[0], ir.Reduce) and body[0].op == "sum":
            r = body[0]
            # a start the same for every iteration of a tile, a stop too but where ragged: no local of
            # the body but those allowed (never an earlier sum, which the tile computes: fuzz seed 4103995)
            if (locals_read(r.start) & ((body_locals | {s.var}) - may_start)
                    or locals_read(r.stop) & ((body_locals | {s.var}) - may_stop)):
                break
            # elements read the head, their own variable and names from outside the loop only
            if (locals_read(r.value) - {r.var} - names) & body_locals:
                break
            if not (_simple(r.value, pools=True) and _simple(r.start) and _simple(r.stop)):
                break
            sums.append(body.pop(0))
        return sums

    rest = list(body)
    # (preludes may read the lets the same over a tile's rows: attention's `row = t * H + i / HEAD`)
    per_tile = Rows(k, tuple(positions), tuple(rows), tuple(lets), (), ()).per_tile(s.var)
    preludes = _preludes(rest, [*positions, *per_tile], body_locals | {s.var}, assigned)
    sums = take_sums(rest, head_names | {x.name for x in preludes})
    if not sums:  # (preludes only where sums follow them: else the sums are those of old)
        rest, preludes = list(body), []
        sums = take_sums(rest, head_names)
    return Rows(k, tuple(positions), tuple(rows), tuple(lets), tuple(sums), tuple(rest), tuple(preludes))


def _preludes(body: list, fixed: list[str], body_locals: set[str], assigned: set[str]) -> list[ir.Stmt]:
    """Take from the front of `body` the lets and reductions that read of the body's locals only
    `fixed` (the positions, the lets the same over a tile's rows) and earlier such statements
    (Rows.preludes). A tile's warp computes them for each of its positions before its sums; one
    that fails fails the tile, which then runs an iteration at a time (so builtins may be called:
    their errors are the iteration's)."""
    fixed, taken = set(fixed), []
    while body:
        x = body[0]
        if isinstance(x, ir.Let):
            exprs, own = [x.value], set()
        elif isinstance(x, ir.Reduce):
            exprs, own = [x.start, x.stop, x.value], {x.var}
        else:
            break
        if x.name in assigned:  # (one value for the tile's rows: none may change it)
            break
        if any((locals_read(e) - own) & body_locals - fixed or not _simple(e, builtins=True) for e in exprs):
            break
        fixed.add(x.name)
        taken.append(body.pop(0))
    return taken


def plan(s: ir.Lanes, bound: int | None) -> Group | None:
    """The weight-once part of a loop over position x row (a row's positions together)."""
    if bound is None or not s.by_warp:
        return None
    head = _head(s, ragged=True)
    if head is None or head.k is None or not head.sums:
        return None
    size = min(-(-bound // head.k), MAX_GROUP)
    if size < 2:
        return None
    return Group(head.k, head.positions, head.rows, head.lets, head.sums, head.tail, head.preludes, size)


def rows_plan(s: ir.Lanes) -> Rows | None:
    """The part of a loop that a tile of rows of one position can run together (any loop whose
    body starts with such sums: its fast path, or the whole loop where nothing needs a check)."""
    if not s.by_warp:
        return None
    head = _head(s, ragged=False)
    if head is None or not head.sums or any(isinstance(x, ir.Reduce) for x in ir.statements(head.tail)):
        return None
    return head


@dataclass(frozen=True, eq=False)
class PoolPage:
    """A pool read's page with its checks, where the page index is the same for every iteration
    of a tile but the read is not (attention's weighted sum of V: `pool[table[s / P], l, D + i,
    s % P]`, i per row): the page index checked, then the page's owner (xl_pool_page)."""

    load: ir.PoolLoad
    type = ir.I32


def invariant_parts(e: ir.Expr, moving: set[str], skip: set[int] = frozenset()) -> list:
    """The parts of a sum's element that are the same for every iteration of a tile (read no
    `moving` name), computed once per element for the tile, leftmost first: the largest
    subexpressions that read memory (a group's weight; a tile of rows' activation, attention
    weight, page table entry), and the checked page of a pool read whose page index is such but
    whose other indices are not (PoolPage: the page index's checks and the owner check once for
    the tile's rows). A part that may fail fails the tile, which then runs an iteration at a
    time (xl_shared_part), so hoisting it cannot change which error an iteration reports.
    Subexpressions whose id is in `skip` (another hoist's parts; for a checked page, its page
    index: the read itself may still be taken, its page read by name) are neither taken nor
    searched."""
    found: list = []

    def reads_memory(x) -> bool:
        return isinstance(x, (ir.TensorLoad, ir.Load, ir.PoolLoad)) or any(reads_memory(c) for c in ranges.children(x))

    def visit(x):
        if id(x) in skip:
            return
        if not (locals_read(x) & moving):
            if reads_memory(x):
                found.append(x)
            return
        if isinstance(x, ir.PoolLoad) and not (locals_read(x.indices[0]) & moving):
            if id(x.indices[0]) not in skip:  # (else an earlier hoist checked the page)
                found.append(PoolPage(x))
            for c in x.indices[1:]:
                visit(c)
            return
        for c in ranges.children(x):
            visit(c)

    visit(e)
    return found
