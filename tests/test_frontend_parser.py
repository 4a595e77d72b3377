"""The parser on its own: locations, comment collection, the nesting limit, lexing corner cases."""

from __future__ import annotations

import threading

import pytest

from xlgen.frontend import ast as A
from xlgen.frontend.parser import MAX_NESTING, ParseFailure, comment_tokens, parse_text


def parse(text: str) -> A.Module:
    return parse_text(text, "t.xl")


def error_of(text: str) -> str:
    with pytest.raises(ParseFailure) as info:
        parse(text)
    d = info.value.diagnostic
    return f"{d.loc.line}:{d.loc.col}: {d.message}"


def test_locations():
    m = parse("pipeline p\n\nconst LIMIT: i32 = 1 + 2\nstage s when x {\n    let y = f(3)\n}\n")
    const, stage = m.items
    assert (const.loc.line, const.loc.col) == (3, 7)  # the name
    assert (const.value.loc.line, const.value.loc.col) == (3, 22)  # a binary operator: the operator
    assert (stage.loc.line, stage.loc.col) == (4, 7)
    let = stage.body[0]
    assert (let.loc.line, let.loc.col) == (5, 5)
    assert (let.value.loc.line, let.value.loc.col) == (5, 13)


def test_shift_operators_are_one_token():
    m = parse("const A: i32 = 1 << 2 >> 1 < 3\n")
    cmp = m.items[0].value
    assert isinstance(cmp, A.Binary) and cmp.op == "<"
    assert cmp.left.op == ">>" and cmp.left.left.op == "<<"


def test_range_is_not_a_float():
    m = parse("stage s {\n    for i in 0..10 {\n    }\n}\n")
    loop = m.items[0].body[0]
    assert loop.start == A.IntLit("0") and loop.stop == A.IntLit("10")


@pytest.mark.parametrize("text", ["1.5", "2e3", "2E-3", "0.5e+2"])
def test_float_literals(text):
    assert parse(f"const F: f32 = {text}\n").items[0].value == A.FloatLit(text)


@pytest.mark.parametrize("text", ["0xFF", "0xFFu", "1_000", "7u", "0"])
def test_int_literals(text):
    assert parse(f"const I: u32 = {text}\n").items[0].value == A.IntLit(text)


def test_comments_are_collected_per_parse():
    a = parse("# a\nconst A: i32 = 1\n")
    with pytest.raises(ParseFailure):
        parse("# lost\nconst = \n")
    b = parse("const B: i32 = 2  # b\n")
    assert sorted(c for info in a.comments.values() for c, _ in info.leading) == ["# a"]
    assert [info.trailing for info in b.comments.values() if info.trailing] == ["# b"]


def test_comment_collection_is_thread_safe():
    results = {}

    def work(i):
        text = "".join(f"const C{i}_{k}: i32 = {k}  # t{i}\n" for k in range(50))
        for _ in range(5):
            m = parse(text)
            results[i] = {info.trailing for info in m.comments.values() if info.trailing}

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[i] == {f"# t{i}"} for i in range(4))


def test_comment_tokens():
    assert comment_tokens('import "a#b.xl"  # c\n# d\n') == ["# c", "# d"]


def test_nesting_limit():
    ok = "const A: i32 = " + "-" * (MAX_NESTING - 5) + "1\n"
    parse(ok)
    too_deep = "const A: i32 = " + "-" * (MAX_NESTING + 5) + "1\n"
    assert "nesting too deep" in error_of(too_deep)


@pytest.mark.parametrize("text, expected", [
    ("stage s {\n    a = 1;\n}\n", "2:10: unexpected ';' (statements need no ';')"),
    ("stage s when a = 1 {\n}\n",
     "1:16: unexpected '='; expected an operator, '.', '{', '(' or '[' (did you mean '=='?)"),
    ("stage s {\n    a = 1\n", "2:10: unexpected end of file; expected a statement or '}' "
                                "(a '}' is missing: the '{' at 1:9 is not closed)"),
    ("const A: bool = 1 < 2 < 3\n", "1:23: unexpected '<'; expected a declaration, '&&', '|', '||', '?' or end of file "
                                    "(comparisons do not chain: write 'a < b && b < c')"),
    ("stage s {\n    else {\n    }\n}\n", "2:5: 'else' must follow the closing '}' of an 'if' or 'elif' block"),
    ("request {\n    a: i32\n    stage: i32\n}\n", "3:5: unexpected 'stage'; expected a name, '=' or '}' "
                                                  "('stage' is a keyword; it cannot be used as a name)"),
    ("const A: i32 = 1\npipeline p\n", "2:1: unexpected 'pipeline'; expected a declaration or end of file "
                                       "('pipeline NAME' must be the first declaration of the file)"),
    ('const A: i32 = "x\n', "1:16: unterminated string (strings end on the same line)"),
    ("const A: i32 = 1 $ 2\n", "1:18: unexpected character '$'"),
])
def test_syntax_messages(text, expected):
    assert error_of(text) == expected
