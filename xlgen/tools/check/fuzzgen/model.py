"""What the generator knows about a program (symbols, types, contexts, cases) and the
values it draws from (edge values of every type, names that collide with generated code)."""

from __future__ import annotations
import math
import re
import struct
from dataclasses import dataclass, field


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


# More, drawn only by programs with pools (so the programs of seeds without pools stay as they were):
# the simulator's pool helpers and table, the C++ pool store macros.
POOL_NASTY_NAMES = ["pool_read", "pool_write", "new_pool", "pool_element", "POOLS", "v_pool_get", "v_pool_set",
                    "XL_POOL_STORE", "XL_POOL_ITER_STORE"]


# Never usable as xl names: the grammar's keywords, the checker's reserved names, the prelude's builtins.
_NOT_NAMES = {
    "pipeline", "import", "const", "param", "enum", "flags", "request", "shared", "builtin", "warp", "fn", "proc", "stage",
    "arbiter", "trace", "done", "when", "let", "if", "elif", "else", "for", "in", "break", "continue", "return",
    "has", "true", "false", "as", "req_id", "min", "max", "abs", "clamp", "sqrt", "i32", "u32", "f32", "bool",
    "hash_u32", "verify_prefix", "target_token", "draft_token", "lanes", "tensor", "exp", "log", "tanh", "rsqrt",
    "sigmoid", "pool", "owned", "by", "collective", "output", "progress", "metric", "companion",
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
class Pool:
    """A pool (docs/language.md, Pools): dims[0] pages, page p owned by request owner[p]."""

    name: str
    elem: str  # i32, u32 or f32
    dims: tuple[int, ...]
    owner: str


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
    # in a lanes loop body: array -> the one index its iterations use; pool -> its index tuple (text)
    lanes: dict | None = None
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
