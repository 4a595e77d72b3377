"""Python code for each operator of the IR, keyed by (operator, operand type).

One table serves two masters: the simulator emitter pastes these templates
into generated code, and the checker's constant folder evaluates them, so a
folded constant means exactly what the simulator computes. Helper names come
from xlgen.semantics.ops (the generated simulator star-imports it).
"""

from __future__ import annotations

import math

from ..core import ir
from . import ops

_WRAP = {"i32": "wrap_i32({})", "u32": "(({}) & 0xFFFFFFFF)", "f32": "f32({})"}

BINARY: dict[tuple[str, str], str] = {}
for _t in ("i32", "u32", "f32"):
    for _op in "+-*":
        BINARY[(_op, _t)] = _WRAP[_t].format("{a} " + _op + " {b}")
    for _op in ("==", "!=", "<", "<=", ">", ">="):
        BINARY[(_op, _t)] = "({a} " + _op + " {b})"
BINARY.update({
    ("/", "i32"): "div_i32({a}, {b})", ("%", "i32"): "rem_i32({a}, {b})",
    ("/", "u32"): "div_u32({a}, {b})", ("%", "u32"): "rem_u32({a}, {b})",
    ("/", "f32"): "div_f32({a}, {b})",
    ("<<", "i32"): "shl_i32({a}, {b})", (">>", "i32"): "shr_i32({a}, {b})",
    ("<<", "u32"): "shl_u32({a}, {b})", (">>", "u32"): "shr_u32({a}, {b})",
})
for _t in ("i32", "u32", "flags"):
    for _op in "&|^":
        BINARY[(_op, _t)] = "({a} " + _op + " {b})"
for _t in ("bool", "enum", "flags"):
    BINARY[("==", _t)] = "({a} == {b})"
    BINARY[("!=", _t)] = "({a} != {b})"
BINARY[("&&", "bool")] = "({a} and {b})"
BINARY[("||", "bool")] = "({a} or {b})"
BINARY[("has", "flags")] = "(({a} & {b}) == {b})"

UNARY = {
    ("-", "i32"): "wrap_i32(-{a})", ("-", "u32"): "((-{a}) & 0xFFFFFFFF)", ("-", "f32"): "(-{a})",
    ("!", "bool"): "(not {a})",
    ("~", "i32"): "(~{a})", ("~", "u32"): "({a} ^ 0xFFFFFFFF)", ("~", "flags"): "({a} ^ {mask})",
}

CAST = {
    ("i32", "u32"): "({a} & 0xFFFFFFFF)", ("u32", "i32"): "wrap_i32({a})",
    ("i32", "f32"): "f32(float({a}))", ("u32", "f32"): "f32(float({a}))",
    ("f32", "i32"): "f32_to_i32({a})", ("f32", "u32"): "f32_to_u32({a})",
    ("bool", "i32"): "int({a})", ("bool", "u32"): "int({a})", ("bool", "f32"): "float({a})",
    ("enum", "i32"): "{a}", ("enum", "u32"): "{a}", ("flags", "i32"): "wrap_i32({a})", ("flags", "u32"): "{a}",
}

INTRINSIC = {
    ("min", "*"): "min_({a}, {b})", ("max", "*"): "max_({a}, {b})", ("clamp", "*"): "clamp({a}, {b}, {c})",
    ("abs", "i32"): "abs_i32({a})", ("abs", "f32"): "abs({a})", ("sqrt", "f32"): "sqrt_f32({a})",
}


def type_key(t: ir.Type) -> str:
    if isinstance(t, ir.EnumType):
        return "flags" if t.is_flags else "enum"
    return str(t)


def flag_mask(t: ir.EnumType) -> int:
    return (1 << len(t.members)) - 1


def literal(value, t: ir.Type) -> str:
    """A Python literal for a constant value (f32 infinities and NaN by name)."""
    if t == ir.F32:
        if value != value:
            return "NAN"
        if math.isinf(value):
            return "INF" if value > 0 else "-INF"
        return repr(float(value))
    if t == ir.BOOL:
        return "True" if value else "False"
    return str(int(value))


def binary_code(e: ir.Binary, a: str, b: str) -> str:
    return BINARY[(e.op, type_key(e.left.type))].format(a=a, b=b)


def unary_code(e: ir.Unary, a: str) -> str:
    mask = flag_mask(e.type) if isinstance(e.type, ir.EnumType) else 0
    return UNARY[(e.op, type_key(e.type))].format(a=a, mask=mask)


def cast_code(e: ir.Cast, a: str) -> str:
    src, dst = type_key(e.operand.type), type_key(e.type)
    if src == dst:
        return a
    return CAST[(src, dst)].format(a=a)


def intrinsic_code(e: ir.Intrinsic, args: list[str]) -> str:
    template = INTRINSIC.get((e.name, "*")) or INTRINSIC[(e.name, type_key(e.type))]
    return template.format(**dict(zip("abc", args)))


def select_code(c: str, t: str, f: str) -> str:
    return f"({t} if {c} else {f})"


_NAMESPACE = {name: getattr(ops, name) for name in dir(ops) if not name.startswith("_")}
_NAMESPACE.update(INF=math.inf, NAN=math.nan)


def evaluate_const(e: ir.Expr):
    """The value of an expression whose operands are all constants (raises XlRuntimeError)."""
    code = _const_code(e)
    value = eval(code, _NAMESPACE)  # noqa: S307 - code is built from the tables above only
    if e.type == ir.BOOL:
        return bool(value)
    return value


def _const_code(e: ir.Expr) -> str:
    if isinstance(e, ir.Const):
        return literal(e.value, e.type)
    if isinstance(e, ir.Binary):
        return binary_code(e, _const_code(e.left), _const_code(e.right))
    if isinstance(e, ir.Unary):
        return unary_code(e, _const_code(e.operand))
    if isinstance(e, ir.Cast):
        return cast_code(e, _const_code(e.operand))
    if isinstance(e, ir.Intrinsic):
        return intrinsic_code(e, [_const_code(a) for a in e.args])
    if isinstance(e, ir.Select):
        return select_code(_const_code(e.cond), _const_code(e.then), _const_code(e.otherwise))
    raise TypeError(f"not a constant expression: {e}")
