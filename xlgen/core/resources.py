"""Find the grammar, templates, bundled stages and workloads, in a checkout or installed.

In a checkout they are top-level folders (grammar/, templates/, ...); an
installed package carries the same folders as xlgen/data/<kind> (pyproject.toml
maps them there).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # xlgen/
_REPO = _PACKAGE.parent


def data_dir(kind: str) -> Path:
    """`kind` is one of grammar, templates, stages, workloads."""
    in_checkout = _REPO / kind
    if in_checkout.is_dir() and (_REPO / "pyproject.toml").is_file():
        return in_checkout
    return _PACKAGE / "data" / kind


def runtime_dir() -> Path:
    return _PACKAGE / "runtime"
