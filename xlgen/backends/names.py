"""Identifiers in generated code: .xl names are kept, except where they would clash.

User identifiers may not start with `xl_` (the checker enforces it), so
prefixing a clashing name with `xl_` always yields a fresh identifier.
"""

from __future__ import annotations

import keyword
import re

from ..semantics import ops, vec

# Names the generated code uses for itself, in both backends.
INTERNAL = {"r", "sh", "p", "err", "req_id", "math", "np", "self"}

CPP_KEYWORDS = set("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype default
delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline int long
mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
xor_eq int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t NULL EOF assert main
min max abs fabsf sqrtf printf
""".split())

PY_RESERVED = set(keyword.kwlist) | set(keyword.softkwlist) | {"int", "float", "bool", "range", "len", "list", "abs", "min", "max", "print"}


# Found by differential fuzzing (xlgen/tools/check/fuzzgen/): besides keywords, a user name
# must not collide with what the generated code names for itself, nor with a
# macro of the headers it includes (a const `NAN`, `M_PI` or `INT32_MAX`
# becomes a number before the C++ compiler sees it), nor, in the simulator, with
# what its module imports (a local `check_index` shadows the index check).
# Names the generated code defines next to the user's: structs, round helpers,
# function prefixes (a const `stage_s` next to stage `s`), the runtime's own
# XL_* macros and Xl* types, and CUDA's built-in variables and functions.
CPP_GENERATED = {
    "Params", "Request", "Shared", "XlErr", "XlSink", "XlLaunch", "XlControl", "is_done", "run_request_stages",
    "run_arbiter", "arbiter_stage_index", "retire_check", "std",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "atomicAdd", "atomicCAS", "atomicExch",
    "atomicMin", "atomicMax", "clock64",
}
CPP_PREFIXES = ("fn_", "stage_", "guard_", "trace_", "XL_", "Xl")
# Macros of <stdint.h>, <math.h>, <string.h>, <stdlib.h> (via <vector>) that are valid
# xl names: listed, or matched by the families below.
C_MACROS = set("""
NAN INFINITY MAXFLOAT NULL EOF RAND_MAX MB_CUR_MAX EXIT_FAILURE EXIT_SUCCESS BIG_ENDIAN LITTLE_ENDIAN PDP_ENDIAN
BYTE_ORDER FD_CLR FD_ISSET FD_SET FD_SETSIZE FD_ZERO NFDBITS WCONTINUED WEXITED WEXITSTATUS WIFCONTINUED WIFEXITED
WIFSIGNALED WIFSTOPPED WNOHANG WNOWAIT WSTOPPED WSTOPSIG WTERMSIG WUNTRACED alloca issubnormal math_errhandling
strdupa strndupa errno assert offsetof stdin stdout stderr
be16toh be32toh be64toh htobe16 htobe32 htobe64 htole16 htole32 htole64 le16toh le32toh le64toh
""".split())
_C_MACRO_FAMILIES = re.compile(
    r"M_\w+|U?INT\w*_(MAX|MIN|WIDTH|C)|(PTRDIFF|SIG_ATOMIC|SIZE|WCHAR|WINT)_(MAX|MIN|WIDTH)"
    r"|FP_\w+|HUGE_VAL\w*|SNAN\w*|MATH_ERR\w+"
)
# What a generated simulator module imports or defines (it star-imports xlgen.semantics.ops).
PY_GENERATED = {n for n in dir(ops) if not n.startswith("_")} | {n for n in dir(vec) if not n.startswith("_")} | {
    "Params", "Request", "Shared", "STAGES", "TRACES", "PIPELINE", "SOURCE", "REQUEST_LAYOUT", "SHARED_LAYOUT",
    "init_request", "init_shared", "is_done",
}
PY_PREFIXES = ("fn_", "stage_", "guard_", "trace_", "b_")


def cpp(name: str) -> str:
    clash = (name in CPP_KEYWORDS or name in INTERNAL or name in CPP_GENERATED or name in C_MACROS
             or name.startswith(CPP_PREFIXES) or _C_MACRO_FAMILIES.fullmatch(name) is not None
             or "__" in name or (name[:1] == "_" and name[1:2].isupper()))  # reserved in C++
    return "xl_" + name if clash else name


def py(name: str) -> str:
    clash = (name in PY_RESERVED or name in INTERNAL or name in PY_GENERATED or name.startswith(PY_PREFIXES)
             or name.startswith("__"))
    return "xl_" + name if clash else name
