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
    """`kind` is one of grammar, templates, stages, workloads, models."""
    in_checkout = _REPO / kind
    if in_checkout.is_dir() and (_REPO / "pyproject.toml").is_file():
        return in_checkout
    return _PACKAGE / "data" / kind


def runtime_dir() -> Path:
    return _PACKAGE / "runtime"


def bundled_pipelines() -> dict[str, Path]:
    """The bundled pipelines by name (the stem of each stages/*.xl file that declares `pipeline`),
    so a command can take `xl_spec` wherever the package is installed."""
    import re

    found = {}
    for path in sorted(data_dir("stages").glob("*.xl")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if re.search(r"^pipeline\s", text, re.MULTILINE):
            found[path.stem] = path
    return found


def cache_root(environ=None) -> Path:
    """Where generated code and compiled libraries are cached: $XLGEN_CACHE when set, else
    $XDG_CACHE_HOME/xlgen (the XDG base-directory rule), else ~/.cache/xlgen."""
    import os

    environ = os.environ if environ is None else environ
    explicit = environ.get("XLGEN_CACHE")
    if explicit:
        return Path(explicit)
    xdg = environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG rule: a relative value is invalid and ignored
        return Path(xdg) / "xlgen"
    return Path.home() / ".cache" / "xlgen"
