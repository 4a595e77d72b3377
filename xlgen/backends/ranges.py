"""Which runtime checks of the C++ code cannot fail: interval analysis of i32 values.

A check the analysis proves can never fail is emitted without its test; the program's
meaning does not change (a check that cannot fail raises nothing in any backend), only the
work the hardware does. Two kinds of proof:

- ALWAYS: from what the stage states: constants, loop bounds, `let`s never reassigned
  (`e % TD` of a non-negative `e` is in 0..TD-1), and the branch a comparison selects.
- IN_FAST_PATH: inside a lanes loop, assuming its range is within 0..K-1. The loop is then
  versioned (`xl_lanes_v` in xl_runtime.cuh): when `lo >= 0 && hi <= K` holds at run time its
  iterations run a copy of the body without those checks, else the checked body. K is the
  array length that proves the most checks (`lanes for e in 0..cnt * TD` writing `x[e]` of a
  9 * TD array: K = 9 * TD proves `x[e]`, `w[e % TD, j]` and `h[e / TD * TD + j]` alike).

Integers wrap (docs/semantics.md), so an interval is kept only while the exact result of the
operation fits in i32; past that it is unknown. Only i32 values get intervals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import ir

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
TOP = (I32_MIN, I32_MAX)
ALWAYS, IN_FAST_PATH = "always", "fast"


@dataclass
class Proofs:
    """What the analysis proved, keyed by the IR node's id: `checks[(id(node), k)]` for index
    k of a Load/Assign (k = 0), TensorLoad, PoolLoad or PoolStore, or "div" for an integer
    division or remainder whose divisor cannot be 0; `fast_bound[id(lanes)]` = K, the length that
    proves them (a size for the loop's tiles: emit_cpp), and `fast_limit[id(lanes)]` >= K, the
    largest bound that proves the same checks (the fast path's test). (The ids stay unique: the
    program holds its nodes while its code is emitted.)"""

    checks: dict = field(default_factory=dict)
    fast_bound: dict = field(default_factory=dict)
    fast_limit: dict = field(default_factory=dict)

    def proof(self, node, k) -> str | None:
        return self.checks.get((id(node), k))


def _fits(lo: int, hi: int):
    return (lo, hi) if I32_MIN <= lo and hi <= I32_MAX else TOP


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


class _Walk:
    """One pass over a body: intervals of i32 locals, and the checks they prove."""

    def __init__(self, mutable: set[str], mode: str, out: dict, fast_bound: dict | None,
                 fast_limit: dict | None = None):
        self.mutable = mutable  # locals assigned somewhere: no interval
        self.mode = mode
        self.out = out
        self.fast_bound = fast_bound  # None: nested lanes loops are not versioned in this pass
        self.fast_limit = fast_limit
        self.failed: set = set()

    def prove(self, node, k, iv, length):
        self.note((id(node), k), iv[0] >= 0 and iv[1] < length)

    def note(self, key, holds: bool):
        """A check is proved only if it holds wherever the walk meets its node."""
        if not holds:
            self.failed.add(key)
            self.out.pop(key, None)
        elif key not in self.failed:
            self.out.setdefault(key, self.mode)

    # ---- expressions --------------------------------------------------------------

    def iv(self, e, env) -> tuple[int, int]:
        """The interval of an i32 expression (TOP when unknown or not i32); also records the
        checks inside `e` that are proved."""
        fn = getattr(self, "iv_" + type(e).__name__, None)
        out = fn(e, env) if fn else TOP
        return out if e.type == ir.I32 else TOP

    def iv_Const(self, e, env):
        return (e.value, e.value) if e.type == ir.I32 else TOP

    def iv_Var(self, e, env):
        if e.kind == ir.LOCAL:
            return env.get(e.name, TOP)
        if e.kind == ir.REQ_ID:
            return (0, I32_MAX)
        return TOP

    def iv_Load(self, e, env):
        self.prove(e, 0, self.iv(e.index, env), e.base.type.length)
        return TOP

    def iv_TensorLoad(self, e, env):
        for k, (index, dim) in enumerate(zip(e.indices, e.dims)):
            self.prove(e, k, self.iv(index, env), dim)
        return TOP

    def iv_PoolLoad(self, e, env):
        for k, (index, dim) in enumerate(zip(e.indices, e.pool.dims)):
            self.prove(e, k, self.iv(index, env), dim)
        return TOP

    def iv_Unary(self, e, env):
        a = self.iv(e.operand, env)
        return _fits(-a[1], -a[0]) if e.op == "-" and a != TOP else TOP

    def iv_Cast(self, e, env):
        self.iv(e.operand, env)
        src = e.operand.type
        if src == ir.BOOL:
            return (0, 1)
        if isinstance(src, ir.EnumType) and not src.is_flags:
            return (0, len(src.members) - 1)
        return TOP

    def iv_Select(self, e, env):
        self.iv(e.cond, env)
        then = self.iv(e.then, self.refine(e.cond, env, True))
        other = self.iv(e.otherwise, self.refine(e.cond, env, False))
        return (min(then[0], other[0]), max(then[1], other[1]))

    def iv_Intrinsic(self, e, env):
        args = [self.iv(a, env) for a in e.args]
        if e.type != ir.I32:
            return TOP
        if e.name == "min":
            return (min(args[0][0], args[1][0]), min(args[0][1], args[1][1]))
        if e.name == "max":
            return (max(args[0][0], args[1][0]), max(args[0][1], args[1][1]))
        if e.name == "clamp":  # min(max(x, lo), hi)
            lo = (max(args[0][0], args[1][0]), max(args[0][1], args[1][1]))
            return (min(lo[0], args[2][0]), min(lo[1], args[2][1]))
        if e.name == "abs":
            a = args[0]
            if a[0] > I32_MIN:
                return (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))
        return TOP

    def iv_Call(self, e, env):
        for a in e.args:
            self.iv(a, env)
        return TOP

    def iv_Binary(self, e, env):
        if e.op in ("&&", "||"):
            self.iv(e.left, env)
            self.iv(e.right, self.refine(e.left, env, e.op == "&&"))
            return TOP
        a, b = self.iv(e.left, env), self.iv(e.right, env)
        if e.left.type != ir.I32:
            return TOP
        if e.op == "+":
            return _fits(a[0] + b[0], a[1] + b[1])
        if e.op == "-":
            return _fits(a[0] - b[1], a[1] - b[0])
        if e.op == "*":
            corners = [x * y for x in a for y in b]
            return _fits(min(corners), max(corners))
        # The divisor is never 0. (An empty interval -- the code under a condition that cannot
        # hold -- proves nothing here: fuzz seed 1031071 divided by its corners.)
        nonzero = b[0] <= b[1] and (b[0] > 0 or b[1] < 0) or _nonzero_local(e.right, env)
        if e.op in ("/", "%"):
            self.note((id(e), "div"), nonzero)
        if e.op in ("/", "%") and nonzero and a[0] <= a[1]:
            if e.op == "/":
                if b[0] <= -1 <= b[1] and a[0] == I32_MIN:
                    return TOP  # INT_MIN / -1 wraps
                corners = [_trunc_div(x, y) for x in a for y in b]
                return _fits(min(corners), max(corners))
            m = max(abs(b[0]), abs(b[1])) - 1  # C's remainder: the dividend's sign, |r| < |b|
            if a[0] >= 0:
                return (0, min(a[1], m))
            if a[1] <= 0:
                return (max(a[0], -m), 0)
            return (-m, m)
        if e.op == "&" and (a[0] >= 0 or b[0] >= 0):  # a non-negative operand bounds the result
            return (0, min(x[1] for x in (a, b) if x[0] >= 0))
        return TOP

    def refine(self, cond, env, truth: bool) -> dict:
        """`env` where `cond` is known to be `truth`: a local compared with a bound, or a
        conjunction (when true) / disjunction (when false) of such."""
        if isinstance(cond, ir.Binary) and cond.op in ("&&", "||") and truth == (cond.op == "&&"):
            return self.refine(cond.right, self.refine(cond.left, env, truth), truth)
        if isinstance(cond, ir.Unary) and cond.op == "!":
            return self.refine(cond.operand, env, not truth)
        if not (isinstance(cond, ir.Binary) and cond.op in ("<", "<=", ">", ">=") and cond.left.type == ir.I32):
            return env
        op = cond.op if truth else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[cond.op]
        out = env
        for var, other, rel in ((cond.left, cond.right, op),
                                (cond.right, cond.left, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op])):
            if isinstance(var, ir.Var) and var.kind == ir.LOCAL and var.name in env and var.name not in self.mutable:
                lo, hi = env[var.name]
                b = self._quiet_iv(other, env)
                if rel == "<":
                    hi = min(hi, b[1] - 1)
                elif rel == "<=":
                    hi = min(hi, b[1])
                elif rel == ">":
                    lo = max(lo, b[0] + 1)
                else:
                    lo = max(lo, b[0])
                out = dict(out)
                out[var.name] = (lo, hi)
        return out

    def _quiet_iv(self, e, env):
        """An interval without recording proofs (a condition's operand, already walked)."""
        saved = self.out, self.failed
        self.out, self.failed = {}, set()
        try:
            return self.iv(e, env)
        finally:
            self.out, self.failed = saved

    # ---- statements ---------------------------------------------------------------

    def block(self, stmts, env):
        env = dict(env)
        for s in stmts:
            getattr(self, "s_" + type(s).__name__, self.s_other)(s, env)

    def s_other(self, s, env):
        for name in ("value", "expr", "index"):
            if getattr(s, name, None) is not None:
                self.iv(getattr(s, name), env)

    def s_Let(self, s, env):
        iv = self.iv(s.value, env)
        env[s.name] = iv if s.name not in self.mutable and s.type == ir.I32 else TOP

    def s_Assign(self, s, env):
        self.iv(s.value, env)
        if s.index is not None:
            self.prove(s, 0, self.iv(s.index, env), s.target.type.length)

    def s_PoolStore(self, s, env):
        self.iv(s.value, env)
        for k, (index, dim) in enumerate(zip(s.indices, s.pool.dims)):
            self.prove(s, k, self.iv(index, env), dim)

    def s_If(self, s, env):
        for cond, body in s.arms:
            self.iv(cond, env)
            self.block(body, self.refine(cond, env, True))
            env = self.refine(cond, env, False)
        self.block(s.otherwise, env)

    def s_For(self, s, env):
        inner = dict(env)
        inner[s.var] = (s.start, s.stop - 1) if s.start < s.stop else TOP
        self.block(s.body, inner)

    def _range_var(self, s, env):
        lo, hi = self.iv(s.start, env), self.iv(s.stop, env)
        return (lo[0], hi[1] - 1) if hi[1] > I32_MIN else TOP

    def _inside(self, s, env, var) -> dict:
        """`env` inside a lanes loop or reduction over start..stop whose variable is in `var`.
        An iteration means start < stop; with start >= 0, stop is not 0, and so neither is any
        local it is the product of (a product with a factor 0 is 0, wrapping or not): the loop
        `lanes for e in 0..cnt * ctx` may divide by ctx."""
        inner = dict(env)
        inner[s.var] = var
        if self._quiet_iv(s.start, env)[0] >= 0:
            for name in _factors(s.stop) - self.mutable:
                inner[_NONZERO + name] = True
        return inner

    def s_Reduce(self, s, env):
        inner = self._inside(s, env, self._range_var(s, env))
        self.iv(s.value, inner)
        env[s.name] = TOP

    def s_Lanes(self, s, env):
        var = self._range_var(s, env)
        inner = self._inside(s, env, var)
        self.block(s.body, inner)
        if self.fast_bound is None or self.mode != ALWAYS:
            return
        # The fast path: the candidate bound that proves the most checks the plain pass did not,
        # then as large a bound as proves the same checks (a bound is a range the fast path
        # takes: a loop `0..n * ctx` reading `table[e % ctx / 16]` of 256 entries gets 4096
        # rather than the length of an array it reads: docs/gpu.md).
        def trial_for(k):
            trial: dict = {}
            walk = _Walk(self.mutable, IN_FAST_PATH, trial, None)
            walk.block(s.body, self._inside(s, env, (max(var[0], 0), min(var[1], k - 1))))
            return {key: mode for key, mode in trial.items() if key not in self.out}

        best, best_trial = None, {}
        for k in sorted(_candidate_bounds(s.body), reverse=True):
            if var[0] >= 0 and var[1] < k:
                continue  # already known: nothing more to prove
            trial = trial_for(k)
            if len(trial) > len(best_trial):
                best, best_trial = k, trial
        if best is None:
            return
        # Fewer checks hold as the bound grows: the largest bound with the same count, by bisection.
        lo, hi = best, I32_MAX
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(trial_for(mid)) == len(best_trial):
                lo = mid
            else:
                hi = mid - 1
        self.fast_bound[id(s)] = best
        self.fast_limit[id(s)] = lo
        for key, mode in best_trial.items():
            self.out.setdefault(key, mode)


_NONZERO = "\0nonzero:"  # env[_NONZERO + name]: the local `name` is not 0 here (_Walk._inside)


def _factors(e) -> set[str]:
    """The locals `e` is a product of (`a * b * c`: a, b, c; a local: itself)."""
    if isinstance(e, ir.Var) and e.kind == ir.LOCAL and e.type == ir.I32:
        return {e.name}
    if isinstance(e, ir.Binary) and e.op == "*" and e.type == ir.I32:
        return _factors(e.left) | _factors(e.right)
    return set()


def _nonzero_local(e, env) -> bool:
    return isinstance(e, ir.Var) and e.kind == ir.LOCAL and bool(env.get(_NONZERO + e.name))


def _candidate_bounds(body) -> set[int]:
    """Lengths of the arrays and dimensions a lanes loop's body indexes."""
    out = set()

    def visit(e):
        if isinstance(e, ir.Load):
            out.add(e.base.type.length)
        elif isinstance(e, (ir.TensorLoad,)):
            out.update(e.dims)
        elif isinstance(e, ir.PoolLoad):
            out.update(e.pool.dims)
        for child in children(e):
            visit(child)

    for s in ir.statements(body):
        if isinstance(s, ir.Assign) and s.index is not None:
            out.add(s.target.type.length)
        if isinstance(s, ir.PoolStore):
            out.update(s.pool.dims)
        for name in ("value", "expr", "index", "start", "stop"):
            if isinstance(getattr(s, name, None), ir.Expr):
                visit(getattr(s, name))
        for e in getattr(s, "indices", ()):
            visit(e)
        if isinstance(s, ir.If):
            for cond, _ in s.arms:
                visit(cond)
    return {k for k in out if k > 0}


def children(e):
    for name in ("operand", "left", "right", "cond", "then", "otherwise", "index", "base"):
        child = getattr(e, name, None)
        if isinstance(child, ir.Expr):
            yield child
    for name in ("args", "indices"):
        yield from getattr(e, name, ())


def subexpressions(e):
    """`e` and every expression inside it, left to right (each before those inside it)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(list(children(x))))


def _assigned_locals(body) -> set[str]:
    return {s.target.name for s in ir.statements(body)
            if isinstance(s, (ir.Assign, ir.Accumulate)) and s.target.kind == ir.LOCAL}


def analyse(body) -> Proofs:
    """The proofs for one stage's or function's body (a function's parameters: unknown)."""
    proofs = Proofs()
    walk = _Walk(_assigned_locals(body), ALWAYS, proofs.checks, proofs.fast_bound, proofs.fast_limit)
    walk.block(body, {})
    return proofs


def analyse_expr(e) -> Proofs:
    """The proofs for a guard or `done when` (no locals)."""
    proofs = Proofs()
    _Walk(set(), ALWAYS, proofs.checks, None).iv(e, {})
    return proofs
