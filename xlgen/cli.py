"""The `xlgen` command line. Every subcommand turns bad input into a diagnostic and exit code 1."""

from __future__ import annotations

import functools
import math
import os
import re
import stat
import sys
import traceback
from pathlib import Path

import click

from .tools.progress import progress_bar

from . import __version__
from .tools.companion import CompanionError
from .core.diagnostics import CompileError, render_all
from .core.files import FileProblem
from .tools import tool_options as tools
from .tools.tool_options import INVARIANTS_OPTION, report_options

EPILOG_CHECK = """\b
Examples:
  xlgen check stages/xl_spec.xl
  xlgen check stages/*.xl --werror      # the pipeline and every file it imports
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
                sys.exit(130 if exc.interrupted else 3)
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


def _shown(path) -> str:
    """A path as text any terminal takes (a name that is not UTF-8 keeps its odd bytes escaped)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xlgen")
def main():
    """xlgen: compile .xl pipelines to a CUDA persistent mega-kernel and a bit-exact Python simulator.

    Exit codes of sim, diff, run, bench and demo: 0 every request finished without error; 1 compile
    error, backends disagree, or a check of the pipeline's companion failed (an invariant, the
    reference); 2 usage or workload error (nothing ran); 3 GPU hang; 4 a request failed (runtime
    error or watchdog).

    \b
    Examples:
      xlgen check stages/xl_spec.xl      # diagnostics only
      xlgen fmt --check stages/*.xl      # is the source canonically formatted?
      xlgen build stages/xl_spec.xl -o generated/
    """


@main.command(epilog=EPILOG_CHECK)
@click.argument("files", nargs=-1, required=True, type=_path())
@click.option("--werror", is_flag=True, help="Treat warnings as errors.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@_friendly
def check(files, werror, quiet):
    """Parse and type-check FILES and print diagnostics.

    A file that starts with `pipeline NAME` is checked as a whole pipeline; a
    file without it (one that other files import) is checked as a library.
    """
    from .frontend.checker import load_program

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
  xlgen fmt --check stages/*.xl          # exit 1 if any file would change
  xlgen fmt --stdout stages/kv.xl
""")
@click.argument("files", nargs=-1, required=True, type=_path())
@click.option("--check", "check_only", is_flag=True, help="Only report files that are not canonically formatted.")
@click.option("--stdout", is_flag=True, help="Print the formatted text instead of rewriting the file.")
@_friendly
def fmt(files, check_only, stdout):
    """Rewrite FILES in canonical .xl formatting (comments are kept)."""
    from .frontend.checker import read_source
    from .core.diagnostics import DiagnosticSink
    from .frontend.parser import ParseFailure, parse_text
    from .frontend.printer import format_module

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
                _write_formatted(path, formatted)
                click.echo(f"formatted {_shown(path)}")
    if check_only and unformatted:
        for path in unformatted:
            click.echo(f"would reformat {_shown(path)}", err=True)
        sys.exit(1)


def _write_formatted(path: Path, text: str) -> None:
    """Replace a source with its formatted text: all at once (a failure leaves it as it was), in the
    file a link points to (the link stays), and never over a file its owner made read-only."""
    from .core.files import write_atomically

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
@click.argument("file", type=_path())
@click.option("-o", "--out", "out_dir", type=_path(), default=Path("generated"),
              show_default=True, help="Directory for the generated files.")
@click.option("--check", "check_only", is_flag=True, help="Do not write; exit 1 if any generated file would change.")
@_friendly
def build(file, out_dir, check_only):
    """Compile FILE to a CUDA mega-kernel, a C++ CPU build and a Python simulator."""
    from .backends.build import build_pipeline

    result = build_pipeline(file, out_dir, write=not check_only)
    for path, status in result.items():
        click.echo(f"{status:>9}  {_shown(path)}")
    if check_only and any(s != "unchanged" for s in result.values()):
        click.echo("generated files are stale; run xlgen build", err=True)
        sys.exit(1)


# ---- running pipelines -------------------------------------------------------------

BACKENDS = ("sim", "cpu", "gpu", "gpu-fast")


# Exit codes of the commands that run a pipeline (sim, diff, run, bench, demo); docs/workloads.md
# lists them and every such command's --help points there.
EXIT_OK = 0  # every request finished without error (and, for diff/bench, every backend agreed)
EXIT_MISMATCH = 1  # a compile error, or backends that disagree
EXIT_USAGE = 2  # bad options or workload: nothing ran
EXIT_HANG = 3  # the GPU kernel did not finish in --timeout; a hang report was printed
EXIT_REQUESTS_FAILED = 4  # the run finished, but a request failed (runtime error or watchdog)


def _prepare(file, workload_name, count, max_active, param_overrides=()):
    """Check and generate FILE, and load the workload against its simulator: every
    workload and option error is a usage error here, before anything runs."""
    from .backends.build import load
    from .tools.workload import Workload, WorkloadError, check_request_count, load as load_workload, resolve

    compiled = load(file)
    module = compiled.sim_module()
    if workload_name is None:  # no workload: requests that keep their declared initial values
        workload = Workload("default", [{} for _ in range(8)])
        workload.config.max_active = 4
    else:
        try:
            workload = load_workload(resolve(workload_name), module)
        except WorkloadError as exc:
            raise click.UsageError(f"workload {exc}" if "\n" not in str(exc) else f"workload:\n{exc}") from None
    if count is not None:
        if count > 0 and not workload.inputs:
            raise click.UsageError(f"--count {count}: the workload has no requests to repeat")
        try:
            check_request_count(count, module)
        except WorkloadError as exc:
            raise click.UsageError(f"--count {count}: {exc}") from None
        workload.inputs = [dict(workload.inputs[i % len(workload.inputs)]) for i in range(count)]
    if max_active is not None:
        workload.config.max_active = max_active
    for item in param_overrides:
        name, value = _parse_param(module, item)
        workload.params[name] = value
    _bind_weights(module, workload)
    return compiled, module, workload


def _bind_weights(module, workload) -> None:
    """--weights FILE: the pipeline's tensors, checked here (a usage error names what is wrong)."""
    from .runtime.tensors import WeightsError, bind, load_weights

    context = click.get_current_context(silent=True)
    path = context.meta.get("xlgen_weights") if context is not None else None
    declared = getattr(module.Params, "TENSORS", {})
    try:
        arrays = load_weights(path) if path is not None else {}
        bind(declared, arrays, source=str(path) if path is not None else "the launch (no --weights FILE)")
    except WeightsError as exc:
        raise click.UsageError(f"--weights: {exc}") from None
    workload.params.update({name: arrays[name] for name in declared})


class AsciiInt(click.ParamType):
    """An integer option in lo..hi, written in ASCII digits (Python's int() also reads '٣' and '1_0')."""

    name = "integer"

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _ASCII_INT.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            self.fail(f"{value!r} is not an integer (ASCII digits, e.g. 8)", param, ctx)
        if not self.lo <= number <= self.hi:
            self.fail(f"{number} is out of range {self.lo}..{self.hi}", param, ctx)
        return number


class Seconds(click.ParamType):
    """A positive, finite number of seconds, written in ASCII (Python's float() also reads '٣')."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _ASCII_FLOAT.fullmatch(value.strip()):
            number = float(value.strip())
        else:
            self.fail(f"{value!r} is not a number (ASCII, e.g. 30 or 2.5)", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value}: give a positive number of seconds", param, ctx)
        return number


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_ASCII_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_ASCII_HEX = re.compile(r"0[xX][0-9a-fA-F]+", re.ASCII)
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)",
                          re.ASCII | re.IGNORECASE)


def _parse_param(module, item: str):
    """`--param NAME=VALUE`: a launch parameter of FILE's pipeline and a value its type stores:
    ASCII digits only, member names only for an enum parameter, no f32 overflow to infinity."""
    from .core.diagnostics import did_you_mean
    from .tools.workload import _Invalid, check_value, param_types

    name, sep, text = (part.strip() for part in item.partition("="))
    if not sep or not name or not text:
        raise click.UsageError(f"--param {item!r}: expected NAME=VALUE, e.g. --param budget=16")
    types = module.Params.TYPES
    if name not in types:
        valid = ", ".join(types) if types else "none"
        raise click.UsageError(f"--param {name}: not a launch parameter of pipeline {module.PIPELINE}"
                               f"{did_you_mean(name, types)} (its parameters: {valid})")
    t = param_types(module)[name]
    if t.kind == "bool":
        if text.lower() not in _TRUE + _FALSE:
            raise click.UsageError(f"--param {name}={text}: {name} is a bool; give true or false")
        return name, text.lower() in _TRUE
    if t.kind == "f32":
        if not _ASCII_FLOAT.fullmatch(text):
            raise click.UsageError(f"--param {name}={text}: {name} is f32; give a number (ASCII, e.g. 0.5, 1e-3, "
                                   "inf)")
        value = float(text)
    elif _ASCII_INT.fullmatch(text) or _ASCII_HEX.fullmatch(text):
        value = int(text, 0) if _ASCII_HEX.fullmatch(text) else int(text)
    elif t.enum:  # an enum parameter takes a member name (a flag set also its bits as a number)
        value = text
    else:
        raise click.UsageError(f"--param {name}={text}: {name} is {t}; give an integer (ASCII digits, or 0x hex)")
    try:
        value = check_value(value, t)
    except _Invalid as exc:
        raise click.UsageError(f"--param {name}={text}: {exc}") from None
    return name, value


def _run_backend(backend: str, compiled, workload, timeout: float = 120.0, sim_timeout: float | None = None,
                 observer=None):
    from .runtime import cpu, sim

    if backend == "sim":
        return sim.run_stoppable(compiled.sim_module(), workload.params, workload.inputs, workload.config,
                                 sim_timeout, observer=observer)
    if backend == "cpu":
        return cpu.run(compiled, workload.params, workload.inputs, workload.config)
    from .runtime import gpu

    if not gpu.available():
        raise click.UsageError("the gpu backend needs CuPy and an NVIDIA GPU (pip install 'xlgen[gpu]')")
    mode = "fast" if backend == "gpu-fast" else "deterministic"
    try:
        return gpu.run(compiled, workload.params, workload.inputs, workload.config, mode=mode, timeout=timeout)
    except gpu.HangError as exc:
        click.echo(exc.report, err=True)
        sys.exit(EXIT_HANG)


def _summary(compiled, result, max_active: int | None = None) -> str:
    """One line: requests by outcome (failures by kind), rounds, records by kind, and (in
    the round model) the batch's slot utilisation."""
    from .tools.metrics import run_counts, slot_utilisation

    c = run_counts(result)
    failed = f"{c.failed} failed"
    if c.failed:
        kinds = [f"{c.runtime_errors} runtime error{'s' if c.runtime_errors != 1 else ''}"] if c.runtime_errors else []
        kinds += [f"{c.watchdog} stopped by the watchdog"] if c.watchdog else []
        failed += f" ({', '.join(kinds)})"
    line = (f"{result.backend}: {c.requests} requests, {c.done} done, {failed}, {result.rounds} rounds; "
            f"records: {c.trace_records} trace, {c.done_records} done, {c.error_records} error")
    if c.unfinished:
        line += f"; {c.unfinished} requests have no done or error record"
    if max_active is not None and "fast" not in result.backend and "interleaved" not in result.backend:
        line += f"; {slot_utilisation(result, max_active)}"
    return line


def _requests_failed(result) -> bool:
    from .tools.metrics import run_counts

    c = run_counts(result)
    return c.failed > 0 or c.unfinished > 0


def _check_output_path(path, option: str) -> None:
    """Fail before a long run, not after it, when a file cannot be written there."""
    if path is None:
        return
    path = Path(path)
    parent = path.resolve().parent
    if path.is_dir():
        raise click.UsageError(f"{option} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise click.UsageError(f"{option} {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise click.UsageError(f"{option} {path}: not writable")


def _check_show(compiled, show: str | None) -> list[str]:
    """--show's fields: scalar request fields of the pipeline (checked before the run)."""
    from .core.diagnostics import did_you_mean

    fields = {f.name: f for f in compiled.program.request_fields}
    if show is None:  # the first traced fields, those that print as one value
        return [f for f in [f for t in compiled.program.traces for f in t.fields][:6] if not _is_array(fields[f])]
    names = [n.strip() for n in show.split(",")]
    if not all(names):
        raise click.UsageError(f"--show {show!r}: give comma-separated request field names, e.g. --show a,b")
    for name in names:
        if name not in fields:
            raise click.UsageError(f"--show: '{name}' is not a request field of pipeline {compiled.name}"
                                   f"{did_you_mean(name, fields)}")
        if _is_array(fields[name]):
            raise click.UsageError(f"--show: '{name}' is an array ({fields[name].type}); --show prints scalar fields "
                                   "(--trace prints traced arrays)")
    return names


def _show_value(compiled, name: str, value) -> str:
    """A request field's value as the .xl source writes it: enum members by name, bools as true/false."""
    from .core import ir

    t = compiled.program.field(name).type
    if t == ir.BOOL:
        return "true" if value else "false"
    if isinstance(t, ir.EnumType) and not t.is_flags and 0 <= int(value) < len(t.members):
        return t.members[int(value)]
    return str(value)


def _is_array(decl) -> bool:
    from .core import ir

    return isinstance(decl.type, ir.ArrayType)


LAUNCH_MAX = (1 << 31) - 1  # xlgen.runtime.sim.LAUNCH_MAX (not imported here: --help stays fast)

_WORKLOAD_OPTIONS = [
    click.option("-w", "--workload", "workload_name", default=None,
                 help="A workload JSON file, or the name of a bundled one (workloads/NAME.json: small, mixed, "
                      "kv_pressure). Default: 8 requests with the declared initial values. Checked against the "
                      "pipeline's types before the run, with no coercion (5.5 is no i32, 1 no bool, an enum takes "
                      "its own member names); the rules: docs/workloads.md."),
    click.option("--count", type=AsciiInt(0, LAUNCH_MAX), default=None,
                 help="Use this many requests (the workload's, repeated in order); refused when the request state "
                      "would not fit in memory (the message gives the estimate)."),
    click.option("--max-active", type=AsciiInt(1, LAUNCH_MAX), default=None,
                 help=f"Batch capacity: requests resident at once (1..{LAUNCH_MAX})."),
    click.option("--param", "param_overrides", multiple=True, metavar="NAME=VALUE",
                 help="Set a launch parameter over the workload's params (repeatable): "
                      "--param budget=16 --param chunk=8."),
    click.option("--weights", type=click.Path(path_type=Path, dir_okay=False), default=None, expose_value=False,
                 callback=lambda ctx, _param, value: ctx.meta.__setitem__("xlgen_weights", value),
                 metavar="FILE", help="Bind the pipeline's tensors from a .safetensors or .npz file, by name "
                                      "(shapes and dtypes checked; docs/language.md, tensor)."),
]


def _positive_seconds(ctx, param, value):
    if value is not None and not (value > 0 and value != float("inf")):
        raise click.BadParameter(f"{value}: give a positive number of seconds")
    return value


_SIM_TIMEOUT = click.option(
    "--timeout", "sim_timeout", type=float, default=None, metavar="SECONDS", callback=_positive_seconds,
    help="Stop the simulator after this many seconds and print where each active request was "
         "(request, round, stage), as Ctrl-C does. Default: no limit.")


def _workload_options(fn):
    for option in reversed(_WORKLOAD_OPTIONS):
        fn = option(fn)
    return fn


@main.command(epilog="""\b
Examples:
  xlgen sim stages/xl_spec.xl -w small              # a bundled workload
  xlgen sim my.xl -w my_requests.json --trace      # print every trace record
  xlgen sim examples/token_budget/token_budget.xl -w examples/token_budget/requests.json --show tier,waited
  xlgen sim examples/token_budget/token_budget.xl --param budget=16 --report budget
  xlgen sim stages/xl_spec.xl -w kv_pressure --report kv               # the KV cache's residency report
  xlgen sim stages/xl_spec.xl -w kv_pressure --plot kv=kv.png          # KV occupancy per round
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--show", default=None, help="Comma-separated request fields to print per request.")
@click.option("--trace", "show_trace", is_flag=True, help="Print every trace record.")
@report_options
@INVARIANTS_OPTION
@_SIM_TIMEOUT
@_friendly
def sim(file, workload_name, count, max_active, param_overrides, show, show_trace, reports, plots, kv_report,
        kv_plot, check_invariants, sim_timeout=None):
    """Run FILE's simulator (the executable specification) on a workload.

    One line per request: its status (done, error, watchdog), `ended` (the round in
    which it finished or failed) and the --show fields; then a summary: requests by
    outcome, records by kind (trace, done, error) and the batch's slot utilisation
    (busy request-rounds over max_active x rounds); then the metrics (those the
    pipeline declares, its output count, latency in rounds, TTFT and inter-token
    latency with `progress`, and its companion's) and the companion's invariants,
    checked after every round. Options and the workload are checked before the run.
    Exit codes: docs/workloads.md ("Exit codes"); a violated invariant is 1.
    """
    import numpy as np

    from .tools.diff import describe_record
    from .runtime import sim as engine
    from .semantics.ops import ERR_WATCHDOG
    from .runtime.sim import KIND_DONE, KIND_ERROR

    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    fields = _check_show(compiled, show)
    want = tools.wanted(reports, plots, kv_report, kv_plot)
    tools.check_wanted(compiled, module, workload, want, _check_output_path)
    checker = tools.invariant_checker(compiled, module, workload, check_invariants)
    observer = checker.observer if checker is not None and checker.per_round else None
    total = len(workload.inputs)
    with progress_bar(total, f"simulating {total} requests") as bar:
        last = [0]

        def progress(done, _n):
            bar.update(done - last[0])
            last[0] = done

        result = engine.run_stoppable(module, workload.params, workload.inputs, workload.config, sim_timeout,
                                      progress=progress, observer=observer)
    click.echo(f"{'req':>5} {'status':>8} {'ended':>6} " + " ".join(f"{f:>14}" for f in fields))
    table = result.record_table  # grouped by request id: each group's last row is how it ended
    ends = np.flatnonzero(np.r_[table["req_id"][1:] != table["req_id"][:-1], True]) if len(table) else []
    last_row = {int(table["req_id"][k]): int(k) for k in ends}
    for i in range(len(result.requests)):
        rec = table[last_row[i]] if i in last_row else None
        kind = None if rec is None else int(rec["kind"])
        status = {KIND_DONE: "done", KIND_ERROR: "error"}.get(kind, "?")
        if status == "error" and int(rec["words"][0]) == ERR_WATCHDOG:
            status = "watchdog"
        values = " ".join(f"{_show_value(compiled, f, result.requests[f][i]):>14}" for f in fields)
        click.echo(f"{i:>5} {status:>8} {int(rec['round']) if rec is not None else -1:>6} {values}")
        if status in ("error", "watchdog"):
            click.echo("      " + describe_record(compiled.program, result.records[last_row[i]]))
    if show_trace:
        for rec in result.records:
            click.echo(describe_record(compiled.program, rec))
    click.echo(_summary(compiled, result, workload.config.max_active))
    _print_metrics(compiled, module, workload, result)
    held = tools.finish_invariants(checker, [tools.make_run(compiled, module, workload, result)])
    tools.produce(compiled, module, workload, result, want)
    if not held:
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(result) else EXIT_OK)


def _print_metrics(compiled, module, workload, result, stamps=None) -> None:
    text = tools.metrics_text(compiled, module, workload, result, workload.config.max_active, stamps)
    if text:
        click.echo(text)


@main.command(epilog="""\b
Examples:
  xlgen diff stages/xl_spec.xl -w small                 # simulator vs CPU build (and GPU if present)
  xlgen diff stages/xl_spec.xl -w mixed --backend cpu
  xlgen diff my.xl -w my_requests.json --backend gpu,gpu-fast
  xlgen diff examples/token_budget/token_budget.xl --param budget=8 --count 40
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--backend", "backends", default=None,
              help="Comma-separated backends to compare against the simulator: cpu, gpu, gpu-fast "
                   "(default: cpu, plus gpu when a GPU is present).")
@INVARIANTS_OPTION
@_SIM_TIMEOUT
@_friendly
def diff(file, workload_name, count, max_active, param_overrides, backends, check_invariants, sim_timeout=None):
    """Run FILE on the simulator and other backends and compare their traces bit for bit.

    Deterministic backends must match the simulator's traces and final state
    exactly. gpu-fast (no rounds) is compared on the output the pipeline declares
    (`output FIELD[COUNT]`), or on the whole final request state. The companion's
    invariants are checked after every simulator round and on every backend's final
    state, and its reference decoder against every finished request's output.
    Exit code 0 only when everything agrees and every request finished without
    error; 1 when backends disagree, an invariant is violated or an output differs
    from the reference; 4 when all agree but a request failed (docs/workloads.md,
    "Exit codes").
    """
    from .tools.diff import committed_output_fields, compare, compare_results

    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if backends is None:
        from .runtime import gpu

        chosen = ["cpu"] + (["gpu"] if gpu.available() else [])
    else:
        chosen = [b.strip() for b in backends.split(",") if b.strip()]
        if not chosen:
            raise click.UsageError(f"--backend {backends!r}: give one or more of {', '.join(BACKENDS[1:])}")
        bad = [b for b in chosen if b not in BACKENDS[1:]]
        if bad:
            raise click.UsageError(f"--backend: unknown {', '.join(bad)} (choose from {', '.join(BACKENDS[1:])})")
        if any(b.startswith("gpu") for b in chosen):  # before the simulator runs, not after
            from .runtime import gpu

            if not gpu.available():
                raise click.UsageError(f"--backend {backends}: the gpu backends need CuPy and an NVIDIA GPU "
                                       "(pip install -e '.[gpu]')")
    checker = tools.invariant_checker(compiled, module, workload, check_invariants)
    observer = checker.observer if checker is not None and checker.per_round else None
    reference = _run_backend("sim", compiled, workload, sim_timeout=sim_timeout, observer=observer)
    click.echo(_summary(compiled, reference, workload.config.max_active))
    runs = [tools.make_run(compiled, module, workload, reference)]
    failed = False
    for backend in chosen:
        other = _run_backend(backend, compiled, workload)
        runs.append(tools.make_run(compiled, module, workload, other))
        click.echo(_summary(compiled, other, workload.config.max_active))
        if backend == "gpu-fast":  # schedule-dependent traces: compare the committed result
            divergence = compare_results(compiled.program, reference, other, committed_output_fields(compiled.program))
        else:
            divergence = compare(compiled.program, reference, other)
        if divergence is None:
            click.echo(f"  identical: sim == {backend}")
        else:
            failed = True
            click.echo(divergence.render())
    if not tools.finish_invariants(checker, runs):
        failed = True
    if not tools.reference_check(compiled, runs[0]):
        failed = True
    if failed:
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(reference) else EXIT_OK)


_GPUS = [
    click.option("--gpus", type=AsciiInt(1, 4096), default=None, metavar="N",
                 help="Shard the requests over N GPUs through Ray (round-robin by request id; a mega-kernel and a "
                      "KV pool per GPU; pip install 'xlgen[sweep]')."),
    click.option("--address", default=None, metavar="ADDRESS",
                 help="With --gpus: join the Ray cluster at ADDRESS instead of starting a local Ray."),
]


def _GPUS_OPTIONS(fn):
    for option in reversed(_GPUS):
        fn = option(fn)
    return fn


def _sharded(work, compiled, file, gpus: int, backend: str, address):
    """Start the shard workers (one Ray actor per GPU), do `work(pool)`, and stop them; a missing
    Ray or too few GPUs is a usage error, a shard's hang exit code 3."""
    from .tools import sweep as engine

    try:
        engine.require_ray()
    except engine.RayMissing:
        raise click.UsageError("--gpus runs a worker per GPU on Ray, which is not installed: "
                               "pip install 'xlgen[sweep]' (or pip install ray)") from None
    from .tools.multigpu import ShardError, ShardPool

    try:
        pool = ShardPool(compiled, Path(file).resolve(), gpus, backend, address)
    except ShardError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        return work(pool)
    except ShardError as exc:
        click.echo(f"xlgen: error: {exc}", err=True)
        sys.exit(EXIT_HANG if exc.hang else EXIT_REQUESTS_FAILED)
    finally:
        pool.close()


@main.command(name="run", epilog="""\b
Examples:
  xlgen run stages/xl_spec.xl -w mixed                  # deterministic mode
  xlgen run stages/xl_spec.xl -w mixed --mode fast --timeout 30
  xlgen run stages/xl_spec.xl -w kv_pressure --report kv --plot kv=kv.png
  xlgen run stages/xl_spec.xl -w mixed --count 10000 --gpus 2       # data-parallel over 2 GPUs (Ray)
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--mode", type=click.Choice(["deterministic", "fast"]), default="deterministic", show_default=True)
@click.option("--timeout", type=Seconds(), default=120.0, show_default=True,
              help="Seconds to wait for the kernel before aborting it and printing a hang report.")
@report_options
@_GPUS_OPTIONS
@_friendly
def run_gpu(file, workload_name, count, max_active, param_overrides, mode, timeout, reports, plots, kv_report,
            kv_plot, gpus=None, address=None):
    """Run FILE's persistent mega-kernel on the GPU (one launch for the whole workload).

    --report and --plot (the companion's) need deterministic mode: in fast mode a
    trace record carries its request's own iteration, not a round of the whole batch.
    --gpus N shards the requests over N GPUs (round-robin by request id; a
    mega-kernel and a KV pool per GPU; docs/sweep.md) and prints per-GPU and
    total tokens/s. Exit codes: 0 every request finished without error, 2 usage,
    3 hang, 4 a request failed (docs/workloads.md, "Exit codes").
    """
    want = tools.wanted(reports, plots, kv_report, kv_plot)
    if mode == "fast" and want:
        raise click.UsageError("--report and --plot (and --kv-report, --kv-plot) need --mode deterministic "
                               "(fast-mode traces have no batch-wide rounds)")
    if gpus is not None and want:
        raise click.UsageError("--report and --plot report one run's state; with --gpus each GPU has its own")
    if gpus is None and address is not None:
        raise click.UsageError("--address joins a Ray cluster for --gpus; give --gpus N too")
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if gpus is not None:
        run = _sharded(lambda pool: pool.run(workload, timeout=timeout), compiled, file, gpus,
                       "gpu" if mode == "deterministic" else "gpu-fast", address)
        click.echo(_summary(compiled, run.result))
        click.echo(run.table())
        sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(run.result) else EXIT_OK)
    tools.check_wanted(compiled, module, workload, want, _check_output_path)
    result = _run_backend("gpu" if mode == "deterministic" else "gpu-fast", compiled, workload, timeout)
    timing = result.extra["timing"]
    click.echo(_summary(compiled, result, workload.config.max_active))
    click.echo(f"kernel: {timing.kernel_ms:.3f} ms, grid {timing.grid} x {timing.threads} threads, "
               f"{timing.barriers} grid barriers")
    _print_metrics(compiled, module, workload, result, result.extra.get("round_end_ns"))
    tools.produce(compiled, module, workload, result, want)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(result) else EXIT_OK)


@main.command(epilog="""\b
Examples:
  xlgen demo                          # writes xlgen-demo/block_sizes.png
  xlgen demo -w small -o /tmp/demo    # a quicker run
  xlgen demo --no-gpu
""")
@click.option("-w", "--workload", "workload_name", default="mixed", show_default=True,
              help="A workload JSON file or a bundled workload name.")
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("xlgen-demo"),
              show_default=True, help="Where to write the plot.")
@click.option("--gpu/--no-gpu", "use_gpu", default=None, help="Also run the GPU (default: when one is present).")
@_friendly
def demo(workload_name, out_dir, use_gpu):
    """The bundled speculative-decoding pipeline end to end: build, simulate, diff-test, summarise, plot."""
    from .tools.demo import run_demo
    from .tools.workload import WorkloadError

    if use_gpu:
        from .runtime import gpu

        if not gpu.available():
            raise click.UsageError("--gpu needs CuPy and an NVIDIA GPU (pip install -e '.[gpu]'); --no-gpu runs "
                                   "the simulator and the CPU build only")
    try:
        agreed = run_demo(out_dir, workload_name, use_gpu)
    except WorkloadError as exc:
        raise click.UsageError(f"workload {exc}") from None
    sys.exit(EXIT_OK if agreed else EXIT_MISMATCH)


@main.command(epilog="""\b
Examples:
  xlgen bench stages/xl_spec.xl -w mixed
  xlgen bench stages/xl_spec.xl -w mixed --repeats 10 --json bench.json --markdown bench.md
  xlgen bench stages/xl_spec.xl -w kv_pressure          # with the companion's KV cache metrics
  xlgen bench stages/xl_spec.xl -w mixed --count 10000 --gpus 2 --json gpus.json   # 1 GPU vs 2
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--repeats", type=AsciiInt(1, 10_000), default=5, show_default=True,
              help="Timed runs per variant (after a warm-up), 1..10000.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Write the report as JSON.")
@click.option("--markdown", "md_path", type=click.Path(path_type=Path), default=None, help="Write a markdown table.")
@_GPUS_OPTIONS
@_friendly
def bench(file, workload_name, count, max_active, param_overrides, repeats, json_path, md_path, gpus=None,
          address=None):
    """Time the mega-kernel against a host-launched loop and CUDA-graph replay built from the same IR (GPU).

    The report includes the batch's slot utilisation (busy request-rounds over
    max_active x rounds) and the requests that failed. With --gpus N: the
    deterministic mega-kernel on one GPU against the requests sharded over N GPUs
    (per-GPU and total tokens/s; committed tokens checked equal to the 1-GPU run's
    and to plain greedy decoding's). Exit codes: 0 all variants agree and every
    request finished, 1 a variant disagrees, 2 usage, 3 hang, 4 a request failed
    (docs/workloads.md, "Exit codes").
    """
    from .tools.bench import run_bench, save
    from .runtime import gpu

    _check_output_path(json_path, "--json")
    _check_output_path(md_path, "--markdown")
    if gpus is None and address is not None:
        raise click.UsageError("--address joins a Ray cluster for --gpus; give --gpus N too")
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if gpus is not None:
        from .tools.multigpu import bench_sharded

        report = _sharded(lambda pool: bench_sharded(pool, workload, repeats=repeats), compiled, file, gpus, "gpu",
                          address)
        click.echo(report.table())
        if json_path:
            import json

            json_path.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")
        if md_path:
            md_path.write_text(report.markdown() + "\n")
        if not report.identical:
            sys.exit(EXIT_MISMATCH)
        sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(report.sharded[-1].result) else EXIT_OK)
    if not gpu.available():
        raise click.UsageError("xlgen bench needs CuPy and an NVIDIA GPU (pip install -e '.[gpu]')")
    try:
        report = run_bench(compiled, workload, repeats=repeats)
    except gpu.HangError as exc:
        click.echo(exc.report, err=True)
        sys.exit(EXIT_HANG)
    click.echo(report.table())
    if json_path:
        save(report, json_path)
    if md_path:
        md_path.write_text(report.markdown() + "\n")
    if not all(v.identical for v in report.variants):
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if report.metrics.get("failed_requests") else EXIT_OK)


@main.command(epilog="""\b
Examples:
  xlgen sweep docs/sweep_example.toml                  # a local Ray on this machine's cores
  xlgen sweep docs/sweep_example.toml -o results/      # the same command again resumes
  xlgen sweep study.toml --address auto                # join a running Ray cluster
  xlgen sweep study.toml --dry-run                     # list the points, run nothing
  xlgen sweep study.toml --serial                      # one after another, in this process, no Ray
""")
@click.argument("spec_path", metavar="SPEC", type=_path())
@click.option("-o", "--out", "out_dir", type=_path(), default=None,
              help="Results directory (default: sweep-NAME). Points with a result there are not run again.")
@click.option("--address", default=None, metavar="ADDRESS",
              help="Join the Ray cluster at ADDRESS (auto, host:6379, ray://host:10001); default: start a "
                   "local Ray. Workers need xlgen and the pipeline's files at the same paths.")
@click.option("--cpus", type=AsciiInt(1, 1 << 16), default=None,
              help="CPU slots of a local Ray: simulator and CPU-build points run this many at once "
                   "(default: the machine's cores).")
@click.option("--serial", is_flag=True, help="Run the points one after another in this process, without Ray.")
@click.option("--retry-failed", is_flag=True, help="Run again the points recorded as failed.")
@click.option("--dry-run", is_flag=True, help="List the points and which are finished; run nothing.")
@_friendly
def sweep(spec_path, out_dir, address, cpus, serial, retry_failed, dry_run):
    """Run a policy sweep described in SPEC (TOML; docs/sweep.md) as Ray tasks.

    Every combination of the spec's grid (launch parameters, workloads, backends,
    max_active, ...) is a point; simulator and CPU-build points take a CPU slot
    each, GPU points one GPU each. Results stream into OUT/results.csv and
    results.md (results.parquet with pyarrow), with the plots the spec asks for.
    A failed point is reported with its parameters and the sweep goes on. Exit
    codes: 0 every point ok, 2 a spec error or no Ray, 4 a point failed, 130
    interrupted (run the same command again to resume).
    """
    from .tools import sweep as engine

    if address and serial:
        raise click.UsageError("--serial runs in this process; it does not take --address")
    if not serial and not dry_run:
        try:
            engine.require_ray()
        except engine.RayMissing as exc:
            click.echo(f"xlgen: error: {exc}", err=True)
            sys.exit(EXIT_USAGE)
    try:
        spec = engine.load_spec(spec_path)
    except engine.SpecError as exc:
        click.echo(f"xlgen: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    out_dir = out_dir or engine.default_out_dir(spec)
    if out_dir.exists() and not out_dir.is_dir():
        raise click.UsageError(f"--out {out_dir}: is a file; give a directory")
    if dry_run:
        store = engine.ResultStore(out_dir) if (out_dir / engine.RESULTS_FILE).exists() else None
        for p in spec.points:
            state = store.rows[p.key]["status"] if store and p.key in store.rows else "to run"
            click.echo(f"{p.index:>5} {state:>7}  {engine.describe_point(p, spec.columns)}")
        click.echo(f"{len(spec.points)} points")
        return
    bar = [None]
    counter = [0]

    def start(outcome, todo):
        where = "in this process" if serial else (f"on Ray at {address}" if address else "on a local Ray")
        click.echo(f"{spec.name}: {outcome.total} points, {outcome.skipped} finished earlier, {len(todo)} to run "
                   f"{where}; results in {_shown(out_dir)}/", err=True)
        bar[0] = progress_bar(len(todo), "sweeping")
        bar[0].__enter__()

    def arrived(row, point):
        counter[0] += 1
        bar[0].update(1)
        what = engine.describe_point(point, spec.columns)
        if row["status"] != "ok":
            click.echo(f"{chr(10) if sys.stderr.isatty() else ''}point {point.index} failed ({what}): {row['error']}",
                       err=True)
        elif not sys.stderr.isatty():
            click.echo(f"[{counter[0]}] point {point.index} ok ({what}) {row.get('seconds', 0):.2f}s", err=True)

    try:
        outcome = engine.run_sweep(spec, out_dir, address=address, cpus=cpus, serial=serial,
                                   retry_failed=retry_failed, on_result=arrived, on_start=start)
    finally:
        if bar[0] is not None:
            bar[0].__exit__(None, None, None)
    missing = outcome.total - outcome.ok - outcome.failed
    click.echo(f"{outcome.ran} points run in {outcome.seconds:.1f} s, {outcome.skipped} finished earlier; of "
               f"{outcome.total}: {outcome.ok} ok, {outcome.failed} failed"
               + (f", {missing} without a result (run the same command again)" if missing else ""))
    for path in outcome.files:
        click.echo(f"wrote {_shown(path)}")
    if outcome.interrupted:
        click.echo("interrupted: run the same command again to finish the sweep (finished points are kept)",
                   err=True)
        sys.exit(130)
    sys.exit(EXIT_REQUESTS_FAILED if outcome.failed or missing else EXIT_OK)


@main.command(epilog="""\b
Examples:
  xlgen graph stages/xl_spec.xl                 # DOT on stdout
  xlgen graph stages/xl_spec.xl -o states.png   # a picture (needs Graphviz's `dot`)
""")
@click.argument("file", type=_path())
@click.option("-o", "--out", "out_path", type=_path(), default=None,
              help="Write here: .dot as text; .png/.svg/.pdf rendered with Graphviz.")
@_friendly
def graph(file, out_path):
    """Draw FILE's stage state machine: states of its state enum, stages as transitions."""
    import shutil
    import subprocess

    from .frontend.checker import load_program
    from .tools.graph import no_state_machine_note, to_dot

    program, _ = load_program(file)
    dot = to_dot(program)
    note = no_state_machine_note(program)
    if note is not None:
        click.echo(note, err=True)
    if out_path is None:
        click.echo(dot, nl=False)
        return
    from .core.files import check_target, write_atomically

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


def run():  # pragma: no cover - console entry for `python -m xlgen`
    main()
