"""The `xlgen` command line. Every subcommand turns bad input into a diagnostic and exit code 1."""

from __future__ import annotations

import functools
import os
import stat
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .diagnostics import CompileError, render_all
from .files import FileProblem

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
        except (click.ClickException, click.exceptions.Exit, SystemExit, KeyboardInterrupt):
            raise
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
    from .checker import load_program

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
                _write_formatted(path, formatted)
                click.echo(f"formatted {_shown(path)}")
    if check_only and unformatted:
        for path in unformatted:
            click.echo(f"would reformat {_shown(path)}", err=True)
        sys.exit(1)


def _write_formatted(path: Path, text: str) -> None:
    """Replace a source with its formatted text: all at once (a failure leaves it as it was), in the
    file a link points to (the link stays), and never over a file its owner made read-only."""
    from .files import write_atomically

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
    from .build import build_pipeline

    result = build_pipeline(file, out_dir, write=not check_only)
    for path, status in result.items():
        click.echo(f"{status:>9}  {_shown(path)}")
    if check_only and any(s != "unchanged" for s in result.values()):
        click.echo("generated files are stale; run xlgen build", err=True)
        sys.exit(1)


# ---- running pipelines -------------------------------------------------------------

BACKENDS = ("sim", "cpu", "gpu", "gpu-fast")


def _prepare(file, workload_name, count, max_active, param_overrides=()):
    """Check and generate FILE, and load the workload against its simulator."""
    from .build import load
    from .workload import WorkloadError, load as load_workload, resolve

    from .workload import Workload

    compiled = load(file)
    module = compiled.sim_module()
    if workload_name is None:  # no workload: requests that keep their declared initial values
        workload = Workload("default", [{} for _ in range(8)])
        workload.config.max_active = 4
    else:
        try:
            workload = load_workload(resolve(workload_name), module)
        except WorkloadError as exc:
            raise click.UsageError(f"workload: {exc}") from None
    if count is not None:
        if count < 0 or (count > 0 and not workload.inputs):
            raise click.UsageError(f"--count {count}: the workload has {len(workload.inputs)} requests to repeat")
        workload.inputs = [dict(workload.inputs[i % len(workload.inputs)]) for i in range(count)]
    if max_active is not None:
        workload.config.max_active = max_active
    for item in param_overrides:
        name, value = _parse_param(module, item)
        workload.params[name] = value
    return compiled, module, workload


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _parse_param(module, item: str):
    """`--param NAME=VALUE`: a launch parameter of FILE's pipeline and a value its type stores."""
    from .diagnostics import did_you_mean
    from .runtime.sim import coerce, param_word
    from .workload import WorkloadError, _enum_value

    name, sep, text = (part.strip() for part in item.partition("="))
    if not sep or not name or not text:
        raise click.UsageError(f"--param {item!r}: expected NAME=VALUE, e.g. --param fixed_block=8")
    types = module.Params.TYPES
    if name not in types:
        valid = ", ".join(types) if types else "none"
        raise click.UsageError(f"--param {name}: not a launch parameter of pipeline {module.PIPELINE}"
                               f"{did_you_mean(name, types)} (its parameters: {valid})")
    t = types[name]
    if t == "bool":
        if text.lower() not in _TRUE + _FALSE:
            raise click.UsageError(f"--param {name}={text}: {name} is a bool; give true or false")
        return name, text.lower() in _TRUE
    word = param_word(t)
    try:
        value = float(text) if word == "f" else (int(text) if text.lstrip("+-").isdigit() else int(text, 0))
    except ValueError:
        try:
            value = _enum_value(module, text) if word != "f" else None
        except WorkloadError:
            value = None
        if not isinstance(value, int):
            kind = "a number" if word == "f" else "an integer" + (" or a member name" if t not in ("i32", "u32") else "")
            raise click.UsageError(f"--param {name}={text}: {name} is {t}; give {kind}") from None
    try:
        coerce(value, word)
    except (TypeError, ValueError, OverflowError) as exc:
        raise click.UsageError(f"--param {name}={text}: {exc}") from None
    return name, value


def _run_backend(backend: str, compiled, workload, timeout: float = 120.0, sim_timeout: float | None = None):
    from .runtime import cpu, sim

    if backend == "sim":
        return sim.run_stoppable(compiled.sim_module(), workload.params, workload.inputs, workload.config,
                                 sim_timeout)
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
        sys.exit(3)


def _summary(compiled, result) -> str:
    from .runtime.sim import KIND_DONE, KIND_ERROR

    kinds = result.records[:, 2] if len(result.records) else []
    done = int((kinds == KIND_DONE).sum()) if len(result.records) else 0
    failed = int((kinds == KIND_ERROR).sum()) if len(result.records) else 0
    return (f"{result.backend}: {len(result.requests)} requests, {done} done, {failed} failed, "
            f"{result.rounds} rounds, {len(result.records)} trace records")


_WORKLOAD_OPTIONS = [
    click.option("-w", "--workload", "workload_name", default=None,
                 help="A workload JSON file, or the name of a bundled one (workloads/NAME.json: small, mixed, "
                      "kv_pressure). Default: 8 requests with the declared initial values."),
    click.option("--count", type=int, default=None, help="Use this many requests (the workload's, repeated)."),
    click.option("--max-active", type=int, default=None, help="Batch capacity: requests resident at once."),
    click.option("--param", "param_overrides", multiple=True, metavar="NAME=VALUE",
                 help="Set a launch parameter over the workload's params (repeatable): "
                      "--param fixed_block=8 --param kv_cache=true."),
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


_KV_OPTIONS = [
    click.option("--kv-report", "kv_report", is_flag=True,
                 help="After the run, print the KV cache's residency report: hit rate, fragmentation, "
                      "misses, waits, evictions by cause (docs/kv_cache.md)."),
    click.option("--kv-plot", "kv_plot", type=click.Path(path_type=Path, dir_okay=False), default=None,
                 metavar="PATH", help="Write a PNG of the KV pool's occupancy per round: committed, draft and "
                                      "free pages, and the pressure threshold."),
]


def _kv_options(fn):
    for option in reversed(_KV_OPTIONS):
        fn = option(fn)
    return fn


def _check_plot_path(plot_path) -> None:
    """Fail before a long run, not after it, when the plot cannot be written there."""
    if plot_path is not None and not plot_path.resolve().parent.is_dir():
        raise click.UsageError(f"--kv-plot {plot_path}: no such directory {plot_path.parent}")


def _kv_outputs(compiled, module, workload, result, show_report: bool, plot_path) -> None:
    """--kv-report and --kv-plot, after a run; one line saying why when the run has no KV cache."""
    if not show_report and plot_path is None:
        return
    from .kv_report import format_report, kv_settings, no_report_reason, plot_occupancy, report, residency

    why = no_report_reason(compiled.program, result)
    if why is not None:
        if why.startswith("no kv_manage") and not kv_settings(module, workload.params).kv_cache:
            why = "the KV cache was off in this run (launch param kv_cache is false; --param kv_cache=true turns it on)"
        click.echo(f"kv report: {why}" + ("; no plot written" if plot_path is not None else ""))
        return
    kv = kv_settings(module, workload.params)
    r = report(compiled.program, result, kv.page_tokens)
    if show_report:
        policy = {0: "LRU", 1: "priority-aware"}.get(kv.eviction_policy, str(kv.eviction_policy))
        click.echo(f"KV cache: pool of {kv.pool_pages} pages x {kv.page_tokens} tokens, pressure above "
                   f"{kv.threshold_pages:.1f} live pages, eviction {policy}")
        click.echo(f"  {format_report(r)}")
        ev = r.evictions
        click.echo(f"  evictions by cause: decode {ev['decode']} (draft pages for a block), "
                   f"recompute {ev['recompute']} (missed pages got back), yield {ev['yield']} (no-deadlock yields)")
    if plot_path is not None:
        title = (f"KV occupancy, {workload.name}: kv_hit_rate {r.kv_hit_rate:.3f}, "
                 f"fragmentation_ratio {r.fragmentation_ratio:.3f}")
        try:
            plot_occupancy(residency(compiled.program, result), kv.pool_pages, kv.pressure_threshold, plot_path,
                           title=title)
        except ImportError:
            raise click.UsageError("--kv-plot needs matplotlib (pip install matplotlib)") from None
        except OSError as exc:
            raise click.UsageError(f"--kv-plot {plot_path}: {exc.strerror or exc}") from None
        click.echo(f"wrote {plot_path}")


@main.command(epilog="""\b
Examples:
  xlgen sim stages/xl_spec.xl -w small              # a bundled workload
  xlgen sim stages/xl_spec.xl -w mixed --show n_out,total_accepted
  xlgen sim my.xl -w my_requests.json --trace      # print every trace record
  xlgen sim stages/xl_spec.xl -w kv_pressure --kv-report               # KV cache residency report
  xlgen sim stages/xl_spec.xl -w kv_pressure --kv-plot kv.png          # KV occupancy per round
  xlgen sim stages/xl_spec.xl -w kv_pressure --param fixed_block=8 --param eviction_policy=1 --kv-report
  xlgen sim stages/xl_spec.xl -w mixed --param kv_cache=true --param pool_pages=256 --kv-report
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--show", default=None, help="Comma-separated request fields to print per request.")
@click.option("--trace", "show_trace", is_flag=True, help="Print every trace record.")
@_kv_options
@_SIM_TIMEOUT
@_friendly
def sim(file, workload_name, count, max_active, param_overrides, show, show_trace, kv_report, kv_plot,
        sim_timeout=None):
    """Run FILE's simulator (the executable specification) on a workload."""
    from .diff import describe_record
    from .runtime import sim as engine
    from .runtime.sim import KIND_DONE, KIND_ERROR

    _check_plot_path(kv_plot)
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    total = len(workload.inputs)
    with click.progressbar(length=total, label=f"simulating {total} requests", file=sys.stderr) as bar:
        last = [0]

        def progress(done, _n):
            bar.update(done - last[0])
            last[0] = done

        result = engine.run_stoppable(module, workload.params, workload.inputs, workload.config, sim_timeout,
                                      progress=progress)
    fields = [f for f in (show.split(",") if show else [])]
    if not fields:
        fields = [f for t in compiled.program.traces for f in t.fields][:6]
    unknown = [f for f in fields if f not in result.requests.dtype.names]
    if unknown:
        raise click.UsageError(f"--show: unknown field(s) {', '.join(unknown)}")
    scalar = [f for f in fields if result.requests.dtype[f].shape == ()]
    header = f"{'req':>5} {'status':>8} {'round':>6} " + " ".join(f"{f:>14}" for f in scalar)
    click.echo(header)
    last_record = {int(r[0]): r for r in result.records}
    for i in range(len(result.requests)):
        rec = last_record.get(i)
        status = "done" if rec is not None and rec[2] == KIND_DONE else ("error" if rec is not None and rec[2] == KIND_ERROR else "?")
        values = " ".join(f"{result.requests[f][i]!s:>14}" for f in scalar)
        click.echo(f"{i:>5} {status:>8} {int(rec[1]) if rec is not None else -1:>6} {values}")
        if status == "error":
            click.echo("      " + describe_record(compiled.program, rec))
    if show_trace:
        for rec in result.records:
            click.echo(describe_record(compiled.program, rec))
    click.echo(_summary(compiled, result))
    _kv_outputs(compiled, module, workload, result, kv_report, kv_plot)


@main.command(epilog="""\b
Examples:
  xlgen diff stages/xl_spec.xl -w small                 # simulator vs CPU build (and GPU if present)
  xlgen diff stages/xl_spec.xl -w mixed --backend cpu
  xlgen diff my.xl -w my_requests.json --backend gpu,gpu-fast
  xlgen diff stages/xl_spec.xl -w kv_pressure --param eviction_policy=1
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--backend", "backends", default=None,
              help="Comma-separated backends to compare against the simulator: cpu, gpu, gpu-fast "
                   "(default: cpu, plus gpu when a GPU is present).")
@_SIM_TIMEOUT
@_friendly
def diff(file, workload_name, count, max_active, param_overrides, backends, sim_timeout=None):
    """Run FILE on the simulator and other backends and compare their traces bit for bit.

    Deterministic backends must match the simulator's traces and final state
    exactly. gpu-fast (no rounds) is compared on its committed tokens (the
    bundled pipeline's out_tokens and n_out), or on the whole final request state.
    Exit code 0 only when everything agrees.
    """
    from .diff import committed_output_fields, compare, compare_results

    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if backends is None:
        from .runtime import gpu

        chosen = ["cpu"] + (["gpu"] if gpu.available() else [])
    else:
        chosen = [b.strip() for b in backends.split(",") if b.strip()]
        bad = [b for b in chosen if b not in BACKENDS[1:]]
        if bad:
            raise click.UsageError(f"--backend: unknown {', '.join(bad)} (choose from {', '.join(BACKENDS[1:])})")
    reference = _run_backend("sim", compiled, workload, sim_timeout=sim_timeout)
    click.echo(_summary(compiled, reference))
    failed = False
    for backend in chosen:
        other = _run_backend(backend, compiled, workload)
        click.echo(_summary(compiled, other))
        if backend == "gpu-fast":  # schedule-dependent traces: compare the committed result
            divergence = compare_results(compiled.program, reference, other, committed_output_fields(compiled.program))
        else:
            divergence = compare(compiled.program, reference, other)
        if divergence is None:
            click.echo(f"  identical: sim == {backend}")
        else:
            failed = True
            click.echo(divergence.render())
    sys.exit(1 if failed else 0)


@main.command(name="run", epilog="""\b
Examples:
  xlgen run stages/xl_spec.xl -w mixed                  # deterministic mode
  xlgen run stages/xl_spec.xl -w mixed --mode fast --timeout 30
  xlgen run stages/xl_spec.xl -w kv_pressure --kv-report --kv-plot kv.png
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--mode", type=click.Choice(["deterministic", "fast"]), default="deterministic", show_default=True)
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the kernel before aborting it and printing a hang report.")
@_kv_options
@_friendly
def run_gpu(file, workload_name, count, max_active, param_overrides, mode, timeout, kv_report, kv_plot):
    """Run FILE's persistent mega-kernel on the GPU (one launch for the whole workload).

    --kv-report and --kv-plot need deterministic mode: in fast mode a trace
    record carries its request's own iteration, not a round of the whole batch.
    """
    if mode == "fast" and (kv_report or kv_plot is not None):
        raise click.UsageError("--kv-report and --kv-plot need --mode deterministic (fast-mode traces have "
                               "no batch-wide rounds)")
    _check_plot_path(kv_plot)
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    result = _run_backend("gpu" if mode == "deterministic" else "gpu-fast", compiled, workload, timeout)
    timing = result.extra["timing"]
    click.echo(_summary(compiled, result))
    click.echo(f"kernel: {timing.kernel_ms:.3f} ms, grid {timing.grid} x {timing.threads} threads, "
               f"{timing.barriers} grid barriers")
    _kv_outputs(compiled, module, workload, result, kv_report, kv_plot)


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
    from .demo import run_demo

    sys.exit(0 if run_demo(out_dir, workload_name, use_gpu) else 1)


@main.command(epilog="""\b
Examples:
  xlgen bench stages/xl_spec.xl -w mixed
  xlgen bench stages/xl_spec.xl -w mixed --repeats 10 --json bench.json --markdown bench.md
  xlgen bench stages/xl_spec.xl -w kv_pressure          # with the KV cache's metrics
""")
@click.argument("file", type=click.Path(path_type=Path))
@_workload_options
@click.option("--repeats", type=int, default=5, show_default=True, help="Timed runs per variant (after a warm-up).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Write the report as JSON.")
@click.option("--markdown", "md_path", type=click.Path(path_type=Path), default=None, help="Write a markdown table.")
@_friendly
def bench(file, workload_name, count, max_active, param_overrides, repeats, json_path, md_path):
    """Time the mega-kernel against a host-launched loop and CUDA-graph replay built from the same IR (GPU)."""
    from .bench import run_bench, save
    from .runtime import gpu

    if not gpu.available():
        raise click.UsageError("xlgen bench needs CuPy and an NVIDIA GPU (pip install -e '.[gpu]')")
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    report = run_bench(compiled, workload, repeats=repeats)
    click.echo(report.table())
    if json_path:
        save(report, json_path)
    if md_path:
        md_path.write_text(report.markdown() + "\n")
    sys.exit(0 if all(v.identical for v in report.variants) else 1)


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

    from .checker import load_program
    from .graph import to_dot

    program, _ = load_program(file)
    dot = to_dot(program)
    if out_path is None:
        click.echo(dot, nl=False)
        return
    from .files import check_target, write_atomically

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
