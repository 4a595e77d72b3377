"""What the commands that run a pipeline share: loading FILE and its workload, launch
options (--workload, --count, --max-active, --param, --weights, --gpus), running a backend,
summaries."""

from __future__ import annotations
import contextlib
import math
import os
import re
import sys
from pathlib import Path
import click
from ..tools.pipeline import tool_options as tools
from .group import EXIT_HANG, EXIT_REQUESTS_FAILED


def _prepare(file, workload_name, count, max_active, param_overrides=()):
    """Check and generate FILE, and load the workload against its simulator: every
    workload and option error is a usage error here, before anything runs."""
    from ..backends.build import load
    from ..tools.pipeline.workload import Workload, WorkloadError, check_request_count, load as load_workload, resolve

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
    from ..runtime.tensors import WeightsError, bind, load_weights

    context = click.get_current_context(silent=True)
    path = context.meta.get("xlgen_weights") if context is not None else None
    declared = getattr(module.Params, "TENSORS", {})
    try:
        arrays = load_weights(path, declared) if path is not None else {}
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
    from ..core.diagnostics import did_you_mean
    from ..tools.pipeline.workload import _Invalid, check_value, param_types

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
                 observer=None, team_warps: int | None = None, timeline: bool = False, team_blocks: int | None = None):
    from ..runtime import cpu, sim

    if backend == "sim":
        return sim.run_stoppable(compiled.sim_module(), workload.params, workload.inputs, workload.config,
                                 sim_timeout, observer=observer)
    if backend == "cpu":
        return cpu.run(compiled, workload.params, workload.inputs, workload.config)
    from ..runtime import gpu

    if not gpu.available():
        raise click.UsageError("the gpu backend needs CuPy and an NVIDIA GPU (`xlgen doctor` says how to install them)")
    mode = "fast" if backend == "gpu-fast" else "deterministic"
    try:
        return gpu.run(compiled, workload.params, workload.inputs, workload.config, mode=mode, timeout=timeout,
                       team_warps=team_warps, timeline=timeline, team_blocks=team_blocks)
    except gpu.HangError as exc:
        click.echo(exc.report, err=True)
        sys.exit(EXIT_HANG)


def _summary(compiled, result, max_active: int | None = None) -> str:
    """One line: requests by outcome (failures by kind), rounds, records by kind, and (in
    the round model) the batch's slot utilisation."""
    from ..tools.pipeline.metrics import run_counts, slot_utilisation

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
    from ..tools.pipeline.metrics import run_counts

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
    if path.is_symlink():  # written atomically after the run, never through a link
        raise click.UsageError(f"{option} {path}: is a symbolic link; xlgen does not write through links: "
                               "remove the link or give another path")


def _check_show(compiled, show: str | None) -> list[str]:
    """--show's fields: scalar request fields of the pipeline (checked before the run)."""
    from ..core.diagnostics import did_you_mean

    fields = {f.name: f for f in compiled.program.request_fields}
    if show is None:  # the first traced fields, those that print as one value
        return [f for f in [f for t in compiled.program.traces for f in t.fields][:6] if not _is_array(fields[f])]
    names = [n.strip() for n in show.split(",")]
    if not all(names):
        raise click.UsageError(f"--show {show!r}: give comma-separated request field names, e.g. --show a,b")
    for name in names:
        if name not in fields:
            scalars = [f for f, decl in fields.items() if not _is_array(decl)]
            raise click.UsageError(f"--show: '{name}' is not a request field of pipeline {compiled.name}"
                                   f"{did_you_mean(name, fields)} (its scalar request fields: "
                                   f"{', '.join(scalars) or 'none'})")
        if _is_array(fields[name]):
            raise click.UsageError(f"--show: '{name}' is an array ({fields[name].type}); --show prints scalar fields "
                                   "(--trace prints traced arrays)")
    return names


def _show_value(compiled, name: str, value) -> str:
    """A request field's value as the .xl source writes it: enum members by name, bools as true/false."""
    from ..core import ir

    t = compiled.program.field(name).type
    if t == ir.BOOL:
        return "true" if value else "false"
    if isinstance(t, ir.EnumType) and not t.is_flags and 0 <= int(value) < len(t.members):
        return t.members[int(value)]
    return str(value)


def _is_array(decl) -> bool:
    from ..core import ir

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
    from ..tools.pipeline.companion import deadline_for_command

    deadline_for_command(value)  # the timer starts now: a companion that loops when imported is stopped too
    return value


_SIM_TIMEOUT = click.option(
    "--timeout", "sim_timeout", type=float, default=None, metavar="SECONDS", callback=_positive_seconds,
    help="Stop the simulator after this many seconds and print where each active request was "
         "(request, round, stage), as Ctrl-C does. Default: no limit.")


def _workload_options(fn):
    for option in reversed(_WORKLOAD_OPTIONS):
        fn = option(fn)
    return fn


def _print_metrics(compiled, module, workload, result, stamps=None) -> None:
    text = tools.metrics_text(compiled, module, workload, result, workload.config.max_active, stamps)
    if text:
        click.echo(text)


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
    from ..tools.measure import sweep as engine

    try:
        engine.require_ray()
    except engine.RayMissing:
        raise click.UsageError("--gpus runs a worker per GPU on Ray, which is not installed: "
                               "pip install 'xlgen[sweep]' (or pip install ray)") from None
    from ..tools.measure.multigpu import ShardError, ShardPool

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


_JSON = click.option(
    "--json", "json_path", type=click.Path(path_type=Path), default=None, metavar="FILE",
    help="Also write the results as JSON (schema xlgen.result/1, docs/results_json.md): per-request results, "
         "every metric at full precision, records by kind, the exit status; written atomically, never through "
         "a symbolic link.")


def _json_results(command: str):
    """The --json FILE option of a running command: the command fills the document that
    `_json_doc()` gives it, and it is written however the command ends (`_json_result`)."""
    def decorate(fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, json_path=None, **kwargs):
            with _json_result(json_path, command, kwargs.get("file")) as doc:
                click.get_current_context().meta["xlgen_json"] = doc
                return fn(*args, **kwargs)

        return _JSON(wrapper)

    return decorate


def _json_doc() -> dict | None:
    """The --json document being filled (None without --json)."""
    context = click.get_current_context(silent=True)
    return context.meta.get("xlgen_json") if context is not None else None


@contextlib.contextmanager
def _json_result(json_path, command: str, file):
    """`with _json_result(path, "sim", file) as doc:` the command fills `doc` (None without --json);
    whatever exit the block takes (sys.exit, a --timeout stop, Ctrl-C, a compile error, a companion
    that fails) writes it with that exit status. A usage error writes nothing: nothing ran."""
    if json_path is None:
        yield None
        return
    from ..core.files import FileProblem
    from ..tools.measure import results

    _check_output_path(json_path, "--json")
    try:
        results.check_path(json_path)
    except FileProblem as problem:
        raise click.UsageError(f"--json {json_path}: {problem.message}") from None
    doc = results.new_document(command, file, click.get_current_context().meta.get("xlgen_argv"))
    try:
        yield doc
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        results.write(json_path, results.finish(doc, code))
        raise
    except Exception as exc:
        from ..core.diagnostics import CompileError
        from ..tools.pipeline.companion import CompanionError

        sim = sys.modules.get("xlgen.runtime.sim")
        if sim is not None and isinstance(exc, sim.SimHang):  # --timeout or Ctrl-C: where each request was
            doc["stopped"] = exc.report
            results.write(json_path, results.finish(doc, 130 if exc.interrupted else EXIT_HANG))
        elif isinstance(exc, (CompileError, CompanionError)):  # exit code 1, with what the error says
            doc["error"] = exc.render() if isinstance(exc, CompileError) else exc.message
            results.write(json_path, results.finish(doc, 1))
        raise
    results.write(json_path, results.finish(doc, 0))


def _timeline_option(fn):
    return click.option(
        "--timeline", "timeline_path", type=click.Path(path_type=Path), default=None, metavar="FILE.json",
        help="Record the mega-kernel's timeline (a build with device timestamps per team, stage, round, phase 2 "
             "and barrier wait) and write it as a Chrome trace (open in ui.perfetto.dev) and FILE.png, SM by "
             "time; `xlgen profile FILE.json` summarises it (docs/gpu.md, \"Timeline\").")(fn)


def _check_timeline_path(path) -> None:
    if path is not None:
        from ..tools.measure.timeline import png_path

        _check_output_path(path, "--timeline")
        _check_output_path(png_path(path), "--timeline (its chart)")


def _write_timeline(path, compiled, workload, result, extra: dict | None = None) -> None:
    """The run's timeline as a trace and a chart; one line says where, and what was dropped."""
    from ..tools.measure import timeline

    timing = result.extra["timing"]
    meta = {"pipeline": compiled.name, "workload": workload.name, "requests": len(workload.inputs),
            "kernel_ms": timing.kernel_ms, "wall_ms": timing.wall_ms}
    trace = timeline.to_trace(result.extra["timeline"], compiled.program, dict(meta, **(extra or {})))
    chart = timeline.write(trace, path)
    click.echo(timeline.summary_line(trace, path, chart))
    problems = timeline.check_trace(trace)
    if problems:  # an xlgen bug, not the user's: say so without failing the run
        click.echo(f"timeline: warning: the trace fails its check: {problems[0]}", err=True)
