"""Commands on source files: check, fmt, build, graph."""

from __future__ import annotations
import os
import stat
import sys
from pathlib import Path
import click
from ..core.diagnostics import CompileError, render_all
from ..core.files import FileProblem
from .group import SourceFile, _friendly, _path, _shown, main


EPILOG_CHECK = """\b
Examples:
  xlgen check stages/xl_spec.xl
  xlgen check stages/*.xl --werror      # the pipeline and every file it imports
"""


@main.command(epilog=EPILOG_CHECK)
@click.argument("files", nargs=-1, required=True, type=SourceFile(bundled=True))
@click.option("--werror", is_flag=True, help="Treat warnings as errors.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@_friendly
def check(files, werror, quiet):
    """Parse and type-check FILES and print diagnostics.

    A file that starts with `pipeline NAME` is checked as a whole pipeline; a
    file without it (one that other files import) is checked as a library.
    """
    from ..frontend.checker import load_program

    failed = False
    for path in files:
        try:
            program, warnings = load_program(path, allow_library=True)
        except CompileError as exc:
            click.echo(exc.render(), err=True)
            failed = True
            continue
        if warnings:
            click.echo(render_all(warnings, program.sources), err=True)
            failed = failed or werror
        if not quiet:
            what = "library" if program.library else f"pipeline {program.name}"
            click.echo(f"{_shown(path)}: ok ({what}: {len(program.stages)} stages, "
                       f"{len(program.request_fields)} request fields)")
    sys.exit(1 if failed else 0)


@main.command(epilog="""\b
Examples:
  xlgen fmt stages/xl_spec.xl            # rewrite in place
  xlgen fmt --check stages/*.xl          # exit 1 and print the diff if any file would change
  xlgen fmt --stdout stages/kv.xl
""")
@click.argument("files", nargs=-1, required=True, type=SourceFile())
@click.option("--check", "check_only", is_flag=True,
              help="Change nothing: print a unified diff of what formatting would change (stdout) and name "
                   "each such file (stderr); exit 1 if there is any.")
@click.option("--stdout", is_flag=True, help="Print the formatted text instead of rewriting the file.")
@_friendly
def fmt(files, check_only, stdout):
    """Rewrite FILES in canonical .xl formatting (comments are kept)."""
    from ..frontend.checker import read_source
    from ..core.diagnostics import DiagnosticSink
    from ..frontend.parser import ParseFailure, parse_text
    from ..frontend.printer import format_module

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
            if check_only:  # what would change, as a unified diff (on stdout; the verdict on stderr)
                click.echo(_unified_diff(path, text, formatted), nl=False)
            else:
                _write_formatted(path, formatted)
                click.echo(f"formatted {_shown(path)}")
    if check_only and unformatted:
        for path in unformatted:
            click.echo(f"would reformat {_shown(path)}", err=True)
        sys.exit(1)


def _unified_diff(path: Path, text: str, formatted: str) -> str:
    import difflib

    name = _shown(path)
    lines = difflib.unified_diff(text.splitlines(keepends=True), formatted.splitlines(keepends=True),
                                 f"{name} (as it is)", f"{name} (formatted)")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _write_formatted(path: Path, text: str) -> None:
    """Replace a source with its formatted text: all at once (a failure leaves it as it was), in the
    file a link points to (the link stays), and never over a file its owner made read-only."""
    from ..core.files import write_atomically

    real = Path(os.path.realpath(path))
    if not os.stat(real).st_mode & stat.S_IWUSR:
        raise FileProblem(path, f"'{path}' is read-only; make it writable (chmod u+w) or print the "
                                "formatted text with --stdout")
    write_atomically(real, text, keep_mode_of=real)


@main.command(epilog="""\b
Examples:
  xlgen build stages/xl_spec.xl -o generated/
  xlgen build my_pipeline.xl -o build/ --check   # exit 1 if build/ is stale
""")
@click.argument("file", type=SourceFile(bundled=True))
@click.option("-o", "--out", "out_dir", type=_path(), default=Path("generated"),
              show_default=True, help="Directory for the generated files.")
@click.option("--check", "check_only", is_flag=True, help="Do not write; exit 1 if any generated file would change.")
@_friendly
def build(file, out_dir, check_only):
    """Compile FILE to a CUDA mega-kernel, a C++ CPU build and a Python simulator."""
    from ..backends.build import build_pipeline

    result = build_pipeline(file, out_dir, write=not check_only)
    for path, status in result.items():
        click.echo(f"{status:>9}  {_shown(path)}")
    if check_only and any(s != "unchanged" for s in result.values()):
        click.echo("generated files are stale; run xlgen build", err=True)
        sys.exit(1)


@main.command(epilog="""\b
Examples:
  xlgen graph stages/xl_spec.xl                 # DOT on stdout
  xlgen graph stages/xl_spec.xl -o states.png   # a picture (needs Graphviz's `dot`)
""")
@click.argument("file", type=SourceFile(bundled=True))
@click.option("-o", "--out", "out_path", type=_path(), default=None,
              help="Write here: .dot as text; .png/.svg/.pdf rendered with Graphviz.")
@_friendly
def graph(file, out_path):
    """Draw FILE's stage state machine: states of its state enum, stages as transitions."""
    import shutil
    import subprocess

    from ..frontend.checker import load_program
    from ..tools.pipeline.graph import no_state_machine_note, to_dot

    program, _ = load_program(file)
    dot = to_dot(program)
    note = no_state_machine_note(program)
    if note is not None:
        click.echo(note, err=True)
    if out_path is None:
        click.echo(dot, nl=False)
        return
    from ..core.files import check_target, write_atomically

    fmt = out_path.suffix[1:].lower()
    if fmt not in ("dot", "gv", "png", "svg", "pdf"):
        raise click.UsageError(f"-o {out_path}: give a file ending in .dot, .png, .svg or .pdf")
    if not out_path.parent.is_dir():
        raise FileProblem(out_path, f"cannot write '{out_path}': no such directory '{out_path.parent}'; "
                                    "create it first")
    exists = check_target(out_path)
    if fmt in ("dot", "gv"):
        data = dot.encode()
    else:
        if shutil.which("dot") is None:
            raise click.UsageError("rendering needs Graphviz's `dot` (apt-get install graphviz); "
                                   "or write a .dot file")
        rendered = subprocess.run(["dot", f"-T{fmt}"], input=dot.encode(), capture_output=True)
        if rendered.returncode != 0:
            raise click.ClickException(f"Graphviz's dot failed: {rendered.stderr.decode(errors='replace').strip()}")
        data = rendered.stdout
    write_atomically(out_path, data, keep_mode_of=out_path if exists else None)
    click.echo(f"wrote {_shown(out_path)}")
