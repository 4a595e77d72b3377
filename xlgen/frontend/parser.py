"""Text -> AST. The grammar lives in grammar/xl.lark; each rule maps to one AST node here."""

from __future__ import annotations

import bisect
import contextvars
import functools
from dataclasses import dataclass

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import ast as A
from . import comments as C
from ..core.diagnostics import Diagnostic, Loc
from ..core.resources import data_dir

# Deepest allowed syntax tree. The transformer, the checker, the printer and the
# emitters all recurse over the tree; this keeps them far from Python's limit.
MAX_NESTING = 100
MAX_LOOPS = 16  # nested `for` loops: Python, which runs the simulator, compiles at most 20 nested blocks
# Most constructs the parser may hold open at once (its stack): parentheses count here (500
# nested pairs are fine) though not towards MAX_NESTING, whose check runs after the parse.
MAX_OPEN = 10_000

# The comment tokens of the parse in progress. The Lark instance is shared, so
# its lexer callback appends to whatever list the current parse_text installed.
_COMMENTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("xl_comments", default=None)


def _on_comment(tok: Token) -> Token:
    sink = _COMMENTS.get()
    if sink is not None:
        sink.append(tok)
    return tok


@functools.cache
def _lark() -> Lark:
    text = (data_dir("grammar") / "xl.lark").read_text()
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=False,
                lexer_callbacks={"COMMENT": _on_comment})


# How a terminal is named in an error message (others: their literal text).
_TERMINAL_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a float", "STRING": "a string",
    "ASSIGN_OP": "'=' or a compound assignment", "CMP_OP": "a comparison", "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'", "SHIFT_OP": "'<<' or '>>'", "UNARY_OP": "'-', '!' or '~'",
    "OR_OP": "'||'", "AND_OP": "'&&'", "BOR_OP": "'|'", "XOR_OP": "'^'", "BAND_OP": "'&'",
    "$END": "end of file",
}
# Terminal sets that messages name as one thing ("an expression", "a statement", ...).
_EXPR_START = {"INT", "FLOAT", "NAME", "LPAR", "UNARY_OP", "TRUE", "FALSE"}
_OPERATORS = {"ADD_OP", "MUL_OP", "SHIFT_OP", "BAND_OP", "XOR_OP", "BOR_OP", "CMP_OP", "HAS", "AND_OP",
              "OR_OP", "QMARK", "AS"}
_STMT_START = {"LET", "IF", "FOR", "LANES", "BREAK", "CONTINUE", "RETURN", "NAME"}
_ITEM_START = {"IMPORT", "CONST", "PARAM", "ENUM", "FLAGS", "REQUEST", "SHARED", "BUILTIN", "FN", "PROC", "STAGE",
               "ARBITER", "COLLECTIVE", "TRACE", "DONE", "TENSOR", "POOL", "OUTPUT", "PROGRESS", "METRIC",
               "COMPANION"}


@functools.cache
def _terminal_text() -> dict[str, str]:
    """Terminal name -> its literal text, for the grammar's fixed-string terminals."""
    return {t.name: t.pattern.value for t in _lark().terminals if t.pattern.type == "str"}


def _describe_expected(expected, previous: Token | None = None) -> str:
    """`expected` (terminal names) in words: groups first ("an expression"), then single tokens."""
    expected = set(expected)
    words = []
    if _EXPR_START <= expected:
        words.append("an expression")
        expected -= _EXPR_START
    if {"ADD_OP", "MUL_OP", "AND_OP"} <= expected:
        words.append("an operator")
        expected -= _OPERATORS
    if _STMT_START <= expected:
        words.append("a statement")
        expected -= _STMT_START
    if _ITEM_START <= expected:
        words.append("a declaration")
        expected -= _ITEM_START
    text = _terminal_text()
    for name in sorted(expected, key=lambda n: (n == "$END", n not in _TERMINAL_WORDS, n)):
        if name == "NAME" and previous is not None and str(previous) in (":", "->", "as"):
            word = "a type"
        elif name in _TERMINAL_WORDS:
            word = _TERMINAL_WORDS[name]
        elif name in text:
            word = f"'{text[name]}'"
        else:
            word = name.lower()
        if word not in words:
            words.append(word)
    if len(words) > 8:
        words = words[:7] + ["..."]
    if len(words) > 1:
        return ", ".join(words[:-1]) + " or " + words[-1]
    return words[0] if words else "nothing"


def _token_text(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    text = str(tok)
    if len(text) > 24:
        text = f"{text[:10]}...{text[-10:]}"
    return f"'{text}'"


def parse_text(text: str, file: str) -> A.Module:
    """Parse one .xl file. Raises ParseFailure (holding a Diagnostic) on bad syntax.

    The module's `comments` table records where each comment and blank line
    goes when the module is printed again (xlgen/frontend/comments.py).
    """
    comments: list[Token] = []
    reset = _COMMENTS.set(comments)
    try:
        tree = _parse_tree(text, file)
    except UnexpectedInput as exc:
        raise ParseFailure(_diagnose(exc, text, file)) from None
    finally:
        _COMMENTS.reset(reset)
    _check_nesting(tree, file)
    builder = _ToAst(file)
    module = builder.transform(tree)
    table = _attach_comments(text, comments, builder.lines, builder.enums)
    return A.Module(module.pipeline, module.items, file=file, loc=Loc(file, 1, 1), comments=table)


def _parse_tree(text: str, file: str) -> Tree:
    """Lark's LALR parse, token by token, stopping as soon as too much is open at once.

    Lark's parser keeps its stack in a list, not in Python's call stack, so depth costs only
    time; but a million '(' cost half a minute before the nesting check below could run.
    """
    parser = _lark().parse_interactive(text)
    last = None
    try:
        for last in parser.iter_parse():
            if len(parser.parser_state.state_stack) > MAX_OPEN:
                raise ParseFailure(Diagnostic("error", Loc(file, last.line, last.column), (
                    f"nesting too deep: more than {MAX_OPEN} parentheses, blocks, operators and other "
                    "constructs are open here at once; split it up with 'let'")))
        return parser.feed_eof(last)
    except UnexpectedInput as exc:
        exc.interactive_parser = parser  # as Lark's parse() leaves it: _diagnose asks what could come next
        raise


def comment_tokens(text: str) -> list[str]:
    """The text of every comment in `text`, in order (lexing only)."""
    return [str(t) for t in _lark().lex(text, dont_ignore=True) if t.type == "COMMENT"]


def _check_nesting(tree: Tree, file: str) -> None:
    """Reject trees deeper than MAX_NESTING, or loops nested deeper than MAX_LOOPS, without recursing."""
    stack = [(tree, 1, 0)]
    while stack:
        node, depth, loops = stack.pop()
        loops += node.data == "for_stmt"
        if loops > MAX_LOOPS:
            raise ParseFailure(Diagnostic("error", Loc(file, node.meta.line, node.meta.column), (
                f"loops nest too deep: at most {MAX_LOOPS} 'for' loops may nest (the simulator is Python, "
                "which allows 20 nested blocks); move the inner loops into a function")))
        if depth > MAX_NESTING:
            meta = node.meta
            loc = Loc(file, getattr(meta, "line", 1), getattr(meta, "column", 1))
            raise ParseFailure(Diagnostic("error", loc, (
                f"nesting too deep: blocks and expressions may nest at most {MAX_NESTING} levels "
                "(each operator of a chain like a + b + c counts as one, and each elif); split it up with 'let'")))
        children, arms = [], 0
        for child in node.children:
            if isinstance(child, Tree):
                # Each elif (or else) of an if counts as one level deeper, as each operator of a
                # chain does: the C++ emitter nests an arm whose condition may fail inside the last.
                arms += child.data in ("elif_arm", "else_arm")
                children.append((child, depth + 1 + arms, loops))
        stack.extend(reversed(children))


@dataclass
class _Line:
    """A line the printer will print: where it starts and ends in the source."""

    start: tuple[int, int]  # (line, column) of its first token
    end: tuple[int, int]  # just after its last token
    key: tuple


@dataclass
class _EnumSpan:
    """An enum or flag set: one printed line, or one per member when it holds comments."""

    node: A.EnumDecl
    start: tuple[int, int]
    end: tuple[int, int]


def _attach_comments(text: str, comments: list[Token], lines: list[_Line], enums: list[_EnumSpan]) -> dict:
    """Give each comment to the printed line it belongs to (see xlgen/frontend/comments.py).

    An own-line comment leads the next printed line; a comment after code trails
    the printed line that code belongs to; a comment inside a construct the
    printer puts on one line (a multi-line expression) leads that line.
    """
    src = text.split("\n")

    def own_line(pos) -> bool:
        line, col = pos
        return src[line - 1][: col - 1].strip() == ""

    def blank_before(pos) -> bool:
        line = pos[0]
        return own_line(pos) and line >= 2 and src[line - 2].strip() == ""

    positions = sorted((t.line, t.column) for t in comments)
    comment_text = {(t.line, t.column): str(t).rstrip() for t in comments}
    lines = list(lines)
    table: dict = {}
    for span in enums:
        node = span.node
        name_end = (node.loc.line, node.loc.col + len(node.name))
        i = bisect.bisect_left(positions, name_end)
        if i < len(positions) and positions[i] < span.end:
            table[C.head(node)] = C.LineComments(multiline=True)
            lines.append(_Line(span.start, name_end, C.head(node)))
            for m in node.members:
                lines.append(_Line((m.loc.line, m.loc.col), (m.loc.line, m.loc.col + len(m.name)), C.head(m)))
            brace = (span.end[0], span.end[1] - 1)
            lines.append(_Line(brace, span.end, C.close(node)))
        else:
            lines.append(_Line(span.start, span.end, C.head(node)))
    lines.sort(key=lambda ln: ln.start)
    starts = [ln.start for ln in lines]

    def info(key) -> C.LineComments:
        if key not in table:
            table[key] = C.LineComments()
        return table[key]

    for ln in lines:
        if blank_before(ln.start):
            info(ln.key).blank_before = True
    for pos in positions:
        entry = (comment_text[pos], blank_before(pos))
        j = bisect.bisect_left(starts, pos) - 1
        if j >= 0 and pos < lines[j].end:  # inside a construct printed on one line
            info(lines[j].key).leading.append(entry)
        elif j >= 0 and not own_line(pos):  # after code: trails that code's line
            target = info(lines[j].key)
            if target.trailing is not None:
                target.leading.append((target.trailing, False))
            target.trailing = entry[0]
        else:
            key = lines[j + 1].key if j + 1 < len(lines) else C.EOF
            info(key).leading.append(entry)
    return table


class ParseFailure(Exception):
    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _diagnose(exc: UnexpectedInput, text: str, file: str) -> Diagnostic:
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else "?"
        if ch == '"':
            msg = "unterminated string (strings end on the same line)"
        elif ch == ";":
            msg = "unexpected ';' (statements need no ';')"
        else:
            msg = f"unexpected character {ch!r}"
        return Diagnostic("error", Loc(file, exc.line, exc.column), msg)
    if isinstance(exc, UnexpectedEOF):  # not raised by the LALR parser; kept for safety
        return Diagnostic("error", _end_loc(text, file),
                          f"unexpected end of file; expected {_describe_expected(exc.expected)}")
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    loc = _end_loc(text, file) if tok.type == "$END" else Loc(file, tok.line, tok.column)
    try:  # what the parser could really take here (exc.expected is LALR's looser lookahead set)
        accepts = exc.interactive_parser.accepts()
        values = exc.interactive_parser.parser_state.value_stack
    except Exception:  # pragma: no cover - older Lark: fall back to the lookahead set
        accepts, values = set(exc.expected), []
    stack = [v for v in values if isinstance(v, Token)]
    previous = values[-1] if values and isinstance(values[-1], Token) else None
    if previous is not None and previous.type == "NAME" and str(previous) in KEYWORDS:
        # The lexer read a keyword as a name, because the keyword could not come there.
        where = Loc(file, previous.line, previous.column)
        word = str(previous)
        if word in ("else", "elif"):
            msg = f"'{word}' must follow the closing '}}' of an 'if' or 'elif' block"
        elif len(stack) >= 2 and stack[-2].type == "PIPELINE":
            msg = f"expected the pipeline's name after 'pipeline', not the keyword '{word}'"
        elif word in _ITEM_KEYWORDS and _missing_brace(stack):
            msg = f"unexpected '{word}'{_missing_brace(stack)}"
        else:
            msg = f"unexpected '{word}' ('{word}' is a keyword; it cannot be used as a name)"
        return Diagnostic("error", where, msg)
    following = text[tok.end_pos:].lstrip()[:1] if tok.end_pos is not None else ""
    hint = _hint(tok, accepts, stack, following)
    msg = f"unexpected {_token_text(tok)}; expected {_describe_expected(accepts, previous)}{hint}"
    return Diagnostic("error", loc, msg)


def _end_loc(text: str, file: str) -> Loc:
    lines = text.split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return Loc(file, len(lines), len(lines[-1]) + 1)


# Keywords of grammar/xl.lark (tests/test_frontend_docs.py checks the list against it). The checker
# rejects them as names too: the contextual lexer reads some of them as names in some places.
KEYWORDS = {
    "pipeline", "import", "const", "param", "enum", "flags", "request", "shared", "builtin", "warp", "fn",
    "proc", "stage", "arbiter", "collective", "when", "trace", "done", "let", "if", "elif", "else", "for", "in",
    "break", "continue", "return", "as", "has", "true", "false", "lanes", "tensor", "pool", "owned", "by",
    "output", "progress", "metric", "companion",  # declarations for the tools
}
_ITEM_KEYWORDS = {"import", "const", "param", "enum", "flags", "request", "shared", "builtin", "fn", "proc",
                  "stage", "arbiter", "collective", "trace", "done", "pipeline", "tensor", "pool", "output", "progress",
                  "metric", "companion"}


def _missing_brace(stack: list[Token]) -> str:
    braces = [t for t in stack if t.type == "LBRACE"]
    if not braces:
        return ""
    return f" (a '}}' is missing: the '{{' at {braces[-1].line}:{braces[-1].column} is not closed)"


def _hint(tok: Token, accepts: set, stack: list[Token], following: str) -> str:
    """A likely cause of a syntax error, in parentheses (or nothing). `following`: the next character."""
    text = str(tok)
    previous = stack[-1] if stack else None
    if text == "=" and "CMP_OP" in accepts:
        return " (did you mean '=='?)"
    if text == "=" and previous is not None and previous.type == "ASSIGN_OP":
        return " (a comparison cannot stand alone as a statement; to assign, write one '=')"
    if tok.type in ("CMP_OP", "HAS") and "CMP_OP" not in accepts and "AND_OP" in accepts:
        return " (comparisons do not chain: write 'a < b && b < c')"
    if text == "pipeline":
        return " ('pipeline NAME' must be the first declaration of the file)"
    if tok.type == "$END" and "RBRACE" in accepts:
        return _missing_brace(stack)
    starts_declaration = following.isalpha() or following in ('_', '{', '"')  # `stage s`, `request {`, ...
    if text in _ITEM_KEYWORDS and "RBRACE" in accepts and starts_declaration:
        return _missing_brace(stack)
    if text in KEYWORDS and "NAME" in accepts:
        return f" ('{text}' is a keyword; it cannot be used as a name)"
    if tok.type in ("RPAR", "RSQB", "RBRACE") and tok.type not in accepts:
        opener = {"RPAR": "LPAR", "RSQB": "LSQB", "RBRACE": "LBRACE"}[tok.type]
        if not any(t.type == opener for t in stack):
            return f" (no open '{ {'RPAR': '(', 'RSQB': '[', 'RBRACE': '{'}[tok.type]}' to close)"
    if tok.type == "STRING":
        return " (strings are only used by 'import' and 'companion')"
    return ""


@dataclass
class _Block:
    """A `{ ... }` body, with where its braces are (for placing comments)."""

    stmts: tuple
    after_open: tuple[int, int]
    close: tuple[int, int]
    after_close: tuple[int, int]


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
        self.lines: list[_Line] = []  # every printed line, for placing comments
        self.enums: list[_EnumSpan] = []

    def _loc(self, meta) -> Loc:
        return _loc_of(self.file, meta)

    def _line(self, meta, key) -> None:
        """Record a construct the printer prints on one line."""
        self.lines.append(_Line((meta.line, meta.column), (meta.end_line, meta.end_column), key))

    def _block_lines(self, node, meta, body: "_Block") -> None:
        """Record `header {` ... `}` of a function, stage or loop."""
        self.lines.append(_Line((meta.line, meta.column), body.after_open, C.head(node)))
        self.lines.append(_Line(body.close, body.after_close, C.close(node)))

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

    @v_args(meta=True)
    def pipeline_header(self, meta, children):
        self._line(meta, C.PIPELINE)
        return ("pipeline", str(children[0]))

    @v_args(meta=True)
    def import_decl(self, meta, children):
        node = A.Import(str(children[0])[1:-1], loc=self._loc(meta))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def const_decl(self, meta, children):
        name, type_, value = children
        node = A.Const(str(name), type_, value, loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def param_decl(self, meta, children):
        name, type_, value = children
        node = A.Param(str(name), type_, value, loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    def name_list(self, children):
        return tuple(A.Ident(str(t), loc=_loc_of(self.file, t)) for t in children)

    @v_args(meta=True)
    def enum_decl(self, meta, children):
        return self._enum(meta, children, False)

    @v_args(meta=True)
    def flags_decl(self, meta, children):
        return self._enum(meta, children, True)

    def _enum(self, meta, children, is_flags: bool):
        name, members = children
        node = A.EnumDecl(str(name), members, is_flags, loc=_loc_of(self.file, name))
        self.enums.append(_EnumSpan(node, (meta.line, meta.column), (meta.end_line, meta.end_column)))
        return node

    @v_args(meta=True)
    def request_decl(self, meta, children):
        return self._state_block("request", meta, children)

    @v_args(meta=True)
    def shared_decl(self, meta, children):
        return self._state_block("shared", meta, children)

    def _state_block(self, kind: str, meta, children):
        node = A.StateBlock(kind, tuple(children), loc=self._loc(meta))
        keyword_end = (meta.line, meta.column + len(kind))
        self.lines.append(_Line((meta.line, meta.column), keyword_end, C.head(node)))
        brace = (meta.end_line, meta.end_column - 1)
        self.lines.append(_Line(brace, (meta.end_line, meta.end_column), C.close(node)))
        return node

    @v_args(meta=True)
    def field(self, meta, children):
        name, type_ = children[0], children[1]
        init = children[2] if len(children) > 2 else None
        node = A.Field(str(name), type_, init, loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

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
        node = A.BuiltinDecl(str(name), params, ret, warp, loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def tensor_decl(self, meta, children):
        name, elem, *dims = children
        node = A.TensorDecl(str(name), str(elem), tuple(dims), loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def pool_decl(self, meta, children):
        name, elem, *dims, owner = children
        node = A.PoolDecl(str(name), str(elem), tuple(dims), self._ident(owner), loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def fn_decl(self, meta, children):
        name = children[0]
        params: tuple = ()
        rest = children[1:]
        if rest and isinstance(rest[0], tuple) and not isinstance(rest[0], A.Node):
            params, rest = rest[0], rest[1:]
        ret, body = rest
        node = A.FnDecl(str(name), params, ret, body.stmts, loc=_loc_of(self.file, name))
        self._block_lines(node, meta, body)
        return node

    @v_args(meta=True)
    def proc_decl(self, meta, children):
        name = children[0]
        params = children[1] if len(children) == 3 else ()
        body = children[-1]
        node = A.ProcDecl(str(name), params, body.stmts, loc=_loc_of(self.file, name))
        self._block_lines(node, meta, body)
        return node

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
        node = A.StageDecl(kind, str(name), guard, body.stmts, loc=_loc_of(self.file, name))
        self._block_lines(node, meta, body)
        return node

    @v_args(meta=True)
    def trace_decl(self, meta, children):
        stage, *fields = children
        idents = tuple(A.Ident(str(t), loc=_loc_of(self.file, t)) for t in fields)
        node = A.TraceDecl(str(stage), idents, loc=_loc_of(self.file, stage))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def done_decl(self, meta, children):
        node = A.DoneDecl(children[0], loc=self._loc(meta))
        self._line(meta, C.head(node))
        return node

    # ---- declarations for the tools
    def _ident(self, tok) -> A.Ident:
        return A.Ident(str(tok), loc=_loc_of(self.file, tok))

    @v_args(meta=True)
    def output_decl(self, meta, children):
        field, count = children
        node = A.OutputDecl(self._ident(field), self._ident(count), loc=self._loc(meta))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def progress_decl(self, meta, children):
        node = A.ProgressDecl(self._ident(children[0]), loc=self._loc(meta))
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def metric_decl(self, meta, children):
        name, *rest = children
        group = rest.pop(0) if rest and isinstance(rest[0], A.Ident) else None
        op = str(rest[1]) if len(rest) == 3 else None
        terms = (rest[0], rest[2]) if len(rest) == 3 else (rest[0],)
        node = A.MetricDecl(str(name), group, terms, op, loc=_loc_of(self.file, name))
        self._line(meta, C.head(node))
        return node

    def metric_group(self, children):
        return self._ident(children[0])

    @v_args(meta=True)
    def metric_of_state(self, meta, children):
        agg, field = children
        return A.MetricTerm(self._ident(agg), self._ident(field), None, loc=self._loc(meta))

    @v_args(meta=True)
    def metric_of_trace(self, meta, children):
        agg, stage, field = children
        return A.MetricTerm(self._ident(agg), self._ident(field), self._ident(stage), loc=self._loc(meta))

    @v_args(meta=True)
    def companion_decl(self, meta, children):
        node = A.CompanionDecl(str(children[0])[1:-1], loc=self._loc(meta))
        self._line(meta, C.head(node))
        return node

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
    @v_args(meta=True)
    def block(self, meta, children):
        return _Block(tuple(children), (meta.line, meta.column + 1),
                      (meta.end_line, meta.end_column - 1), (meta.end_line, meta.end_column))

    def _stmt(self, meta, node):
        self._line(meta, C.head(node))
        return node

    @v_args(meta=True)
    def let_stmt(self, meta, children):
        name = children[0]
        type_ = children[1] if len(children) == 3 else None
        return self._stmt(meta, A.Let(str(name), type_, children[-1], loc=self._loc(meta)))

    def name_lvalue(self, children):
        return (str(children[0]), None)

    def index_lvalue(self, children):
        return (str(children[0]), children[1])

    def multi_index_lvalue(self, children):
        return (str(children[0]), tuple(children[1:]))

    @v_args(meta=True)
    def assign_stmt(self, meta, children):
        (target, index), op, value = children
        if isinstance(index, tuple):
            return self._stmt(meta, A.MultiAssign(target, index, str(op), value, loc=self._loc(meta)))
        return self._stmt(meta, A.Assign(target, index, str(op), value, loc=self._loc(meta)))

    @v_args(meta=True)
    def if_stmt(self, meta, children):
        blocks = [children[1]]
        arms = [(children[0], children[1].stmts)]
        otherwise = None
        for child in children[2:]:
            if child[0] == "elif":
                arms.append((child[1], child[2].stmts))
                blocks.append(child[2])
            else:
                otherwise = child[1].stmts
                blocks.append(child[1])
        node = A.If(tuple(arms), otherwise, loc=self._loc(meta))
        self.lines.append(_Line((meta.line, meta.column), blocks[0].after_open, C.head(node)))
        for i in range(1, len(blocks)):  # `} elif c {` and `} else {`
            self.lines.append(_Line(blocks[i - 1].close, blocks[i].after_open, C.arm(node, i)))
        self.lines.append(_Line(blocks[-1].close, blocks[-1].after_close, C.close(node)))
        return node

    def elif_arm(self, children):
        return ("elif", children[0], children[1])

    def else_arm(self, children):
        return ("else", children[0])

    @v_args(meta=True)
    def for_stmt(self, meta, children):
        var, start, stop, body = children
        node = A.For(str(var), start, stop, body.stmts, loc=self._loc(meta))
        self._block_lines(node, meta, body)
        return node

    @v_args(meta=True)
    def lanes_stmt(self, meta, children):
        var, start, stop, body = children
        node = A.Lanes(str(var), start, stop, body.stmts, loc=self._loc(meta))
        self._block_lines(node, meta, body)
        return node

    @v_args(meta=True)
    def break_stmt(self, meta, children):
        return self._stmt(meta, A.Break(loc=self._loc(meta)))

    @v_args(meta=True)
    def continue_stmt(self, meta, children):
        return self._stmt(meta, A.Continue(loc=self._loc(meta)))

    @v_args(meta=True)
    def return_stmt(self, meta, children):
        return self._stmt(meta, A.Return(children[0], loc=self._loc(meta)))

    @v_args(meta=True)
    def call_stmt(self, meta, children):
        call = self.call(meta, children)
        return self._stmt(meta, A.CallStmt(call, loc=call.loc))

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
    def multi_index(self, meta, children):
        name, *indices = children
        return A.MultiIndex(str(name), tuple(indices), loc=_loc_of(self.file, name))

    @v_args(meta=True)
    def reduction(self, meta, children):
        op, var, start, stop, value = children
        return A.Reduction(str(op), str(var), start, stop, value, loc=_loc_of(self.file, op))

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
