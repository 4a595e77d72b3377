"""Identifiers in generated code: .xl names are kept, except where they would clash.

User identifiers may not start with `xl_` (the checker enforces it), so
prefixing a clashing name with `xl_` always yields a fresh identifier.
"""

from __future__ import annotations

import keyword

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


def cpp(name: str) -> str:
    return "xl_" + name if name in CPP_KEYWORDS or name in INTERNAL or name.startswith("__") else name


def py(name: str) -> str:
    return "xl_" + name if name in PY_RESERVED or name in INTERNAL or name.startswith("__") else name
