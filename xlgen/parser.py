"""Text -> AST. The grammar lives in grammar/xl.lark; each rule maps to one AST node here."""

from __future__ import annotations

import functools

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import ast as A
from .diagnostics import Diagnostic, Loc
from .resources import data_dir


@functools.cache
def _lark() -> Lark:
    text = (data_dir("grammar") / "xl.lark").read_text()
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=False)


# How a terminal is named in an error message.
_TERMINAL_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a float", "STRING": "a string",
    "ASSIGN_OP": "'=' or a compound assignment", "CMP_OP": "a comparison", "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'", "SHIFT_OP": "'<<' or '>>'", "UNARY_OP": "'-', '!' or '~'",
    "OR_OP": "'||'", "AND_OP": "'&&'", "BOR_OP": "'|'", "XOR_OP": "'^'", "BAND_OP": "'&'",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COLON": "':'", "COMMA": "','", "EQUAL": "'='", "DOT": "'.'", "QMARK": "'?'", "__ANON_0": "'->'",
    "__ANON_1": "'..'", "$END": "end of file",
}


def _describe_expected(expected) -> str:
    words = []
    for name in sorted(expected):
        word = _TERMINAL_WORDS.get(name)
        if word is None:
            word = f"'{name.lower()}'" if name.isupper() and not name.startswith("_") else name
        if word not in words:
            words.append(word)
    if len(words) > 8:
        words = words[:8] + ["..."]
    return ", ".join(words)


def _token_text(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    return f"'{tok}'"


def parse_text(text: str, file: str) -> A.Module:
    """Parse one .xl file. Raises ParseFailure (holding a Diagnostic) on bad syntax."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        raise ParseFailure(_diagnose(exc, text, file)) from None
    module = _ToAst(file).transform(tree)
    return A.Module(module.pipeline, module.items, file=file, loc=Loc(file, 1, 1))


class ParseFailure(Exception):
    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _diagnose(exc: UnexpectedInput, text: str, file: str) -> Diagnostic:
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else "?"
        if ch == '"':
            msg = "unterminated string (strings end on the same line)"
        else:
            msg = f"unexpected character {ch!r}"
        return Diagnostic("error", Loc(file, exc.line, exc.column), msg)
    if isinstance(exc, UnexpectedEOF):
        lines = text.splitlines() or [""]
        loc = Loc(file, len(lines), len(lines[-1]) + 1)
        return Diagnostic("error", loc, f"unexpected end of file; expected {_describe_expected(exc.expected)}")
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    if tok.type == "$END":
        lines = text.splitlines() or [""]
        loc = Loc(file, len(lines), len(lines[-1]) + 1)
    else:
        loc = Loc(file, tok.line, tok.column)
    hint = _hint(exc)
    msg = f"unexpected {_token_text(tok)}; expected {_describe_expected(exc.expected)}{hint}"
    return Diagnostic("error", loc, msg)


def _hint(exc: UnexpectedToken) -> str:
    tok = exc.token
    if tok.type == "SEMICOLON" or str(tok) == ";":
        return " (statements need no ';')"
    if str(tok) == "=" and "CMP_OP" in exc.expected:
        return " (did you mean '=='?)"
    if tok.type == "ASSIGN_OP" and str(tok) == "=" and "RPAR" in exc.expected:
        return " (did you mean '=='?)"
    return ""


def _loc_of(file: str, meta_or_tok) -> Loc:
    line = getattr(meta_or_tok, "line", None)
    col = getattr(meta_or_tok, "column", None)
    if line is None:
        return Loc(file, 0, 0)
    return Loc(file, line, col)


class _ToAst(Transformer):
    """One method per grammar rule; each returns the matching AST node."""

    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _loc(self, meta) -> Loc:
        return _loc_of(self.file, meta)

    # ---- top level
    @v_args(meta=True)
    def start(self, meta, children):
        pipeline = None
        items = []
        for child in children:
            if isinstance(child, tuple) and child and child[0] == "pipeline":
                pipeline = child[1]
            else:
                items.append(child)
        return A.Module(pipeline, tuple(items), file=self.file)

    def pipeline_header(self, children):
        return ("pipeline", str(children[0]))

    @v_args(meta=True)
    def import_decl(self, meta, children):
        return A.Import(str(children[0])[1:-1], loc=self._loc(meta))

    @v_args(meta=True)
    def const_decl(self, meta, children):
        name, type_, value = children
        return A.Const(str(name), type_, value, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def param_decl(self, meta, children):
        name, type_, value = children
        return A.Param(str(name), type_, value, loc=_loc_of(self.file, name))

    def name_list(self, children):
        return tuple(A.Ident(str(t), loc=_loc_of(self.file, t)) for t in children)

    @v_args(meta=True)
    def enum_decl(self, meta, children):
        name, members = children
        return A.EnumDecl(str(name), members, False, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def flags_decl(self, meta, children):
        name, members = children
        return A.EnumDecl(str(name), members, True, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def request_decl(self, meta, children):
        return A.StateBlock("request", tuple(children), loc=self._loc(meta))

    @v_args(meta=True)
    def shared_decl(self, meta, children):
        return A.StateBlock("shared", tuple(children), loc=self._loc(meta))

    @v_args(meta=True)
    def field(self, meta, children):
        name, type_ = children[0], children[1]
        init = children[2] if len(children) > 2 else None
        return A.Field(str(name), type_, init, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def builtin_decl(self, meta, children):
        warp = False
        if children and isinstance(children[0], Token) and children[0].type == "WARP":
            warp = True
            children = children[1:]
        name = children[0]
        params: tuple = ()
        ret = None
        for child in children[1:]:
            if isinstance(child, tuple):
                params = child
            else:
                ret = child
        return A.BuiltinDecl(str(name), params, ret, warp, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def fn_decl(self, meta, children):
        name = children[0]
        params: tuple = ()
        rest = children[1:]
        if rest and isinstance(rest[0], tuple) and not isinstance(rest[0], A.Node):
            params, rest = rest[0], rest[1:]
        ret, body = rest
        return A.FnDecl(str(name), params, ret, body, loc=_loc_of(self.file, name))

    def param_list(self, children):
        return tuple(children)

    @v_args(meta=True)
    def param(self, meta, children):
        name, type_ = children
        return A.FnParam(str(name), type_, loc=_loc_of(self.file, name))

    def stage_kind(self, children):
        return str(children[0])

    @v_args(meta=True)
    def stage_decl(self, meta, children):
        kind, name = children[0], children[1]
        guard = children[2] if len(children) == 4 else None
        body = children[-1]
        return A.StageDecl(kind, str(name), guard, body, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def trace_decl(self, meta, children):
        stage, *fields = children
        idents = tuple(A.Ident(str(t), loc=_loc_of(self.file, t)) for t in fields)
        return A.TraceDecl(str(stage), idents, loc=_loc_of(self.file, stage))

    @v_args(meta=True)
    def done_decl(self, meta, children):
        return A.DoneDecl(children[0], loc=self._loc(meta))

    # ---- types
    @v_args(meta=True)
    def scalar_type(self, meta, children):
        return A.TypeRef(str(children[0]), loc=self._loc(meta))

    @v_args(meta=True)
    def array_type(self, meta, children):
        return A.TypeRef(str(children[0]), children[1], loc=self._loc(meta))

    @v_args(meta=True)
    def open_array_type(self, meta, children):
        return A.TypeRef(str(children[0]), None, True, loc=self._loc(meta))

    # ---- statements
    def block(self, children):
        return tuple(children)

    @v_args(meta=True)
    def let_stmt(self, meta, children):
        name = children[0]
        type_ = children[1] if len(children) == 3 else None
        return A.Let(str(name), type_, children[-1], loc=self._loc(meta))

    def name_lvalue(self, children):
        return (str(children[0]), None)

    def index_lvalue(self, children):
        return (str(children[0]), children[1])

    @v_args(meta=True)
    def assign_stmt(self, meta, children):
        (target, index), op, value = children
        return A.Assign(target, index, str(op), value, loc=self._loc(meta))

    @v_args(meta=True)
    def if_stmt(self, meta, children):
        arms = [(children[0], children[1])]
        otherwise = None
        for child in children[2:]:
            if child[0] == "elif":
                arms.append((child[1], child[2]))
            else:
                otherwise = child[1]
        return A.If(tuple(arms), otherwise, loc=self._loc(meta))

    def elif_arm(self, children):
        return ("elif", children[0], children[1])

    def else_arm(self, children):
        return ("else", children[0])

    @v_args(meta=True)
    def for_stmt(self, meta, children):
        var, start, stop, body = children
        return A.For(str(var), start, stop, body, loc=self._loc(meta))

    @v_args(meta=True)
    def break_stmt(self, meta, children):
        return A.Break(loc=self._loc(meta))

    @v_args(meta=True)
    def continue_stmt(self, meta, children):
        return A.Continue(loc=self._loc(meta))

    @v_args(meta=True)
    def return_stmt(self, meta, children):
        return A.Return(children[0], loc=self._loc(meta))

    @v_args(meta=True)
    def call_stmt(self, meta, children):
        call = self.call(meta, children)
        return A.CallStmt(call, loc=call.loc)

    # ---- expressions
    @v_args(meta=True)
    def conditional(self, meta, children):
        cond, then, otherwise = children
        return A.Conditional(cond, then, otherwise, loc=self._loc(meta))

    @v_args(meta=True)
    def binary(self, meta, children):
        left, op, right = children
        return A.Binary(str(op), left, right, loc=_loc_of(self.file, op))

    @v_args(meta=True)
    def cast(self, meta, children):
        operand, to = children
        return A.Cast(operand, str(to), loc=_loc_of(self.file, to))

    @v_args(meta=True)
    def unary(self, meta, children):
        op, operand = children
        return A.Unary(str(op), operand, loc=self._loc(meta))

    @v_args(meta=True)
    def call(self, meta, children):
        name = children[0]
        args = children[1] if len(children) > 1 else ()
        return A.Call(str(name), tuple(args), loc=_loc_of(self.file, name))

    def arg_list(self, children):
        return tuple(children)

    @v_args(meta=True)
    def index(self, meta, children):
        name, idx = children
        return A.Index(str(name), idx, loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def member(self, meta, children):
        base, member = children
        return A.Member(str(base), str(member), loc=_loc_of(self.file, base))

    def int_lit(self, children):
        tok = children[0]
        return A.IntLit(str(tok), loc=_loc_of(self.file, tok))

    def float_lit(self, children):
        tok = children[0]
        return A.FloatLit(str(tok), loc=_loc_of(self.file, tok))

    def true_lit(self, children):
        return A.BoolLit(True, loc=_loc_of(self.file, children[0]))

    def false_lit(self, children):
        return A.BoolLit(False, loc=_loc_of(self.file, children[0]))

    def name(self, children):
        tok = children[0]
        return A.Name(str(tok), loc=_loc_of(self.file, tok))
