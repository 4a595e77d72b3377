"""The printer (`xlgen fmt`) against the parser: round trips, idempotence, comments.

For every valid program (tests/programs, stages/) and every malformed one that
still parses (tests/diagnostics):
- parse(print(parse(x))) == parse(x)   (the AST ignores locations and comments);
- fmt(fmt(x)) == fmt(x);
- every comment of x is in fmt(x).
The valid programs must also check cleanly: no error and no warning.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from xlgen.frontend import ast as A
from xlgen.frontend.checker import load_program
from xlgen.frontend.comments import all_comments
from xlgen.frontend.parser import ParseFailure, comment_tokens, parse_text
from xlgen.frontend.printer import format_module

TESTS = Path(__file__).parent
REPO = TESTS.parent
PROGRAMS = sorted((TESTS / "programs").glob("*.xl"))
LIBRARIES = sorted((TESTS / "programs" / "lib").glob("*.xl"))
STAGES = sorted((REPO / "stages").glob("*.xl"))


def _parseable_diagnostics():
    out = []
    for path in sorted((TESTS / "diagnostics").rglob("*.xl")):
        try:
            parse_text(path.read_text(), path.name)
        except (ParseFailure, UnicodeDecodeError):
            continue
        out.append(path)
    return out


ALL_SOURCES = PROGRAMS + LIBRARIES + STAGES + _parseable_diagnostics()


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


def fmt(text: str, name: str = "t.xl") -> str:
    return format_module(parse_text(text, name))


def test_there_are_enough_valid_programs():
    assert len(PROGRAMS) >= 8


@pytest.mark.parametrize("path", PROGRAMS, ids=_id)
def test_valid_program_checks_cleanly(path, monkeypatch):
    monkeypatch.chdir(REPO)
    program, warnings = load_program(path.relative_to(REPO))
    assert warnings == []
    assert program.stages and program.done is not None


@pytest.mark.parametrize("path", ALL_SOURCES, ids=_id)
def test_round_trip(path):
    text = path.read_text()
    first = parse_text(text, path.name)
    printed = format_module(first)
    second = parse_text(printed, path.name)
    assert second == first


@pytest.mark.parametrize("path", ALL_SOURCES, ids=_id)
def test_fmt_is_idempotent_and_keeps_comments(path):
    text = path.read_text()
    once = fmt(text)
    assert fmt(once) == once
    assert Counter(c.rstrip() for c in comment_tokens(text)) == Counter(comment_tokens(once))
    assert sorted(all_comments(parse_text(text, "t.xl").comments)) == sorted(comment_tokens(once))


@pytest.mark.parametrize("path", PROGRAMS + LIBRARIES, ids=_id)
def test_test_programs_are_canonically_formatted(path):
    """tests/programs is written in the canonical format, so fmt changes nothing."""
    assert fmt(path.read_text()) == path.read_text()


def test_equality_ignores_locations_and_comments():
    a = parse_text("pipeline p\nconst A: i32 = 1 + 2  # three\n", "a.xl")
    b = parse_text("# header\npipeline p\n\n\nconst A: i32 =\n    1 +\n    2\n", "b.xl")
    assert a == b
    assert a.comments != b.comments
    assert a != parse_text("pipeline p\nconst A: i32 = 1 + 3\n", "c.xl")


# ---- precedence: the printer adds exactly the parentheses the grammar needs ---------------

@pytest.mark.parametrize("source, printed", [
    ("a + b * c", "a + b * c"),
    ("(a + b) * c", "(a + b) * c"),
    ("a - (b - c)", "a - (b - c)"),
    ("(a - b) - c", "a - b - c"),
    ("a & M == 0", "a & M == 0"),
    ("(a == b) == c", "(a == b) == c"),
    ("a == (b == c)", "a == (b == c)"),
    ("-x as f32", "-x as f32"),
    ("-(x as f32)", "-(x as f32)"),
    ("(a * b) as f32", "(a * b) as f32"),
    ("a * b as f32", "a * b as f32"),
    ("c ? a : d ? e : f", "c ? a : d ? e : f"),
    ("(c ? a : d) ? e : f", "(c ? a : d) ? e : f"),
    ("(a || b) && c", "(a || b) && c"),
    ("a || b && c", "a || b && c"),
    ("1 << 2 + 3", "1 << 2 + 3"),
    ("(1 << 2) + 3", "(1 << 2) + 3"),
    ("x has A | B", "x has A | B"),
    ("!(a && b)", "!(a && b)"),
    ("-(-1)", "--1"),
    ("~(a ^ b) & c", "~(a ^ b) & c"),
    ("f(a, (b), g(c))[0] + E.M", None),  # index of a call is not in the language
])
def test_precedence_printing(source, printed):
    text = f"const X: i32 = {source}\n"
    if printed is None:
        with pytest.raises(ParseFailure):
            parse_text(text, "t.xl")
        return
    module = parse_text(text, "t.xl")
    out = format_module(module)
    assert out == f"const X: i32 = {printed}\n"
    assert parse_text(out, "t.xl") == module


# ---- comments and blank lines ------------------------------------------------------------

COMMENTED = """\
# File header.

pipeline demo  # trailing on the header

# Limits.
const N: i32 = 4  # four
const M: i32 = 2

const K: i32 = 3
flags F {
    X,  # the x flag
    # before Y
    Y
}

request {
    # the state
    count: i32  # a counter

    arr: i32[N]
    f: F
    # at the end of request
}

stage go when count < 10 {  # header
    count += 1
    # loop
    for i in 0..N {
        arr[i] = count  # store
        # end of loop body
    }

    if count >= 5 {  # big
        f = F.X
        # end of then
    } elif count > 2 {  # medium
        f = F.Y
    } else {
        # only a comment
    }  # after if
    let x = 1 +
        # inside an expression
        2  # after the expression
    count += x - 3
}  # after the stage

done when count >= 10 && f has X
# the end

# really the end
"""

COMMENTED_FORMATTED = """\
# File header.

pipeline demo  # trailing on the header

# Limits.
const N: i32 = 4  # four
const M: i32 = 2

const K: i32 = 3

flags F {
    X,  # the x flag
    # before Y
    Y,
}

request {
    # the state
    count: i32  # a counter

    arr: i32[N]
    f: F
    # at the end of request
}

stage go when count < 10 {  # header
    count += 1
    # loop
    for i in 0..N {
        arr[i] = count  # store
        # end of loop body
    }

    if count >= 5 {  # big
        f = F.X
        # end of then
    } elif count > 2 {  # medium
        f = F.Y
    } else {
        # only a comment
    }  # after if
    # inside an expression
    let x = 1 + 2  # after the expression
    count += x - 3
}  # after the stage

done when count >= 10 && f has X
# the end

# really the end
"""


def test_comments_are_placed():
    assert fmt(COMMENTED) == COMMENTED_FORMATTED
    assert fmt(COMMENTED_FORMATTED) == COMMENTED_FORMATTED


def test_comments_do_not_change_the_ast():
    assert parse_text(COMMENTED, "a.xl") == parse_text(COMMENTED_FORMATTED, "b.xl")


@pytest.mark.parametrize("source, expected", [
    # only comments
    ("# just a note\n", "# just a note\n"),
    ("", ""),
    ("\n\n# a\n\n\n# b\n\n", "# a\n\n# b\n"),
    # a comment on the line of a one-line enum stays after it
    ("enum E { A, B }  # two\n", "enum E { A, B }  # two\n"),
    # a comment inside an enum makes it multi-line
    ("enum E { A, # first\n B }\n", "enum E {\n    A,  # first\n    B,\n}\n"),
    # trailing comments after '}' of an else and of a for
    ("stage s {\n    for i in 0..2 {\n    }  # for\n}\n", "stage s {\n    for i in 0..2 {\n    }  # for\n}\n"),
    # comments in an empty block stay inside it
    ("stage s {\n    # nothing yet\n}\n", "stage s {\n    # nothing yet\n}\n"),
    # blank lines: kept (at most one) between statements, dropped at the start and end of a block
    ("stage s {\n\n    a = 1\n\n\n    b = 2\n\n}\n", "stage s {\n    a = 1\n\n    b = 2\n}\n"),
    # a '#' inside an import string is not a comment
    ('import "odd#name.xl"  # real\n', 'import "odd#name.xl"  # real\n'),
    # CRLF line ends
    ("const A: i32 = 1  # one\r\nconst B: i32 = 2\r\n", "const A: i32 = 1  # one\nconst B: i32 = 2\n"),
    # a comment between a statement and an if on one line
    ("stage s { a = 1 # one\n if a == 1 { b = 2 } # if\n}\n",
     "stage s {\n    a = 1  # one\n    if a == 1 {\n        b = 2\n    }  # if\n}\n"),
    # comments inside a multi-line header go above it
    ("fn f(a: i32,  # the a\n     b: i32) -> i32 {\n    return a\n}\n",
     "# the a\nfn f(a: i32, b: i32) -> i32 {\n    return a\n}\n"),
])
def test_comment_cases(source, expected):
    out = fmt(source)
    assert out == expected
    assert fmt(out) == out
    assert Counter(c.rstrip() for c in comment_tokens(source)) == Counter(comment_tokens(out))


def test_module_comments_table_is_not_compared():
    m = parse_text("pipeline p  # x\n", "t.xl")
    assert isinstance(m, A.Module) and m.comments
    assert m == parse_text("pipeline p\n", "t.xl")
