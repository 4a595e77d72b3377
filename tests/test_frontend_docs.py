"""docs/language.md: every ```xl example is a complete program that checks cleanly and is canonically formatted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xlgen.frontend.checker import load_program
from xlgen.frontend.parser import parse_text
from xlgen.frontend.printer import format_module

DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
EXAMPLES = re.findall(r"```xl\n(.*?)```", DOC.read_text(), re.S)


def test_the_reference_has_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_checks(index, tmp_path):
    path = tmp_path / "example.xl"
    path.write_text(EXAMPLES[index])
    _program, warnings = load_program(path)
    assert warnings == []
    assert format_module(parse_text(EXAMPLES[index], "example.xl")) == EXAMPLES[index]


def test_keyword_list_matches_the_grammar():
    from xlgen.frontend.parser import KEYWORDS, _terminal_text

    words = {t for t in _terminal_text().values() if t.isalpha()}
    assert words == KEYWORDS
    listed = re.search(r"\*\*Keywords\*\* cannot be used as names:\n(.*?)\.\n", DOC.read_text(), re.S).group(1)
    assert set(re.findall(r"[a-z]+", listed.replace("`", " "))) == KEYWORDS
