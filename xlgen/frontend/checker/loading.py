"""Reading a pipeline's files (the main file, its imports, the prelude) and checking them:
`load_program(path)` and `check_modules(modules, sources)`, the checker's entry points."""

from __future__ import annotations
import os
from pathlib import Path
from .. import ast as A
from ...core import ir
from ...core.diagnostics import CompileError, DiagnosticSink, Loc
from ...core.files import FileProblem, read_source_bytes
from ..parser import ParseFailure, parse_text
from ...core.resources import runtime_dir
from .program import Checker
from .rules import PRELUDE_NAME


def read_source(path: Path, sink: DiagnosticSink, sources: dict, at: Loc | None) -> str | None:
    name = str(path)
    where = at or Loc(name, 0, 0)
    try:
        data = read_source_bytes(path)
    except FileProblem as problem:
        sink.error(where, problem.message)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        sources[name] = before + "\n"
        sink.error(Loc(name, line, col), f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x})")
        return None
    sources[name] = text
    return text


def load_modules(path: str | Path) -> tuple[list[A.Module], dict[str, str], DiagnosticSink]:
    """Parse the prelude, the main file and everything it imports (imports first)."""
    sink = DiagnosticSink()
    sources: dict[str, str] = {}
    modules: list[A.Module] = []
    prelude_text = (runtime_dir() / "prelude.xl").read_text()
    sources[PRELUDE_NAME] = prelude_text
    modules.append(parse_text(prelude_text, PRELUDE_NAME))

    done: set[Path] = set()
    # Depth first without Python recursion (an import chain may be thousands of files long):
    # one frame per file being loaded, holding the imports it has left to visit.
    frames: list[tuple[Path, Path, A.Module, object]] = []
    active: set[Path] = set()

    def enter(p: Path, at: Loc | None) -> None:
        p = _resolved(p)
        if p in active:
            path = [f[0] for f in frames]
            cycle = " -> ".join(str(_display(q)) for q in path[path.index(p):] + [p])
            sink.error(at, f"import cycle: {cycle}")
            return
        if p in done:
            return
        shown = _display(p)
        text = read_source(Path(shown) if not Path(shown).is_absolute() else p, sink, sources, at)
        if text is None:
            return
        try:
            module = parse_text(text, str(shown))
        except ParseFailure as failure:
            sink.items.append(failure.diagnostic)
            done.add(p)
            return
        frames.append((p, shown, module, iter([i for i in module.items if isinstance(i, A.Import)])))
        active.add(p)

    enter(Path(path), None)
    while frames:
        p, shown, module, imports = frames[-1]
        item = next(imports, None)
        if item is not None:
            enter(p.parent / item.path, item.loc)
            continue
        frames.pop()
        active.discard(p)
        if frames and module.pipeline is not None:
            sink.error(module.loc, f"imported file '{shown}' must not declare 'pipeline'")
        done.add(p)
        modules.append(module)
    return modules, sources, sink


def _resolved(p: Path) -> Path:
    """`p` with links resolved where they resolve; as given when it cannot be (missing, a link loop)."""
    try:
        return Path(os.path.realpath(p)) if p.exists() else p
    except (OSError, ValueError):  # ValueError: a NUL character in an import path
        return p


def _display(p: Path) -> Path:
    """Paths in diagnostics: relative to the working directory when below it."""
    try:
        return Path(os.path.realpath(p)).relative_to(os.path.realpath(Path.cwd()))
    except (ValueError, OSError):
        return p


def load_program(path: str | Path, allow_library: bool = False) -> tuple[ir.Program, list]:
    """Read, parse and check a pipeline. Returns (program, warnings); raises CompileError.

    With allow_library, a file without `pipeline NAME` (and without `done when`)
    is checked as a library: a file other pipelines import (`xlgen check` on stages/*.xl).
    """
    modules, sources, sink = load_modules(path)
    if sink.has_errors:
        raise CompileError(sink.items, sources)
    return check_modules(modules, sources, sink, allow_library)


def check_modules(modules: list[A.Module], sources: dict[str, str], sink: DiagnosticSink | None = None,
                  allow_library: bool = False):
    sink = sink or DiagnosticSink()
    program = Checker(sink, sources, allow_library).check(modules)
    if sink.has_errors:
        raise CompileError(sink.items, sources)
    warnings = [d for d in sink.items if d.severity == "warning"]
    return program, warnings
