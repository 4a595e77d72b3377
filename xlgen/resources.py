"""Find the grammar, templates, bundled stages and runtime files, in a checkout or installed."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def data_dir(kind: str) -> Path:
    """`kind` is one of grammar, templates, stages, workloads."""
    in_checkout = _REPO / kind
    if in_checkout.is_dir() and (_REPO / "pyproject.toml").is_file():
        return in_checkout
    return Path(str(resources.files(f"xlgen.data.{kind}")))


def runtime_dir() -> Path:
    return Path(__file__).resolve().parent / "runtime"
