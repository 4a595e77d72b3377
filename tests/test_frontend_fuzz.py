"""Bad input never crashes the front end.

Mutations of the valid programs (tokens deleted, duplicated, swapped or
inserted; random bytes; truncation; huge literals; very deep nesting) must give
either a checked program or diagnostics (CompileError; exit code 1 from the
CLI), never a Python exception (exit code 2, "internal compiler error").
Whatever still parses must also print and re-parse to the same AST.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlgen.frontend.checker import load_program
from xlgen.cli import main
from xlgen.core.diagnostics import CompileError
from xlgen.frontend.parser import MAX_NESTING, ParseFailure, comment_tokens, parse_text
from xlgen.frontend.printer import format_module

PROGRAMS = Path(__file__).parent / "programs"
SEEDS = {p.name: p.read_text() for p in sorted(PROGRAMS.glob("*.xl"))}
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_TOKEN = re.compile(r"""\s+|\#[^\n]*|"[^"\n]*"|[A-Za-z_][A-Za-z0-9_]*
                    |[0-9][0-9A-Za-z_]*(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?)?
                    |\.\.|->|<<=|>>=|&&|\|\||<<|>>|[-+*/%&|^=!<>]=|.""", re.X | re.S)
VOCABULARY = [
    "pipeline", "import", "const", "param", "enum", "flags", "request", "shared", "builtin", "warp", "fn",
    "stage", "arbiter", "when", "trace", "done", "let", "if", "elif", "else", "for", "in", "break", "continue",
    "return", "as", "has", "true", "false", "req_id", "min", "sqrt", "i32", "u32", "f32", "bool", "x", "count",
    "{", "}", "(", ")", "[", "]", ",", ":", ";", ".", "..", "->", "=", "==", "+=", "<<=", "<<", ">>", "<", "?",
    "+", "-", "*", "/", "%", "&", "|", "^", "~", "!", "&&", "||", "0", "1u", "0x_", "2.5", "1e99", "\n", " ",
    '"lib/common.xl"', '"', "#", "\t", "\u00e9", "\u2028", "\x0c", "\x00",
]


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


class Workdir:
    """A scratch directory holding a copy of tests/programs/lib, so imports can resolve."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="xlgen-fuzz-"))
        shutil.copytree(PROGRAMS / "lib", self.root / "lib")
        self.n = 0

    def write(self, data: bytes | str) -> Path:
        self.n += 1
        path = self.root / f"case{self.n}.xl"
        path.write_bytes(data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data)
        return path


@pytest.fixture(scope="module")
def workdir():
    w = Workdir()
    yield w
    shutil.rmtree(w.root, ignore_errors=True)


def check_never_crashes(workdir: Workdir, data: bytes | str) -> None:
    """load_program gives a program or a CompileError; the printer round-trips whatever parses."""
    path = workdir.write(data)
    try:
        load_program(path)
    except CompileError as exc:
        assert exc.diagnostics, "a CompileError without diagnostics"
        assert any(d.severity == "error" for d in exc.diagnostics)
        exc.render()
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            return
    try:
        module = parse_text(data, "t.xl")
    except ParseFailure:
        return
    printed = format_module(module)
    assert parse_text(printed, "t.xl") == module
    assert format_module(parse_text(printed, "t.xl")) == printed
    assert Counter(c.rstrip() for c in comment_tokens(data)) == Counter(comment_tokens(printed))


# ---- token-level mutations ------------------------------------------------------------------

@st.composite
def mutated(draw):
    seed = draw(st.sampled_from(sorted(SEEDS)))
    toks = tokens(SEEDS[seed])
    for _ in range(draw(st.integers(1, 4))):
        if not toks:
            break
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "replace"]))
        i = draw(st.integers(0, len(toks) - 1))
        if kind == "delete":
            del toks[i]
        elif kind == "duplicate":
            toks.insert(i, toks[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif kind == "insert":
            toks.insert(i, draw(st.sampled_from(VOCABULARY)))
        else:
            toks[i] = draw(st.sampled_from(VOCABULARY))
    return "".join(toks)


@FUZZ
@given(text=mutated())
def test_token_mutations(workdir, text):
    check_never_crashes(workdir, text)


@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_random_bytes_and_truncation(workdir, seed, data):
    raw = SEEDS[seed].encode()
    cut = data.draw(st.integers(0, len(raw)))
    kind = data.draw(st.sampled_from(["truncate", "insert", "overwrite"]))
    if kind == "truncate":
        blob = raw[:cut]
    else:
        junk = data.draw(st.binary(min_size=1, max_size=8))
        blob = raw[:cut] + junk + raw[cut + (len(junk) if kind == "overwrite" else 0):]
    check_never_crashes(workdir, blob)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text(workdir, text):
    check_never_crashes(workdir, text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_literal_mutations(workdir, seed, data):
    """Every integer or float literal of a program replaced by an extreme one."""
    extreme = st.sampled_from([
        "9" * 5000, "1" + "0" * 30, "0x" + "F" * 40, "0x_", "0x_u", "4294967296u", "2147483648", "0u", "1__2",
        "1e999999999", "1.0e-999999999", "9" * 5000 + ".5", "1." + "0" * 5000 + "1", "3.4028235e38",
        "3.4028236e38", "1e-46", "7e-46", "0.0", "1e39", "1E-400",
    ])
    text = re.sub(r"\b[0-9][0-9A-Za-z_]*(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?)?", lambda m: data.draw(extreme), SEEDS[seed])
    check_never_crashes(workdir, text)


# ---- deep nesting ---------------------------------------------------------------------------

NESTED = {
    "parentheses": lambda n: "count = " + "(" * n + "1" + ")" * n,
    "unary minus": lambda n: "count = " + "-" * n + "1",
    "not": lambda n: "ready = " + "!" * n + "true",
    "ifs": lambda n: "if true { " * n + "count = 1" + " }" * n,
    "fors": lambda n: "".join(f"for i{k} in 0..1 {{ " for k in range(n)) + "count = 1" + " }" * n,
    "sum": lambda n: "count = 1" + " + 1" * n,
    "conditional": lambda n: "count = " + "ready ? 1 : " * n + "0",
    "calls": lambda n: "count = " + "min(1, " * n + "1" + ")" * n,
    "index": lambda n: "count = " + "arr[" * n + "0" + "]" * n,
    "casts": lambda n: "count = 1" + " as i32" * n,
}


def nested_program(body: str) -> str:
    return ("pipeline deep\n\nrequest {\n    count: i32\n    ready: bool\n    arr: i32[4]\n}\n\n"
            f"stage s {{\n    {body}\n}}\n\ndone when count == 1 && ready && arr[0] == 0\n")


@pytest.mark.parametrize("shape", sorted(NESTED))
@pytest.mark.parametrize("depth", [10, MAX_NESTING // 2 - 1, MAX_NESTING + 1, 500, 3000])
def test_deep_nesting(workdir, shape, depth):
    check_never_crashes(workdir, nested_program(NESTED[shape](depth)))


def test_too_deep_is_a_diagnostic(monkeypatch, tmp_path):
    path = tmp_path / "deep.xl"
    path.write_text(nested_program(NESTED["ifs"](500)))
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 1
    assert "nesting too deep" in result.stderr


def test_five_hundred_parentheses_are_fine(tmp_path):
    path = tmp_path / "parens.xl"
    path.write_text(nested_program(NESTED["parentheses"](500)))
    load_program(path)  # the parser's stack is not Python's: no limit on parentheses


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(sorted(SEEDS)), depth=st.integers(1, 800), data=st.data())
def test_nesting_inserted_into_programs(workdir, seed, depth, data):
    """Wrap a random expression position of a real program in deep nesting."""
    text = SEEDS[seed]
    spots = [m.end() for m in re.finditer(r"= ", text)]
    if not spots:
        return
    at = data.draw(st.sampled_from(spots))
    kind = data.draw(st.sampled_from(["(", "-", "!", "~"]))
    closing = ")" * depth if kind == "(" else ""
    end = text.find("\n", at)
    check_never_crashes(workdir, text[:at] + kind * depth + text[at:end] + closing + text[end:])


# ---- paths that are not .xl files -----------------------------------------------------------

@pytest.mark.parametrize("make", ["missing", "directory", "empty", "binary", "only comments", "bom"])
def test_unreadable_or_empty_inputs(tmp_path, make):
    path = tmp_path / "in.xl"
    if make == "directory":
        path.mkdir()
    elif make == "empty":
        path.write_text("")
    elif make == "binary":
        path.write_bytes(bytes(range(256)))
    elif make == "only comments":
        path.write_text("# nothing here\n")
    elif make == "bom":
        path.write_bytes(b"\xef\xbb\xbfpipeline p\n")
    usage = make in ("missing", "directory")  # no file to read: a usage error (2), not a compile error (1)
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == (2 if usage else 1), result.stderr
    assert "internal compiler error" not in result.stderr
    assert ("Error: Invalid value for 'FILES...'" if usage else " error: ") in result.stderr
    fmt = CliRunner().invoke(main, ["fmt", "--check", str(path)])
    assert fmt.exit_code in ((2,) if usage else (0, 1)) and "internal compiler error" not in fmt.stderr


# ---- comments anywhere ----------------------------------------------------------------------

@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_comments_anywhere(seed, data):
    """A comment (own-line or trailing, with or without blank lines) between any two tokens
    changes nothing but itself: same AST, fmt idempotent, every comment kept."""
    toks = tokens(SEEDS[seed])
    original = parse_text(SEEDS[seed], "t.xl")
    for n in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(toks)))
        if i < len(toks) and toks[i].startswith('"'):
            continue
        form = data.draw(st.sampled_from(["# c{}\n", " # c{}\n", "\n# c{}\n", "\n\n# c{}\n\n", "#c{}  \n"]))
        toks.insert(i, form.format(n))
    text = "".join(toks)
    module = parse_text(text, "t.xl")
    assert module == original
    once = format_module(module)
    assert parse_text(once, "t.xl") == original
    assert format_module(parse_text(once, "t.xl")) == once
    assert Counter(c.rstrip() for c in comment_tokens(text)) == Counter(comment_tokens(once))
