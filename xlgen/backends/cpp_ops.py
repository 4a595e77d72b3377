"""C++/CUDA code for each operator of the IR, keyed like py_ops.py.

`{e}` stands for the error sink arguments of a checked operation
(`err, KEY, LINE`): the operation records a runtime error there instead of
trapping, and the statement around it bails out (see emit_cpp.py).
The functions named here live in xlgen/runtime/xl_runtime.cuh.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import ir
from ..semantics.py_ops import flag_mask, type_key

BINARY: dict[tuple[str, str], str] = {}
for _t in ("i32", "u32"):
    BINARY.update({("+", _t): "xl_add({a}, {b})", ("-", _t): "xl_sub({a}, {b})", ("*", _t): "xl_mul({a}, {b})",
                   ("/", _t): "xl_div({e}, {a}, {b})", ("%", _t): "xl_rem({e}, {a}, {b})",
                   ("<<", _t): "xl_shl({e}, {a}, {b})", (">>", _t): "xl_shr({e}, {a}, {b})"})
BINARY.update({("+", "f32"): "xl_fadd({a}, {b})", ("-", "f32"): "xl_fsub({a}, {b})",
               ("*", "f32"): "xl_fmul({a}, {b})", ("/", "f32"): "xl_fdiv({a}, {b})"})
for _t in ("i32", "u32", "f32"):
    for _op in ("==", "!=", "<", "<=", ">", ">="):
        BINARY[(_op, _t)] = "({a} " + _op + " {b})"
for _t in ("i32", "u32", "flags"):
    for _op in "|^":
        BINARY[(_op, _t)] = "({a} " + _op + " {b})"
    BINARY[("&", _t)] = "xl_band({a}, {b})"  # a call, not `&`: see xl_band in xl_runtime.cuh
for _t in ("i32", "u32", "enum", "flags"):  # calls, not operators: see xl_eq in xl_runtime.cuh
    BINARY[("==", _t)] = "xl_eq({a}, {b})"
    BINARY[("!=", _t)] = "xl_ne({a}, {b})"
BINARY.update({("==", "bool"): "xl_beq({a}, {b})", ("!=", "bool"): "xl_bne({a}, {b})"})  # likewise
BINARY.update({("&&", "bool"): "({a} && {b})", ("||", "bool"): "({a} || {b})",
               ("has", "flags"): "xl_has({a}, {b})"})

CHECKED_BINARY = {"/", "%", "<<", ">>"}  # on integers: these take `{e}`

UNARY = {
    ("-", "i32"): "xl_neg({a})", ("-", "u32"): "(0u - {a})", ("-", "f32"): "xl_fneg({a})",
    ("!", "bool"): "(!{a})",
    ("~", "i32"): "(~{a})", ("~", "u32"): "(~{a})", ("~", "flags"): "({a} ^ {mask}u)",
}

CAST = {
    ("i32", "u32"): "(uint32_t)({a})", ("u32", "i32"): "(int32_t)({a})",
    ("i32", "f32"): "xl_i2f({a})", ("u32", "f32"): "xl_u2f({a})",
    ("f32", "i32"): "xl_f2i({e}, {a})", ("f32", "u32"): "xl_f2u({e}, {a})",
    ("bool", "i32"): "(int32_t)({a})", ("bool", "u32"): "(uint32_t)({a})", ("bool", "f32"): "(({a}) ? 1.0f : 0.0f)",
    ("enum", "i32"): "{a}", ("enum", "u32"): "(uint32_t)({a})",
    ("flags", "i32"): "(int32_t)({a})", ("flags", "u32"): "{a}",
}

INTRINSIC = {
    ("min", "*"): "xl_min({a}, {b})", ("max", "*"): "xl_max({a}, {b})", ("clamp", "*"): "xl_clamp({a}, {b}, {c})",
    ("abs", "i32"): "xl_abs({a})", ("abs", "f32"): "xl_fabs({a})", ("sqrt", "f32"): "xl_fsqrt({a})",
}

# C++ types: what a value is while computing, and how a field stores it.
VALUE_TYPE = {"i32": "int32_t", "u32": "uint32_t", "f32": "float", "bool": "bool", "enum": "int32_t", "flags": "uint32_t"}
STORAGE_TYPE = dict(VALUE_TYPE, bool="uint32_t")


def value_type(t: ir.Type) -> str:
    return VALUE_TYPE[type_key(t)]


def storage_type(t: ir.Type) -> str:
    return STORAGE_TYPE[type_key(t)]


def literal(value, t: ir.Type) -> str:
    key = type_key(t)
    if t == ir.F32:
        if value != value:
            return "XL_NAN"
        if math.isinf(value):
            return "XL_INF" if value > 0 else "(-XL_INF)"
        text = str(np.float32(value))  # shortest text that reads back as this binary32 value
        if "." not in text and "e" not in text and "inf" not in text:
            text += ".0"
        return text + "f"
    if t == ir.BOOL:
        return "true" if value else "false"
    if key in ("u32", "flags"):
        return f"{int(value)}u"
    if int(value) == -(1 << 31):
        return "(-2147483647 - 1)"
    return str(int(value))


def binary_is_checked(e: ir.Binary) -> bool:
    return e.op in CHECKED_BINARY and ir.is_int(e.left.type)


def cast_is_checked(e: ir.Cast) -> bool:
    return e.operand.type == ir.F32 and ir.is_int(e.type)


def binary_code(e: ir.Binary, a: str, b: str, sink: str = "") -> str:
    return BINARY[(e.op, type_key(e.left.type))].format(a=a, b=b, e=sink)


def unary_code(e: ir.Unary, a: str) -> str:
    mask = flag_mask(e.type) if isinstance(e.type, ir.EnumType) else 0
    return UNARY[(e.op, type_key(e.type))].format(a=a, mask=mask)


def cast_code(e: ir.Cast, a: str, sink: str = "") -> str:
    src, dst = type_key(e.operand.type), type_key(e.type)
    if src == dst:
        return a
    return CAST[(src, dst)].format(a=a, e=sink)


def intrinsic_code(e: ir.Intrinsic, args: list[str]) -> str:
    template = INTRINSIC.get((e.name, "*")) or INTRINSIC[(e.name, type_key(e.type))]
    return template.format(**dict(zip("abc", args)))
