"""Program -> files: renders every template for a pipeline and writes only what changed."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

import jinja2

from .. import __version__
from ..core import ir
from ..frontend.checker import load_program
from ..core.files import FileProblem, check_target, ensure_directory, same_content, write_atomically
from ..core.resources import data_dir


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["add_prefix"] = lambda s, prefix: prefix + s
    env.filters["pyrepr"] = repr
    return env


def display_source(program: ir.Program) -> str:
    return Path(program.main_file).as_posix()


def render(program: ir.Program) -> dict[str, str]:
    """Every generated file for a program: {file name: text}."""
    from .emit_cpp import CppEmitter
    from .emit_python import PyEmitter

    env = environment()
    common = {"version": __version__, "source": display_source(program)}
    name = program.name
    cpp = CppEmitter(program).context()
    files = {
        f"{name}_sim.py": env.get_template("sim.py.j2").render(**common, **PyEmitter(program).context()),
        f"{name}_kernel.cuh": env.get_template("kernel.cuh.j2").render(**common, **cpp),
        f"{name}_cpu.cpp": env.get_template("cpu.cpp.j2").render(**common, **cpp),
        f"{name}_gpu.cu": env.get_template("gpu.cu.j2").render(**common, **cpp, timeline=False),
    }
    return {fname: _utf8(text) for fname, text in files.items()}


def _utf8(text: str) -> str:
    # A file name that is not UTF-8 (its odd bytes are surrogates in Python) shows up in comments
    # and messages: '?' for those bytes keeps every generated file valid UTF-8.
    return text.encode("utf-8", "replace").decode("utf-8")


def render_gpu_timeline(program: ir.Program) -> str:
    """NAME_gpu.cu with the kernel timeline compiled in (`--timeline`, runtime/xl_timeline.cuh).
    Not a file `xlgen build` writes: without --timeline the kernel is exactly NAME_gpu.cu."""
    from .emit_cpp import CppEmitter

    common = {"version": __version__, "source": display_source(program)}
    return _utf8(environment().get_template("gpu.cu.j2").render(**common, **CppEmitter(program).context(),
                                                                  timeline=True))


def write_if_different(path: Path, text: str, write: bool = True) -> str:
    """Write `text` to `path` unless it already holds it (atomically; never through a link).

    Returns "unchanged", "created", "updated", or "stale" (it would change, but write is off).
    Raises FileProblem on any file-system failure, with `path` unchanged.
    """
    data = text.encode("utf-8")
    exists = check_target(path)
    if exists and same_content(path, data):
        return "unchanged"
    if not write:
        return "stale"
    ensure_directory(path.parent)
    write_atomically(path, data, keep_mode_of=path if exists else None)
    return "updated" if exists else "created"


def build_pipeline(source: str | Path, out_dir: str | Path, write: bool = True) -> dict[str, str]:
    """Check `source` and write its generated files into `out_dir`. Raises CompileError (bad source)
    or FileProblem (the output cannot be written; every file it would replace is checked first)."""
    program, _warnings = load_program(source)
    out = Path(out_dir)
    files = render(program)
    if write:
        ensure_directory(out)
    elif out.exists() and not out.is_dir():
        raise FileProblem(out, f"'{out}' exists and is not a directory; choose an output directory")
    for name in files:  # refuse a link or a directory at any generated name before writing one file
        check_target(out / name)
    return {str(out / name): write_if_different(out / name, text, write) for name, text in files.items()}


def cache_dir() -> Path:
    from ..core.resources import cache_root

    root = cache_root()  # $XLGEN_CACHE, else $XDG_CACHE_HOME/xlgen, else ~/.cache/xlgen
    try:
        ensure_directory(root)
    except FileProblem as problem:
        raise FileProblem(root, f"{problem.message} (the cache of generated code: set XLGEN_CACHE to a "
                                "writable directory)") from None
    return root


class Compiled:
    """A checked program with its generated sources (in a content-addressed cache dir)."""

    def __init__(self, program: ir.Program):
        self.program = program
        self.files = render(program)
        digest = hashlib.sha256("\0".join(f"{k}\0{v}" for k, v in sorted(self.files.items())).encode()).hexdigest()
        self.key = digest[:16]
        self.dir = cache_dir() / f"{program.name}-{self.key}"
        ensure_directory(self.dir)
        for fname, text in self.files.items():
            write_if_different(self.dir / fname, text)
        self._sim = None

    @property
    def name(self) -> str:
        return self.program.name

    def timeline_gpu_path(self) -> Path:
        """NAME_gpu_timeline.cu in the cache dir, written on first use (render_gpu_timeline)."""
        path = self.dir / f"{self.name}_gpu_timeline.cu"
        if not getattr(self, "_timeline_written", False):
            write_if_different(path, render_gpu_timeline(self.program))
            self._timeline_written = True
        return path

    def sim_module(self):
        if self._sim is None:
            path = self.dir / f"{self.name}_sim.py"
            mod_name = f"xlgen_sim_{self.name}_{self.key}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
            module.XL_PROGRAM = self.program  # the typed IR: workloads are checked against its types
            self._sim = module
        return self._sim


def load(source: str | Path) -> Compiled:
    """Check and generate a pipeline: `xlgen.load("stages/xl_spec.xl").sim_module()`."""
    program, _warnings = load_program(source)
    return Compiled(program)


def load_text(text: str, name: str = "<memory>.xl") -> Compiled:
    """Like load(), for source held in a string (tests, fuzzing)."""
    from ..frontend.checker import PRELUDE_NAME, check_modules
    from ..core.diagnostics import CompileError
    from ..frontend.parser import ParseFailure, parse_text
    from ..core.resources import runtime_dir

    prelude = (runtime_dir() / "prelude.xl").read_text()
    sources = {PRELUDE_NAME: prelude, name: text}
    try:
        modules = [parse_text(prelude, PRELUDE_NAME), parse_text(text, name)]
    except ParseFailure as failure:
        raise CompileError([failure.diagnostic], sources) from None
    program, _ = check_modules(modules, sources)
    return Compiled(program)
