"""Random well-typed xl programs for differential testing of the backends (Csmith-style).

`generate(seed)` returns a `FuzzCase`: the source of one complete pipeline and a
few launches for it (params, per-request inputs, launch settings). Everything is
a function of the seed (`random.Random(seed)`), so a failing case is reproduced,
and shrunk by hypothesis (`programs()`), by its seed alone.

Every program the generator writes must be accepted by the checker: a
CompileError on a generated program is a bug in this file (or in the checker).
Runtime errors, on the other hand, are intended: division by zero, shifts by
out-of-range amounts, out-of-range array indexes and f32 -> int casts, builtin
argument errors, errors in guards, in `done when`, in helpers and in arbiters,
the watchdog. The backends must report them identically. How often operations
take their error-prone form varies per program (swarm testing): some programs
fail early and often, others run all their rounds. Half the programs draw some
names from NASTY_NAMES: keywords, macros and helpers of the generated Python and
C++, which the emitters must rename.

The typing rules the generator relies on (see xlgen/frontend/checker.py):
- u32 literals always carry the `u` suffix and i32 literals never do, so an
  unsuffixed literal only takes `u32` from its context where an i32 expression
  sits under `as u32` (the cast passes its target down as a hint). Such operands
  (i32, or bool comparisons of i32) are written `(e as i32) as u32`, which pins
  them to i32 first. The amount of `x <<= e` is checked with x's type as hint,
  so it is generated with x's type.
- an index that would fold to a constant must be in range, so constant indexes
  are always literals in range; dynamic ones are often out of range.
- locals never shadow a visible local or any global name; names of closed
  scopes are reused (sibling blocks), sometimes with another type.
"""

from __future__ import annotations

import math
import random
import re
import struct
from dataclasses import dataclass, field

from ..core.ir import COLLECTIVE_OPS

SCALARS = ("i32", "u32", "f32", "bool")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1

# Literals near the edges of each type's behaviour.
I32_EDGES = [0, 1, -1, 2, 3, -2, 7, -7, 8, 16, 31, 32, 33, 63, -31, -32, 100, 255, 256, 1000, -1000, 65535, 65536,
             0x7FFF_FFFF, INT_MIN, INT_MIN + 1, INT_MAX - 1, 16777216, 16777217, 46341, -46341, 0x5555_5555]
U32_EDGES = [0, 1, 2, 3, 7, 8, 31, 32, 33, 255, 1000, 65535, 65536, 0x7FFF_FFFF, 0x8000_0000, 0x8000_0001,
             0xFFFF_FFFF, 0xFFFF_FFFE, 16777217, 0xDEAD_BEEF]
F32_EDGES = ["0.0", "-0.0", "0.1", "0.2", "0.3", "0.5", "1.0", "-1.0", "1.5", "-1.5", "2.0", "3.0", "-3.9", "3.9",
             "0.75", "1.0e-40", "1.0e-45", "1.17549435e-38", "1.0e-38", "3.0e38", "-3.0e38", "3.4028234e38",
             "16777216.0", "16777217.0", "2147483520.0", "2147483648.0", "-2147483648.0", "-2147483904.0",
             "4294967040.0", "4294967296.0", "1.0e10", "-1.0e10", "0.333", "100.0", "255.5", "-0.5", "1e9",
             "65504.0", "8388608.5"]
# Input values (launch overrides): the same edges and non-finite floats.
F32_INPUTS = [0.0, -0.0, 0.1, 1.0, -1.0, 0.5, 3.0e38, -3.0e38, 3.4028234663852886e38, 1e-40, 1e-45, 1.1754943508222875e-38,
              16777217.0, 2147483520.0, 2147483648.0, -2147483648.0, 4294967296.0, math.inf, -math.inf, math.nan,
              1e10, -7.25, 255.0, 0.3]

# Identifiers the checker accepts but that collide with names the generated
# code uses for itself (Python helpers and builtins, C/C++ macros and keywords,
# the generated structs and functions). A backend must cope with all of them.
NASTY_NAMES = [
    # the simulator's namespace (xlgen.semantics.ops star import, generated module globals)
    "wrap_i32", "wrap_u32", "check_index", "div_i32", "rem_u32", "div_f32", "shl_i32", "shr_u32", "f32_to_i32",
    "sqrt_f32", "min_", "max_", "abs_i32", "f32_bits", "bits_f32", "XlRuntimeError", "ERR_INDEX", "INF", "NAN",
    "Params", "Request", "Shared", "STAGES", "TRACES", "PIPELINE", "SOURCE", "REQUEST_LAYOUT", "init_request",
    "init_shared", "is_done", "b_hash_u32", "b_draft_token", "struct", "math", "float", "int", "range", "len",
    "print", "None", "True", "False", "not", "and", "or", "is", "pass", "def", "class", "lambda", "yield", "match",
    "case", "type", "self", "r", "sh", "p", "err", "np", "object", "list", "dict", "str", "bytes", "id", "sum",
    "any", "all", "map", "super", "getattr", "isinstance",
    # C and C++: keywords, macros of <stdint.h>/<math.h>, the runtime header and the generated code
    "auto", "double", "char", "long", "short", "signed", "unsigned", "void", "new", "delete", "this", "register",
    "union", "typedef", "switch", "goto", "static", "extern", "namespace", "template", "typename", "operator",
    "NULL", "EOF", "M_PI", "M_E", "INFINITY", "HUGE_VALF", "INT32_MAX", "UINT32_MAX", "INT_MAX", "SIZE_MAX",
    "FP_NAN", "errno", "isnan", "isinf", "signbit", "sqrtf", "fabsf", "memcpy", "round", "floor", "printf", "main",
    "assert", "std", "size_t", "int32_t", "uint32_t", "uint64_t", "XL_INF", "XL_NAN", "XL_HD", "XL_DEVICE",
    "XL_ON_GPU", "XL_WARP_STORE", "XL_ERR_INDEX", "XL_RECORD_WORDS", "XL_KIND_ERROR", "XL_NO_STAGE",
    "XL_NUM_ARBITERS", "XlErr", "XlSink", "XlLaunch", "xl", "w", "rec", "sink", "at", "values", "active", "failed",
    "writer", "lane", "threadIdx", "blockIdx", "stage_index", "indices", "launch", "queue_head", "still_active",
    "arbiter_stage_index", "retire_check", "run_request_stages", "run_arbiter", "guard_s0", "stage_s1", "fn_h0",
    "trace_s0", "fuzz", "i", "j", "k", "n", "a", "b", "e", "x", "y",
]
# Never usable as xl names: the grammar's keywords, the checker's reserved names, the prelude's builtins.
_NOT_NAMES = {
    "pipeline", "import", "const", "param", "enum", "flags", "request", "shared", "builtin", "warp", "fn", "stage",
    "arbiter", "trace", "done", "when", "let", "if", "elif", "else", "for", "in", "break", "continue", "return",
    "has", "true", "false", "as", "req_id", "min", "max", "abs", "clamp", "sqrt", "i32", "u32", "f32", "bool",
    "hash_u32", "verify_prefix", "target_token", "draft_token", "lanes", "tensor", "exp", "log", "tanh", "rsqrt",
    "sigmoid",
}


_U32_LITERAL = re.compile(r"(0x[0-9A-Fa-f_]+|[0-9_]+)u")


def f32(x: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def struct_f32(values):
    """Python floats as a float32 numpy array (each rounded to binary32)."""
    import numpy as np

    return np.array(values, dtype=np.float64).astype(np.float32)


# ---- what the generator knows about a program ----------------------------------------------


@dataclass
class Arr:
    elem: str
    length: int
    text: str  # the length as written in the declaration (a literal or a const name)

    def decl(self) -> str:
        return f"{self.elem}[{self.text}]"


@dataclass
class Sym:
    name: str
    type: object  # a scalar or enum/flag type name, or an Arr
    mutable: bool = True
    loop_range: tuple[int, int] | None = None  # (first, last) of a loop variable
    value: int | None = None  # an i32 const's value
    length_const: bool = False  # a const meant as an array length / loop bound


@dataclass
class Helper:
    name: str
    params: list[Sym]
    ret: str


@dataclass
class Ctx:
    kind: str  # "stage", "arbiter", "collective", "fn", "guard", "done"
    shared_modes: dict = field(default_factory=dict)  # collective stage: shared field -> "=" or "+="
    scopes: list[dict] = field(default_factory=list)
    loops: int = 0
    fn_index: int = 10 ** 9  # helpers with a smaller index may be called
    dead: list[str] = field(default_factory=list)  # names of closed scopes, free for reuse
    ret: str | None = None  # a helper's return type
    depth_left: int = 6  # nesting budget shared by everything generated in this context
    lanes: dict | None = None  # in a lanes loop body: array -> the one index its iterations use
    lane_scope: int = 0  # in a lanes loop body: the first scope that belongs to the body
    reduction: bool = False  # in a reduction's element expression

    @property
    def lane_parallel(self) -> bool:
        return self.lanes is not None or self.reduction

    @property
    def sees_request(self) -> bool:
        return self.kind != "fn"

    def visible(self) -> list[Sym]:
        return [s for scope in self.scopes for s in scope.values()]

    def lookup(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None


@dataclass
class E:
    """A generated expression: its text, whether it folds to a constant, whether it holds an unsuffixed literal."""

    text: str
    const: bool = False
    flex: bool = False


@dataclass
class Launch:
    params: dict
    inputs: list[dict]
    max_active: int
    max_rounds: int


@dataclass
class FuzzCase:
    seed: int
    source: str
    launches: list[Launch]

    def describe(self, launch: Launch | None = None) -> str:
        lines = [f"fuzz seed {self.seed}:", _numbered(self.source)]
        for ln in ([launch] if launch else self.launches):
            lines.append(f"launch: max_active={ln.max_active} max_rounds={ln.max_rounds}")
            lines.append(f"  params: {ln.params!r}")
            for i, inp in enumerate(ln.inputs):
                lines.append(f"  request {i}: {inp!r}")
        return "\n".join(lines)


def _numbered(text: str) -> str:
    return "\n".join(f"{i:4d}  {line}" for i, line in enumerate(text.splitlines(), 1))


# ---- the generator ---------------------------------------------------------------------------


class Generator:
    def __init__(self, seed: int, nasty_names: bool = True):
        self.seed = seed
        self.rng = random.Random(seed)
        self.nasty = nasty_names and self.rng.random() < 0.5
        # How often an operation takes its error-prone form (a raw index, shift amount, divisor,
        # f32 -> int cast, builtin argument). Varied per program ("swarm testing"): some programs
        # fail early and often, others run all their rounds.
        self.risk = self.rng.choice([0.01, 0.05, 0.12, 0.3])
        self.used: set[str] = set()
        self.counter = 0
        self.consts: list[Sym] = []
        self.params: list[Sym] = []
        self.enums: dict[str, list[str]] = {}
        self.flagsets: dict[str, list[str]] = {}
        self.fields: list[Sym] = []
        self.shared: list[Sym] = []
        self.helpers: list[Helper] = []
        self.tensors: list[tuple[str, tuple[int, ...]]] = []
        self.count_field = ""
        self.lines: list[str] = []
        self.derived: list[str] = []  # names of generated-code functions of this program (fn_h1, stage_s2, ...)

    # -- small utilities --

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def risky(self) -> bool:
        return self.rng.random() < self.risk

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def fresh(self, prefix: str, avoid=()) -> str:
        """A new global-unique name: mostly `prefix` + a number, sometimes one of NASTY_NAMES."""
        if self.nasty and self.chance(0.25):
            options = [n for n in NASTY_NAMES + self.derived
                       if n not in self.used and n not in _NOT_NAMES and n not in avoid]
            if options:
                name = self.pick(options)
                self.used.add(name)
                return name
        while True:
            self.counter += 1
            name = f"{prefix}{self.counter}"
            if name not in _NOT_NAMES and name not in self.used:
                break
        self.used.add(name)
        return name

    def sep(self) -> str:
        """The space between a binary operator and its right operand: rarely a line break (and a comment)."""
        r = self.rng.random()
        if r < 0.02:
            return "\n            "
        if r < 0.025:
            return "  # a comment inside an expression\n            "
        return " "

    def kind(self, t) -> str:
        if isinstance(t, Arr):
            return "array"
        if t in SCALARS:
            return t
        return "enum" if t in self.enums else "flags"

    def all_types(self) -> list[str]:
        return list(SCALARS) + list(self.enums) + list(self.flagsets)

    # -- literals --

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

    # -- leaves --

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
        options += ["lit"] * 2
        choice = self.pick(options)
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

    # -- expressions --

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

    # -- statements --

    def new_local(self, ctx: Ctx, prefix: str) -> str:
        if ctx.dead and self.chance(0.3):
            options = [n for n in ctx.dead if ctx.lookup(n) is None]
            if options:
                name = self.pick(options)
                ctx.dead.remove(name)
                return name
        return self.fresh(prefix)

    def push(self, ctx: Ctx, scope: dict | None = None) -> None:
        ctx.scopes.append(scope if scope is not None else {})

    def pop(self, ctx: Ctx) -> None:
        ctx.dead.extend(ctx.scopes.pop())

    def block(self, ctx: Ctx, n: int, depth: int, ind: int) -> list[str]:
        out = []
        for _ in range(n):
            out += self.stmt(ctx, depth, ind)
        return out

    def targets(self, ctx: Ctx) -> list[tuple[str, object, Sym]]:
        """Assignable places: (kind, element type, symbol)."""
        if ctx.lanes is not None:  # an iteration's own locals, and the elements it owns
            out = [("local", s.type, s) for scope in ctx.scopes[ctx.lane_scope:] for s in scope.values()
                   if s.mutable and not isinstance(s.type, Arr)]
            return out + [("elem", f.type.elem, f) for f in self.fields if f.name in ctx.lanes]
        out = []
        for s in ctx.visible():
            if s.mutable and not isinstance(s.type, Arr):
                out.append(("local", s.type, s))
        if ctx.kind in ("stage", "arbiter", "collective"):
            for s in self.fields:
                if s.name == self.count_field:
                    continue
                out.append(("elem" if isinstance(s.type, Arr) else "field", s.type.elem if isinstance(s.type, Arr) else s.type, s))
        if ctx.kind in ("arbiter", "collective"):
            for s in self.shared:
                out.append(("elem" if isinstance(s.type, Arr) else "field", s.type.elem if isinstance(s.type, Arr) else s.type, s))
        return out

    def stmt(self, ctx: Ctx, depth: int, ind: int) -> list[str]:
        pad = "    " * ind
        d = self.rng.randrange(1, 4)
        if ctx.kind == "stage" and not ctx.reduction and depth > 0 and self.chance(0.12):
            if ctx.lanes is not None:  # a reduction in an iteration: the warp runs such iterations in turn
                return self.reduction(ctx, ind)
            return self.lanes_loop(ctx, ind) if self.chance(0.5) else self.reduction(ctx, ind)
        r = self.rng.random()
        if depth <= 0:
            r = self.rng.random() * 0.55
        if r < 0.22:
            t = self.pick(self.all_types() + ["i32", "i32", "u32", "f32"])
            value = self.expr(ctx, t, d)
            name = self.new_local(ctx, "v")
            typed = self.chance(0.4)
            line = f"{pad}let {name}: {t} = {value.text}" if typed else f"{pad}let {name} = {value.text}"
            ctx.scopes[-1][name] = Sym(name, t)
            return [line]
        if r < 0.55:
            targets = self.targets(ctx)
            if not targets:
                return []
            kind, t, s = self.pick(targets)
            lhs = s.name if kind != "elem" else f"{s.name}[{self.elem_index(ctx, s)}]"
            k = self.kind(t)
            ops = {"i32": ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="],
                   "u32": ["=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="],
                   "f32": ["=", "+=", "-=", "*=", "/="], "bool": ["="], "enum": ["="],
                   "flags": ["=", "&=", "|=", "^="]}[k]
            op = self.pick(ops + ["="] * 3)
            if ctx.kind == "collective" and s in self.shared:  # claimed with '=', or summed (integers)
                mode = ctx.shared_modes.setdefault(s.name, self.pick(["=", "+="]) if k in ("i32", "u32") else "=")
                op = "=" if mode == "=" else self.pick(["+=", "-="])
            if op in ("<<=", ">>="):
                # the value is checked with the target's type as hint: keep the amount that type
                amount = self.expr(ctx, t, d)
                suffix = "u" if k == "u32" else ""
                value = E(f"({amount.text} & 31{suffix})") if self.chance(0.7) else amount
            elif op in ("/=", "%=") and k != "f32":
                value = self.divisor(ctx, t, d)
            else:
                value = self.expr(ctx, t, d)
            return [f"{pad}{lhs} {op} {value.text}"]
        if r < 0.75 and depth > 0:
            lines = []
            n_arms = self.pick([1, 1, 2, 3])
            for i in range(n_arms):
                cond = self.expr(ctx, "bool", d)
                head = "if" if i == 0 else "} elif"
                lines.append(f"{pad}{head} {cond.text} {{")
                self.push(ctx)
                lines += self.block(ctx, self.rng.randrange(0, 4), depth - 1, ind + 1)
                self.pop(ctx)
            if self.chance(0.5):
                lines.append(f"{pad}}} else {{")
                self.push(ctx)
                lines += self.block(ctx, self.rng.randrange(0, 4), depth - 1, ind + 1)
                self.pop(ctx)
            lines.append(f"{pad}}}")
            return lines
        if r < 0.87 and depth > 0:
            var = self.new_local(ctx, "i")
            lo = self.pick([0, 0, 0, 1, -2, 2, 5])
            hi = lo + self.pick([0, 1, 2, 3, 4, 5, 8, -1])
            lo_text, hi_text = (f"(-{-lo})" if lo < 0 else str(lo)), (f"(-{-hi})" if hi < 0 else str(hi))
            lens = [c for c in self.consts if getattr(c, "length_const", False)]
            if lens and self.chance(0.3):
                c = self.pick(lens)
                lo, hi, lo_text, hi_text = 0, c.value, "0", c.name
            lines = [f"{pad}for {var} in {lo_text}..{hi_text} {{"]
            self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=(lo, hi - 1))})
            ctx.loops += 1
            lines += self.block(ctx, self.rng.randrange(1, 4), depth - 1, ind + 1)
            if ctx.lanes is not None:
                pass  # an iteration of a lanes loop runs its nested loops to the end
            elif self.chance(0.5):
                cond = self.expr(ctx, "bool", d)
                lines += [f"{pad}    if {cond.text} {{", f"{pad}        {self.pick(['break', 'continue'])}", f"{pad}    }}"]
                lines += self.block(ctx, self.rng.randrange(0, 2), depth - 1, ind + 1)
            elif self.chance(0.1):
                lines.append(f"{pad}    {self.pick(['break', 'continue'])}")
            ctx.loops -= 1
            self.pop(ctx)
            lines.append(f"{pad}}}")
            return lines
        if r < 0.95 and ctx.kind == "fn":
            cond = self.expr(ctx, "bool", d)
            value = self.expr(ctx, ctx.ret, d)
            return [f"{pad}if {cond.text} {{", f"{pad}    return {value.text}", f"{pad}}}"]
        # a call for its effect (a builtin; sometimes verify_prefix directly in a stage)
        if ctx.kind == "stage" and not ctx.lane_parallel and self.arrays_of(ctx, "i32") and self.chance(0.5):
            arrays = self.arrays_of(ctx, "i32")
            a, b = self.pick(arrays), self.pick(arrays)
            limit = min(a.type.length, b.type.length)
            n = self.expr(ctx, "i32", d) if self.risky() else E(f"clamp({self.expr(ctx, 'i32', d).text}, 0, {limit})")
            return [f"{pad}verify_prefix({a.name}, {b.name}, {n.text})"]
        which = self.pick(["hash", "target", "draft"])
        call = self.builtin_call(ctx, "u32" if which == "hash" else "i32", d)
        if call is None or call.text.startswith("verify_prefix"):
            a = self.expr(ctx, "u32", d)
            call = E(f"hash_u32({a.text})")
        return [f"{pad}{call.text}"]

    # -- lane-parallel code (docs/semantics.md §13.2) --

    def lane_range(self, ctx: Ctx, length: int) -> tuple[str, str, tuple[int, int]]:
        """Bounds of a lanes loop or reduction: mostly the array's length, sometimes past
        it (iterations fail), empty, longer than a warp, or computed at run time."""
        lo = self.pick([0, 0, 0, 1, -1])
        hi = self.pick([length, length, length + 1, lo, 33, 40, 70])
        lo_text = f"(-{-lo})" if lo < 0 else str(lo)
        if self.chance(0.2):  # a bound known only at run time
            e = self.expr(ctx, "i32", 1)
            return lo_text, f"clamp({e.text}, -2, 45)", (lo, 44)
        return lo_text, str(hi), (lo, hi - 1)

    def lanes_loop(self, ctx: Ctx, ind: int) -> list[str]:
        pad = "    " * ind
        arrays = [f for f in self.fields if isinstance(f.type, Arr)]
        written = self.rng.sample(arrays, self.rng.randrange(0, min(2, len(arrays)) + 1)) if arrays else []
        length = min([a.type.length for a in written] or [self.pick([4, 8, 40])])
        lo, hi, rng = self.lane_range(ctx, length)
        var = self.new_local(ctx, "i")
        offsets = {}
        for a in written:  # `i`, `i + k`, `i - k`, `c * i + k` with c odd, k the same for every iteration
            k = self.pick(["0", "1", "(-1)"] + [s.name for s in self.scalars_of(ctx, "i32")][:3])
            form = self.pick(["{v}", "{v}", "{v} + {k}", "{k} + {v}", "{v} - {k}", "3 * {v} + {k}", "{v} * (-1) + {k}"])
            offsets[a.name] = "(" + form.format(v=var, k=k) + ")"
        saved = (ctx.lanes, ctx.lane_scope)
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=rng)})
        ctx.lanes, ctx.lane_scope = offsets, len(ctx.scopes) - 1
        ctx.loops += 1
        body = self.block(ctx, self.rng.randrange(1, 5), 1, ind + 1)
        for a in written:  # every written array gets at least one store
            value = self.expr(ctx, a.type.elem, 2)
            body.append(f"{pad}    {a.name}[{offsets[a.name]}] = {value.text}")
        ctx.loops -= 1
        ctx.lanes, ctx.lane_scope = saved
        self.pop(ctx)
        return [f"{pad}lanes for {var} in {lo}..{hi} {{", *body, f"{pad}}}"]

    def reduction(self, ctx: Ctx, ind: int) -> list[str]:
        op = self.pick(["sum", "sum", "max", "min", "argmax", "argmin"])
        t = self.pick(["f32", "f32", "i32", "u32"])
        lo, hi, rng = self.lane_range(ctx, self.pick([3, 8, 32, 40]))
        var = self.new_local(ctx, "j")
        self.push(ctx, {var: Sym(var, "i32", mutable=False, loop_range=rng)})
        ctx.reduction = True
        value = self.expr(ctx, t, self.rng.randrange(1, 4))
        ctx.reduction = False
        self.pop(ctx)
        name = self.new_local(ctx, "red")
        ctx.scopes[-1][name] = Sym(name, "i32" if op.startswith("arg") else t)
        return [f"{'    ' * ind}let {name} = {op}({var} in {lo}..{hi}: {value.text})"]

    # -- declarations --

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
        L.append("}")
        self.shared = shared

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
        rest = kinds[1:]  # the first is the stage counting rounds; the others in any order
        self.rng.shuffle(rest)
        kinds = kinds[:1] + rest
        stages = [self.fresh({"stage": "s", "arbiter": "arb", "collective": "col"}[kind]) for kind in kinds]
        self.derived = [f"fn_{h}" for h in helper_names] + [f"{prefix}_{s}" for s in stages
                                                            for prefix in ("stage", "guard", "trace")]
        self.declare()
        L = self.lines
        for i, name in enumerate(helper_names):
            L.append("")
            L += self.helper(i, name)
        for i, (kind, name) in enumerate(zip(kinds, stages)):
            L.append("")
            L += self.stage(name, kind, first=(i == 0))
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

    # -- launches --

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

    def launch(self) -> Launch:
        params = {p.name: self.value(p.type) for p in self.params if self.chance(0.5)}
        for name, dims in self.tensors:  # every tensor is bound: edge values and ordinary ones
            size = math.prod(dims)
            values = [self.value("f32") for _ in range(size)]
            params[name] = struct_f32(values).reshape(dims)
        inputs = []
        for _ in range(self.rng.randrange(1, 7)):
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


def generate(seed: int, launches: int = 3, nasty_names: bool = True) -> FuzzCase:
    """The program and launches of one seed."""
    g = Generator(seed, nasty_names=nasty_names)
    source = g.program()
    return FuzzCase(seed, source, [g.launch() for _ in range(launches)])


def programs(launches: int = 3, nasty_names: bool = True):
    """A hypothesis strategy of FuzzCases, drawn (and shrunk) by seed."""
    from hypothesis import strategies as st

    return st.integers(min_value=0, max_value=2 ** 32 - 1).map(
        lambda seed: generate(seed, launches=launches, nasty_names=nasty_names))


def backends() -> list[str]:
    """The backends to compare with the simulator: the CPU build, and the GPU where one is usable."""
    out = ["cpu"]
    try:
        from ..runtime import gpu
    except ImportError:
        return out
    try:
        if gpu.available():
            out.append("gpu")
    except Exception:  # a broken CUDA install is "no GPU" here; tests/test_gpu.py reports it
        pass
    return out


def run_backend(backend: str, compiled, params, inputs, cfg):
    """Run a compiled pipeline on one backend ("sim", "cpu" or "gpu"; the GPU in deterministic mode)."""
    import importlib

    if backend == "sim":
        from ..runtime import sim

        return sim.run(compiled.sim_module(), params, inputs, cfg)
    runner = importlib.import_module(f"xlgen.runtime.{backend}")
    if backend == "gpu":
        return runner.run(compiled, params, inputs, cfg, mode="deterministic")
    return runner.run(compiled, params, inputs, cfg)


def run_case(case: FuzzCase, backends=("cpu",), compiled=None):
    """Compile a case (unless given `compiled`) and run every launch on the simulator and each backend.

    Returns a list of (launch, backend, divergence text) for every mismatch.
    """
    from ..backends.build import load_text
    from .diff import compare
    from ..runtime import sim

    if compiled is None:
        compiled = load_text(case.source, name="fuzz.xl")
    module = compiled.sim_module()
    problems = []
    for launch in case.launches:
        cfg = sim.LaunchConfig(max_active=launch.max_active, max_rounds=launch.max_rounds)
        expected = sim.run(module, launch.params, launch.inputs, cfg)
        for backend in backends:
            got = run_backend(backend, compiled, launch.params, launch.inputs, cfg)
            d = compare(compiled.program, expected, got)
            if d is not None:
                problems.append((launch, backend, d.render()))
    return problems
