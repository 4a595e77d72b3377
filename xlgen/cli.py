"""The `xlgen` command line. Every subcommand turns bad input into a diagnostic and exit code 1."""

from __future__ import annotations

import functools
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .diagnostics import CompileError, render_all

EPILOG_CHECK = """\b
Examples:
  xlgen check stages/xl_spec.xl
  xlgen check a.xl b.xl --werror
"""


def _friendly(fn):
    """Report compile errors as diagnostics, and anything unexpected as an internal error."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CompileError as exc:
            click.echo(exc.render(), err=True)
            sys.exit(1)
        except (click.ClickException, click.exceptions.Exit, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # an xlgen bug, not the user's: say so, with where it happened
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            click.echo(
                f"xlgen: internal compiler error: {type(exc).__name__}: {exc}\n"
                f"  at {Path(frame.filename).name}:{frame.lineno} ({frame.name})\n"
                "  please report this with the input that caused it",
                err=True,
            )
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xlgen")
def main():
    """xlgen: compile .xl pipelines to a CUDA persistent mega-kernel and a bit-exact Python simulator.

    \b
    Examples:
      xlgen check stages/xl_spec.xl      # diagnostics only
      xlgen fmt --check stages/*.xl      # is the source canonically formatted?
      xlgen build stages/xl_spec.xl -o generated/
    """


@main.command(epilog=EPILOG_CHECK)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--werror", is_flag=True, help="Treat warnings as errors.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@_friendly
def check(files, werror, quiet):
    """Parse and type-check FILES (each a pipeline's main file) and print diagnostics."""
    from .checker import load_program

    failed = False
    for path in files:
        try:
            program, warnings = load_program(path)
        except CompileError as exc:
            click.echo(exc.render(), err=True)
            failed = True
            continue
        if warnings:
            click.echo(render_all(warnings, program.sources), err=True)
            failed = failed or werror
        if not quiet:
            n_stages = len(program.stages)
            click.echo(f"{path}: ok (pipeline {program.name}: {n_stages} stages, "
                       f"{len(program.request_fields)} request fields)")
    sys.exit(1 if failed else 0)


@main.command(epilog="""\b
Examples:
  xlgen fmt stages/xl_spec.xl            # rewrite in place
  xlgen fmt --check stages/*.xl          # exit 1 if any file would change
  xlgen fmt --stdout stages/kv.xl
""")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--check", "check_only", is_flag=True, help="Only report files that are not canonically formatted.")
@click.option("--stdout", is_flag=True, help="Print the formatted text instead of rewriting the file.")
@_friendly
def fmt(files, check_only, stdout):
    """Rewrite FILES in canonical .xl formatting (comments are kept)."""
    from .checker import read_source
    from .diagnostics import DiagnosticSink
    from .parser import ParseFailure, parse_text
    from .printer import format_module

    unformatted = []
    for path in files:
        sink, sources = DiagnosticSink(), {}
        text = read_source(path, sink, sources, None)
        if text is None:
            raise CompileError(sink.items, sources)
        try:
            module = parse_text(text, str(path))
        except ParseFailure as failure:
            raise CompileError([failure.diagnostic], {str(path): text}) from None
        formatted = format_module(module)
        if stdout:
            click.echo(formatted, nl=False)
        elif formatted != text:
            unformatted.append(path)
            if not check_only:
                path.write_text(formatted)
                click.echo(f"formatted {path}")
    if check_only and unformatted:
        for path in unformatted:
            click.echo(f"would reformat {path}", err=True)
        sys.exit(1)


@main.command(epilog="""\b
Examples:
  xlgen build stages/xl_spec.xl -o generated/
  xlgen build my_pipeline.xl -o build/ --check   # exit 1 if build/ is stale
""")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("generated"),
              show_default=True, help="Directory for the generated files.")
@click.option("--check", "check_only", is_flag=True, help="Do not write; exit 1 if any generated file would change.")
@_friendly
def build(file, out_dir, check_only):
    """Compile FILE to a CUDA mega-kernel, a C++ CPU build and a Python simulator."""
    from .build import build_pipeline

    result = build_pipeline(file, out_dir, write=not check_only)
    for path, status in result.items():
        click.echo(f"{status:>9}  {path}")
    if check_only and any(s != "unchanged" for s in result.values()):
        click.echo("generated files are stale; run xlgen build", err=True)
        sys.exit(1)


def run():  # pragma: no cover - console entry for `python -m xlgen`
    main()
