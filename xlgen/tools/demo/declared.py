"""`xlgen demo PIPELINE`: the demo a pipeline declares, a `@demo` function of its companion
module (docs/language.md, "The companion module"), run with its arguments.

xlgen knows no pipeline's demo: it loads the companion the pipeline names, finds its `@demo`,
converts `--arg NAME=VALUE` to the types of the function's defaults and calls it with a `Demo`
(where the pipeline is, where to write, whether to run the GPU, and the standard demo).
"""

from __future__ import annotations

import inspect
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import click

DOCS = 'docs/language.md, "The companion module"'


class DemoUsage(Exception):
    """The demo cannot run as asked (no demo declared, an unknown or bad argument); the message says why."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass
class Demo:
    """What a pipeline's `@demo` function is given (its first argument)."""
    source: Path  # the pipeline's main .xl file
    out_dir: Path  # where the demo writes (output_directory() makes it)
    use_gpu: bool  # also run the GPU (--gpu/--no-gpu; by default when one is present)
    echo: Callable[[str], None] = click.echo
    program: object = None  # the checked program (xlgen.core.ir.Program)
    _compiled: object = field(default=None, repr=False)

    def build(self):
        """The pipeline checked and generated (xlgen.build.load's Compiled), once."""
        if self._compiled is None:
            from ...backends.build import Compiled, load

            self._compiled = Compiled(self.program) if self.program is not None else load(self.source)
        return self._compiled

    def output_directory(self, names=()) -> Path:
        """Make out_dir, and make sure the files `names` can be written there (before a long run)."""
        from ...core.files import output_directory

        output_directory(self.out_dir, list(names))
        return self.out_dir

    def standard(self, workload: str = "mixed") -> bool:
        """The standard demo (xlgen.tools.demo.standard): simulate `workload` (a bundled name or a
        file), diff-test the CPU build (and the GPU), print the declared metrics, write every plot
        of the companion. True when every backend agreed with the simulator."""
        from ..pipeline.companion import Unavailable
        from ..pipeline.workload import WorkloadError
        from .standard import run_demo

        try:
            return run_demo(self.out_dir, workload, self.use_gpu, source=self.source, compiled=self.build())
        except WorkloadError as exc:
            raise Unavailable(f"workload {exc}") from None


def find(program):
    """(companion, its @demo hook) of `program`; DemoUsage naming what is missing."""
    from ..pipeline.companion import _shown, of_program

    companion = of_program(program)
    if companion is None:
        raise DemoUsage(f"pipeline {program.name} declares no demo: it has no companion module (a demo is the "
                        f"companion's @demo function; declare one with `companion \"FILE.py\"`; {DOCS})")
    hooks = companion.of("demo")
    if not hooks:
        raise DemoUsage(f"pipeline {program.name} declares no demo: its companion {_shown(companion.path)} has no "
                        f"@demo function ({DOCS})")
    return companion, hooks[0]


def arguments(hook) -> dict[str, object]:
    """The demo's arguments: {name: default} (inspect.Parameter.empty for one without a default)."""
    params = list(inspect.signature(hook.fn).parameters.values())[1:]
    return {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def describe_arguments(hook) -> str:
    args = arguments(hook)
    if not args:
        return "none"
    return ", ".join(n if d is inspect.Parameter.empty else f"{n}={d!r}" for n, d in args.items())


def _convert(name: str, text: str, default):
    """`text` as the type of `default` (str when there is none)."""
    if default is inspect.Parameter.empty or default is None or isinstance(default, str):
        return text
    if isinstance(default, bool):
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise DemoUsage(f"argument {name}={text}: give true or false")
    if isinstance(default, int):
        if text.strip().lstrip("+-").isascii() and text.strip().lstrip("+-").isdigit():
            return int(text)
        raise DemoUsage(f"argument {name}={text}: give an integer")
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise DemoUsage(f"argument {name}={text}: give a number") from None
    return text


def parse_arguments(program, hook, given: list[tuple[str, str]]) -> dict:
    """The keyword arguments of the demo call from (name, text) pairs, checked against its signature."""
    declared = arguments(hook)
    out = {}
    for name, text in given:
        if name not in declared:
            from ...core.diagnostics import did_you_mean

            raise DemoUsage(f"the demo of pipeline {program.name} ({hook.name}) takes no argument '{name}'"
                            f"{did_you_mean(name, list(declared))} (its arguments: {describe_arguments(hook)})")
        out[name] = _convert(name, text, declared[name])
    missing = [n for n, d in declared.items() if d is inspect.Parameter.empty and n not in out]
    if missing:
        raise DemoUsage(f"the demo of pipeline {program.name} needs " + ", ".join(f"--arg {n}=VALUE" for n in missing))
    return out


def run(source: Path, out_dir: Path, use_gpu: bool | None, given: list[tuple[str, str]], echo=click.echo) -> bool:
    """Run the demo `source`'s pipeline declares; True when everything it checked agreed.
    DemoUsage when it has none or an argument does not fit, or when the demo raises Unavailable."""
    from ...frontend.checker import load_program
    from ..pipeline.companion import Unavailable

    program, _warnings = load_program(source)
    companion, hook = find(program)
    kwargs = parse_arguments(program, hook, given)
    if use_gpu is None:
        from ...runtime import gpu

        use_gpu = gpu.available()
    demo = Demo(Path(source), Path(out_dir), bool(use_gpu), echo, program)
    try:
        return bool(hook.fn(demo, **kwargs))
    except Unavailable as why:
        raise DemoUsage(str(why)) from None
    except Exception as exc:  # noqa: BLE001 - where it went wrong decides whose error it is
        where = _companion_line(exc, companion.path)
        if where is None:
            raise  # xlgen's own (a file problem, a compile error, a hang, ...): reported as usual
        from ..pipeline.companion import CompanionError

        raise CompanionError(f"{where}: demo '{hook.name}' raised {type(exc).__name__}: {exc}") from None


def _companion_line(exc: BaseException, companion_path: Path) -> str | None:
    """`FILE:LINE` in the companion's folder when the error is the companion's: raised there, or in
    code that is not xlgen's (numpy, matplotlib) called from there; None when xlgen raised it."""
    from ...core.resources import runtime_dir
    from ..pipeline.companion import _shown

    folder = os.path.realpath(Path(companion_path).parent)
    package = os.path.realpath(runtime_dir().parent)  # xlgen/
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.dirname(os.path.realpath(f.filename)) == folder]
    if not mine or not frames:
        return None
    last = os.path.realpath(frames[-1].filename)
    if os.path.dirname(last) != folder and last.startswith(package + os.sep):
        return None
    return f"{_shown(Path(mine[-1].filename))}:{mine[-1].lineno}"
