"""The `xlgen` command group, its error handling (no tracebacks: every failure a diagnostic
and an exit code) and the exit codes."""

from __future__ import annotations
import functools
import os
import sys
import traceback
from pathlib import Path
import click
from .. import __version__
from ..tools.pipeline.companion import CompanionError
from ..core.diagnostics import CompileError
from ..core.files import FileProblem


def _friendly(fn):
    """Report compile errors as diagnostics, and anything unexpected as an internal error."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CompileError as exc:
            click.echo(exc.render(), err=True)
            sys.exit(1)
        except FileProblem as exc:  # a file that cannot be read or written: the message says which and why
            click.echo(f"xlgen: error: {exc.message}", err=True)
            sys.exit(1)
        except CompanionError as exc:  # the pipeline's companion module failed: its file and line
            click.echo(f"xlgen: error: {exc.message}", err=True)
            sys.exit(1)
        except (click.ClickException, click.exceptions.Exit, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # `xlgen sim ... | head`: the reader left; stop quietly, as cat does
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a process killed by the signal
        except Exception as exc:
            sim = sys.modules.get("xlgen.runtime.sim")  # (not imported up front: it loads numpy)
            if sim is not None and isinstance(exc, sim.SimHang):  # --timeout or Ctrl-C: where each request was
                click.echo(exc.report, err=True)
                sys.exit(130 if exc.interrupted else EXIT_HANG)
            # anything else is an xlgen bug, not the user's: say so, with where it happened
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            click.echo(
                f"xlgen: internal compiler error: {type(exc).__name__}: {exc}\n"
                f"  at {Path(frame.filename).name}:{frame.lineno} ({frame.name})\n"
                "  please report this with the input that caused it",
                err=True,
            )
            sys.exit(2)

    return wrapper


class _PathArg(click.Path):
    """click.Path that refuses '' (which pathlib reads as '.', so `-o ''` wrote into the current directory)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is not a path; name a file or directory ('.' for the current directory)",
                      param, ctx)
        return super().convert(value, param, ctx)


def _path() -> _PathArg:
    return _PathArg(path_type=Path)


class SourceFile(click.ParamType):
    """An .xl source to read: a file that opens as a readable regular file, else a usage error (exit
    2, before anything runs). With `bundled`, a bare name that is no file here, such as `xl_spec`,
    names a bundled pipeline (stages/NAME.xl, wherever the package is installed)."""

    name = "file"

    def __init__(self, bundled: bool = False):
        self.bundled = bundled

    def convert(self, value, param, ctx):
        if isinstance(value, Path):
            return value
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is not a path; name an .xl file", param, ctx)
        from ..core.files import check_source_file

        path = Path(value)
        if self.bundled and not os.path.lexists(path) and os.sep not in value and "/" not in value:
            from ..core.resources import bundled_pipelines

            found = bundled_pipelines().get(value[:-3] if value.endswith(".xl") else value)
            if found is not None:
                return found
        try:
            check_source_file(path)
        except FileProblem as problem:
            message = problem.message
            if self.bundled and not os.path.lexists(path):
                from ..core.resources import bundled_pipelines

                message += f" (bundled pipelines, by name: {', '.join(bundled_pipelines()) or 'none'})"
            self.fail(message, param, ctx)
        return path


def _shown(path) -> str:
    """A path as text any terminal takes (a name that is not UTF-8 keeps its odd bytes escaped)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


class _Group(click.Group):
    """The command group; it keeps the command line it was given (for --json's `argv`)."""

    def parse_args(self, ctx, args):
        ctx.meta.setdefault("xlgen_argv", list(args))
        return super().parse_args(ctx, args)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xlgen")
def main():
    """xlgen: compile .xl pipelines to a CUDA persistent mega-kernel and a bit-exact Python simulator.

    Exit codes of sim, diff, run, bench and demo: 0 every request finished without error; 1 compile
    error, backends disagree, or a check of the pipeline's companion failed (an invariant, the
    reference); 2 usage or input error: a bad option, workload, or a source file that is missing
    or unreadable (nothing ran); 3 stopped at --timeout, on any backend (the simulator's
    --timeout, or a GPU kernel that did not finish: a hang), with a report of where each request
    was; 4 a request failed (runtime error or watchdog); 130 interrupted (Ctrl-C). A bundled
    pipeline can be named without its path: `xlgen diff xl_spec -w small`.

    \b
    Examples:
      xlgen check stages/xl_spec.xl      # diagnostics only
      xlgen fmt --check stages/*.xl      # is the source canonically formatted? (prints the diff)
      xlgen build stages/xl_spec.xl -o generated/
      xlgen diff xl_spec -w small --json result.json   # the bundled pipeline; results as JSON
      xlgen doctor                       # what is installed, what is missing, how to fix it
    """


BACKENDS = ("sim", "cpu", "gpu", "gpu-fast")


# Exit codes of the commands that run a pipeline (sim, diff, run, bench, demo); docs/workloads.md
# lists them and every such command's --help points there.
EXIT_OK = 0  # every request finished without error (and, for diff/bench, every backend agreed)


EXIT_MISMATCH = 1  # a compile error, or backends that disagree


EXIT_USAGE = 2  # bad options, workload or source file (missing, unreadable): nothing ran


EXIT_HANG = 3  # stopped at --timeout on any backend (the simulator's, or a GPU kernel that hung); a report was printed


EXIT_REQUESTS_FAILED = 4  # the run finished, but a request failed (runtime error or watchdog)




def run():  # pragma: no cover - console entry for `python -m xlgen`
    main()
