"""AST -> canonical .xl text (`xlgen fmt`). parse(print(parse(x))) == parse(x)."""

from __future__ import annotations

from . import ast as A

INDENT = "    "
# Binding strength of each binary operator, loosest first (as in grammar/xl.lark).
_LEVELS = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "has"), ("|",), ("^",), ("&",),
           ("<<", ">>"), ("+", "-"), ("*", "/", "%")]
PRECEDENCE = {op: i + 2 for i, ops in enumerate(_LEVELS) for op in ops}
COND_PREC, CAST_PREC, UNARY_PREC, ATOM_PREC = 1, 11, 12, 13
NON_ASSOCIATIVE = set(_LEVELS[2])


def format_module(module: A.Module) -> str:
    out: list[str] = []
    if module.pipeline:
        out.append(f"pipeline {module.pipeline}")
    previous = None
    for item in module.items:
        kind = type(item)
        one_liner = kind in (A.Import, A.Const, A.Param, A.BuiltinDecl, A.TraceDecl)
        if out and not (one_liner and kind is previous):
            out.append("")
        out.extend(_item(item))
        previous = kind
    return "\n".join(out) + "\n"


def _item(item) -> list[str]:
    if isinstance(item, A.Import):
        return [f'import "{item.path}"']
    if isinstance(item, A.Const):
        return [f"const {item.name}: {_type(item.type)} = {expr(item.value)}"]
    if isinstance(item, A.Param):
        return [f"param {item.name}: {_type(item.type)} = {expr(item.value)}"]
    if isinstance(item, A.EnumDecl):
        keyword = "flags" if item.is_flags else "enum"
        return [f"{keyword} {item.name} {{ {', '.join(m.name for m in item.members)} }}"]
    if isinstance(item, A.StateBlock):
        lines = [f"{item.kind} {{"]
        for f in item.fields:
            init = f" = {expr(f.init)}" if f.init is not None else ""
            lines.append(f"{INDENT}{f.name}: {_type(f.type)}{init}")
        return lines + ["}"]
    if isinstance(item, A.BuiltinDecl):
        warp = "warp " if item.warp else ""
        ret = f" -> {_type(item.ret)}" if item.ret else ""
        return [f"builtin {warp}fn {item.name}({_params(item.params)}){ret}"]
    if isinstance(item, A.FnDecl):
        return [f"fn {item.name}({_params(item.params)}) -> {_type(item.ret)} {{", *_block(item.body, 1), "}"]
    if isinstance(item, A.StageDecl):
        guard = f" when {expr(item.guard)}" if item.guard is not None else ""
        return [f"{item.kind} {item.name}{guard} {{", *_block(item.body, 1), "}"]
    if isinstance(item, A.TraceDecl):
        return [f"trace {item.stage}: {', '.join(f.name for f in item.fields)}"]
    if isinstance(item, A.DoneDecl):
        return [f"done when {expr(item.cond)}"]
    raise TypeError(item)


def _params(params) -> str:
    return ", ".join(f"{p.name}: {_type(p.type)}" for p in params)


def _type(t: A.TypeRef) -> str:
    if t.open_array:
        return f"{t.name}[]"
    if t.length is not None:
        return f"{t.name}[{expr(t.length)}]"
    return t.name


def _block(stmts, depth: int) -> list[str]:
    lines: list[str] = []
    for s in stmts:
        lines.extend(_stmt(s, depth))
    return lines


def _stmt(s, depth: int) -> list[str]:
    pad = INDENT * depth
    if isinstance(s, A.Let):
        t = f": {_type(s.type)}" if s.type else ""
        return [f"{pad}let {s.name}{t} = {expr(s.value)}"]
    if isinstance(s, A.Assign):
        target = s.target if s.index is None else f"{s.target}[{expr(s.index)}]"
        return [f"{pad}{target} {s.op} {expr(s.value)}"]
    if isinstance(s, A.If):
        lines = []
        for i, (cond, body) in enumerate(s.arms):
            head = "if" if i == 0 else "} elif"
            lines.append(f"{pad}{head} {expr(cond)} {{")
            lines.extend(_block(body, depth + 1))
        if s.otherwise is not None:
            lines.append(f"{pad}}} else {{")
            lines.extend(_block(s.otherwise, depth + 1))
        return lines + [f"{pad}}}"]
    if isinstance(s, A.For):
        return [f"{pad}for {s.var} in {expr(s.start)}..{expr(s.stop)} {{", *_block(s.body, depth + 1), f"{pad}}}"]
    if isinstance(s, A.Break):
        return [f"{pad}break"]
    if isinstance(s, A.Continue):
        return [f"{pad}continue"]
    if isinstance(s, A.Return):
        return [f"{pad}return {expr(s.value)}"]
    if isinstance(s, A.CallStmt):
        return [f"{pad}{expr(s.call)}"]
    raise TypeError(s)


def expr(e, context: int = 0) -> str:
    """Print `e`, parenthesised when it binds more loosely than `context` requires."""
    text, prec = _expr(e)
    return f"({text})" if prec < context else text


def _expr(e) -> tuple[str, int]:
    if isinstance(e, A.IntLit):
        return e.text, ATOM_PREC
    if isinstance(e, A.FloatLit):
        return e.text, ATOM_PREC
    if isinstance(e, A.BoolLit):
        return ("true" if e.value else "false"), ATOM_PREC
    if isinstance(e, A.Name):
        return e.id, ATOM_PREC
    if isinstance(e, A.Member):
        return f"{e.base}.{e.member}", ATOM_PREC
    if isinstance(e, A.Index):
        return f"{e.base}[{expr(e.index)}]", ATOM_PREC
    if isinstance(e, A.Call):
        return f"{e.func}({', '.join(expr(a) for a in e.args)})", ATOM_PREC
    if isinstance(e, A.Unary):
        return f"{e.op}{expr(e.operand, UNARY_PREC)}", UNARY_PREC
    if isinstance(e, A.Cast):
        return f"{expr(e.operand, CAST_PREC)} as {e.to}", CAST_PREC
    if isinstance(e, A.Binary):
        p = PRECEDENCE[e.op]
        # Left-associative: the right operand needs parentheses at equal strength.
        left_ctx = p + 1 if e.op in NON_ASSOCIATIVE else p
        return f"{expr(e.left, left_ctx)} {e.op} {expr(e.right, p + 1)}", p
    if isinstance(e, A.Conditional):
        # `c ? a : b` is right-associative; its condition is an or-expression.
        return f"{expr(e.cond, COND_PREC + 1)} ? {expr(e.then)} : {expr(e.otherwise, COND_PREC)}", COND_PREC
    raise TypeError(e)
