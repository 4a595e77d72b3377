"""Where `#` comments and blank lines go when `xlgen fmt` reprints a file.

The parser (xlgen/frontend/parser.py) sees every comment token; the printer
(xlgen/frontend/printer.py) decides the output lines. They meet in a side table,
`Module.comments`, keyed by the printed line a comment belongs to:

- `head(node)`: the first line printed for a declaration, field, enum member
  or statement (for a block construct, its header ending in `{`);
- `arm(if_node, i)`: the `} elif ... {` (or, for i == number of arms,
  `} else {`) line of an `if`;
- `close(node)`: the closing `}` of a block construct;
- `PIPELINE`, `EOF`: the `pipeline NAME` line, and the end of the file.

Each line holds its leading comments (own-line comments above it, in order),
an optional trailing comment (after the code on the same line) and whether a
blank line preceded it in the source. The table is not part of the AST's
equality: two parses that differ only in comments compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PIPELINE = ("pipeline",)
EOF = ("eof",)


@dataclass
class LineComments:
    leading: list[tuple[str, bool]] = field(default_factory=list)  # (comment, blank line above it)
    trailing: str | None = None
    blank_before: bool = False  # a blank line above the code line itself
    multiline: bool = False  # enums only: print one member per line (it holds comments)


def head(node) -> tuple:
    return (type(node).__name__, node.loc.line, node.loc.col)


def arm(node, i: int) -> tuple:
    return ("arm", node.loc.line, node.loc.col, i)


def close(node) -> tuple:
    return ("close", type(node).__name__, node.loc.line, node.loc.col)


def all_comments(table: dict) -> list[str]:
    """Every comment in a table (for tests: nothing may be lost)."""
    out = []
    for info in table.values():
        out.extend(text for text, _ in info.leading)
        if info.trailing is not None:
            out.append(info.trailing)
    return out
