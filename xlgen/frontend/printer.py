"""AST -> canonical .xl text (`xlgen fmt`). parse(print(parse(x))) == parse(x).

Comments and blank lines come from the module's side table (xlgen/frontend/comments.py):
own-line comments are printed above the line they lead, at its indentation;
a trailing comment stays at the end of its line. A blank line always separates
top-level declarations (except runs of one-line declarations of one kind), and
a single blank line written between statements, fields or declarations is kept.
Printing is idempotent: fmt(fmt(x)) == fmt(x).
"""

from __future__ import annotations

from . import ast as A
from . import comments as C

INDENT = "    "
WIDTH = 100  # a proc's header or a call longer than this is wrapped
# Binding strength of each binary operator, loosest first (as in grammar/xl.lark).
_LEVELS = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "has"), ("|",), ("^",), ("&",),
           ("<<", ">>"), ("+", "-"), ("*", "/", "%")]
PRECEDENCE = {op: i + 2 for i, ops in enumerate(_LEVELS) for op in ops}
COND_PREC, CAST_PREC, UNARY_PREC, ATOM_PREC = 1, 11, 12, 13
NON_ASSOCIATIVE = set(_LEVELS[2])
ONE_LINERS = (A.Import, A.Const, A.Param, A.BuiltinDecl, A.TraceDecl, A.MetricDecl)


def format_module(module: A.Module) -> str:
    p = _Printer(module.comments)
    if module.pipeline:
        p.line(0, f"pipeline {module.pipeline}", C.PIPELINE)
    previous = None
    for item in module.items:
        kind = type(item)
        separate = not (kind in ONE_LINERS and kind is previous)
        p.item(item, separate)
        previous = kind
    p.end_of_file()
    return "\n".join(p.out) + "\n" if p.out else ""


class _Printer:
    def __init__(self, table: dict | None):
        self.table = table or {}
        self.out: list[str] = []
        self.fresh = True  # at the start of the file or of a block: no blank line here

    # ---- lines, comments, blank lines
    def _blank(self, wanted: bool) -> None:
        if wanted and not self.fresh and self.out and self.out[-1] != "":
            self.out.append("")

    def line(self, depth: int, text: str, key, *, separate: bool = False, closing: bool = False) -> None:
        """Print one line with its comments. `separate`: a blank line above it (top level).
        `closing`: a line starting with `}`; comments above it belong inside the block."""
        info = self.table.get(key) or C.LineComments()
        comment_pad = INDENT * (depth + 1 if closing else depth)
        first = True
        for comment, blank in info.leading:
            self._blank((separate or blank) if first else blank)
            first = False
            self.out.append(comment_pad + comment)
            self.fresh = False
        own_blank = info.blank_before and not closing
        self._blank((separate or own_blank) if first else own_blank)
        trailing = f"  {info.trailing}" if info.trailing else ""
        self.out.append(INDENT * depth + text + trailing)
        self.fresh = text.endswith("{")

    def end_of_file(self) -> None:
        info = self.table.get(C.EOF)
        for comment, blank in info.leading if info else ():
            self._blank(blank)
            self.out.append(comment)
            self.fresh = False

    # ---- declarations
    def item(self, item, separate: bool) -> None:
        key = C.head(item)
        if isinstance(item, A.EnumDecl):
            keyword = "flags" if item.is_flags else "enum"
            info = self.table.get(key)
            if info is not None and info.multiline:
                self.line(0, f"{keyword} {item.name} {{", key, separate=separate)
                for m in item.members:
                    self.line(1, f"{m.name},", C.head(m))
                self.line(0, "}", C.close(item), closing=True)
            else:
                members = ", ".join(m.name for m in item.members)
                self.line(0, f"{keyword} {item.name} {{ {members} }}", key, separate=separate)
        elif isinstance(item, A.StateBlock):
            self.line(0, f"{item.kind} {{", key, separate=separate)
            for f in item.fields:
                init = f" = {expr(f.init)}" if f.init is not None else ""
                self.line(1, f"{f.name}: {_type(f.type)}{init}", C.head(f))
            self.line(0, "}", C.close(item), closing=True)
        elif isinstance(item, A.FnDecl):
            self.line(0, f"fn {item.name}({_params(item.params)}) -> {_type(item.ret)} {{", key, separate=separate)
            self.block(item.body, 1)
            self.line(0, "}", C.close(item), closing=True)
        elif isinstance(item, A.ProcDecl):
            head = f"proc {item.name}({_params(item.params)}) {{"
            if len(head) <= WIDTH:
                self.line(0, head, key, separate=separate)
            else:  # a parameter a line
                self.line(0, f"proc {item.name}(", key, separate=separate)
                self.out.extend(f"{INDENT}{p.name}: {_type(p.type)}," for p in item.params)
                self.out.append(") {")
                self.fresh = True
            self.block(item.body, 1)
            self.line(0, "}", C.close(item), closing=True)
        elif isinstance(item, A.StageDecl):
            guard = f" when {expr(item.guard)}" if item.guard is not None else ""
            self.line(0, f"{item.kind} {item.name}{guard} {{", key, separate=separate)
            self.block(item.body, 1)
            self.line(0, "}", C.close(item), closing=True)
        else:
            self.line(0, _one_line_item(item), key, separate=separate)

    # ---- statements
    def block(self, stmts, depth: int) -> None:
        for s in stmts:
            self.stmt(s, depth)

    def stmt(self, s, depth: int) -> None:
        key = C.head(s)
        if isinstance(s, A.If):
            for i, (cond, body) in enumerate(s.arms):
                if i == 0:
                    self.line(depth, f"if {expr(cond)} {{", key)
                else:
                    self.line(depth, f"}} elif {expr(cond)} {{", C.arm(s, i), closing=True)
                self.block(body, depth + 1)
            if s.otherwise is not None:
                self.line(depth, "} else {", C.arm(s, len(s.arms)), closing=True)
                self.block(s.otherwise, depth + 1)
            self.line(depth, "}", C.close(s), closing=True)
        elif isinstance(s, (A.For, A.Lanes)):
            lanes = "lanes " if isinstance(s, A.Lanes) else ""
            self.line(depth, f"{lanes}for {s.var} in {expr(s.start)}..{expr(s.stop)} {{", key)
            self.block(s.body, depth + 1)
            self.line(depth, "}", C.close(s), closing=True)
        elif isinstance(s, A.CallStmt) and len(INDENT * depth + _simple_stmt(s)) > WIDTH:
            # A long call (a proc's arguments): its arguments on lines of their own, packed.
            self.line(depth, f"{s.call.func}(", key)
            rows = [""]
            for a in (expr(a) + "," for a in s.call.args):
                if rows[-1] and len(INDENT * (depth + 1) + rows[-1] + " " + a) > WIDTH:
                    rows.append("")
                rows[-1] = f"{rows[-1]} {a}" if rows[-1] else a
            self.out.extend(INDENT * (depth + 1) + r for r in rows)
            self.out.append(INDENT * depth + ")")
        else:
            self.line(depth, _simple_stmt(s), key)


def _one_line_item(item) -> str:
    if isinstance(item, A.Import):
        return f'import "{item.path}"'
    if isinstance(item, A.Const):
        return f"const {item.name}: {_type(item.type)} = {expr(item.value)}"
    if isinstance(item, A.Param):
        return f"param {item.name}: {_type(item.type)} = {expr(item.value)}"
    if isinstance(item, A.BuiltinDecl):
        warp = "warp " if item.warp else ""
        ret = f" -> {_type(item.ret)}" if item.ret else ""
        return f"builtin {warp}fn {item.name}({_params(item.params)}){ret}"
    if isinstance(item, A.TensorDecl):
        return f"tensor {item.name}: {item.elem}[{', '.join(expr(d) for d in item.dims)}]"
    if isinstance(item, A.PoolDecl):
        return f"pool {item.name}: {item.elem}[{', '.join(expr(d) for d in item.dims)}] owned by {item.owner.name}"
    if isinstance(item, A.TraceDecl):
        return f"trace {item.stage}: {', '.join(f.name for f in item.fields)}"
    if isinstance(item, A.DoneDecl):
        return f"done when {expr(item.cond)}"
    return _tool_declaration(item)


def _tool_declaration(item) -> str:
    """The declarations for the tools (output, progress, metric, companion)."""
    if isinstance(item, A.OutputDecl):
        return f"output {item.field.name}[{item.count.name}]"
    if isinstance(item, A.ProgressDecl):
        return f"progress {item.stage.name}"
    if isinstance(item, A.MetricDecl):
        group = f"[{item.group.name}]" if item.group is not None else ""
        terms = f" {item.op} ".join(_metric_term(t) for t in item.terms)
        return f"metric {item.name}{group} = {terms}"
    if isinstance(item, A.CompanionDecl):
        return f'companion "{item.path}"'
    raise TypeError(item)


def _metric_term(term) -> str:
    of = f"{term.stage.name}.{term.field.name}" if term.stage is not None else term.field.name
    return f"{term.agg.name}({of})"


def _simple_stmt(s) -> str:
    if isinstance(s, A.Let):
        t = f": {_type(s.type)}" if s.type else ""
        return f"let {s.name}{t} = {expr(s.value)}"
    if isinstance(s, A.Assign):
        target = s.target if s.index is None else f"{s.target}[{expr(s.index)}]"
        return f"{target} {s.op} {expr(s.value)}"
    if isinstance(s, A.MultiAssign):
        return f"{s.target}[{', '.join(expr(i) for i in s.indices)}] {s.op} {expr(s.value)}"
    if isinstance(s, A.Break):
        return "break"
    if isinstance(s, A.Continue):
        return "continue"
    if isinstance(s, A.Return):
        return f"return {expr(s.value)}"
    if isinstance(s, A.CallStmt):
        return expr(s.call)
    raise TypeError(s)


def _params(params) -> str:
    return ", ".join(f"{p.name}: {_type(p.type)}" for p in params)


def _type(t: A.TypeRef) -> str:
    if t.open_array:
        return f"{t.name}[]"
    if t.length is not None:
        return f"{t.name}[{expr(t.length)}]"
    return t.name


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
    if isinstance(e, A.MultiIndex):
        return f"{e.base}[{', '.join(expr(i) for i in e.indices)}]", ATOM_PREC
    if isinstance(e, A.Reduction):
        return f"{e.op}({e.var} in {expr(e.start)}..{expr(e.stop)}: {expr(e.value)})", ATOM_PREC
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
