"""`xlgen sweep SPEC`: a grid of pipeline runs (policy parameters x workloads x backends) as Ray tasks.

A spec is a small TOML file (docs/sweep.md):

    pipeline = "pipeline.xl"                 # relative to the spec
    workloads = ["requests.json"]            # bundled names or JSON files
    backends = ["sim"]                       # sim, cpu, gpu, gpu-fast
    repeats = 1                              # runs per point; wall times are their median
    metrics = ["tokens", "rounds"]           # the table's columns (default: every metric)

    [grid]                                   # every combination of these values
    budget = [4, 8, 16]                      # launch parameters of the pipeline...
    max_active = [16, 32]                    # ...and max_active, max_rounds, count

    [[points]]                               # and/or points named one by one
    budget = 2

    [[plot]]                                 # a metric against a swept column, a line per policy
    x = "max_active"
    y = "tokens_per_s"

A point is one value for every swept column (workload, backend, parameters,
launch settings). Each runs as one Ray task: simulator and CPU-build points take
one CPU slot, GPU points one GPU. A point is keyed by a hash of what decides its
result (the generated code, the workload's requests, the backend, the parameters,
the repeats); results go to RESULTS/results.jsonl as they arrive, one line per
point, and a point whose key is already there is not run again (resume). The
table (results.csv, results.md, results.parquet with pyarrow) is rewritten from
them. A point that raises, times out or ends with failed requests is recorded
with its error and does not stop the sweep; a task whose worker died is retried
by Ray and, if it still fails, reported and left unrecorded, so the next run
redoes it.

This module decides; the CLI (`xlgen sweep`) only parses options and shows progress.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import socket
import statistics
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

BACKENDS = ("sim", "cpu", "gpu", "gpu-fast")
LAUNCH_AXES = ("max_active", "max_rounds", "count")  # launch settings a point may set besides parameters
RESERVED_AXES = ("workload", "backend") + LAUNCH_AXES
TOP_KEYS = ("name", "description", "pipeline", "workloads", "backends", "repeats", "timeout", "metrics", "grid",
            "points", "plot") + LAUNCH_AXES
PLOT_KEYS = ("x", "y", "by", "title")
RESULTS_FILE = "results.jsonl"
INSTALL_HINT = ("xlgen sweep runs its points as Ray tasks, and Ray is not installed: pip install 'xlgen[sweep]' "
                "(or pip install ray); --serial runs the points one after another in this process without it")
# Always in the table, whatever `metrics` selects: what a reader needs to trust a row.
ALWAYS = ("requests", "failed_requests")


class SpecError(ValueError):
    """The spec cannot be run; the message lists every problem found."""


class RayMissing(ImportError):
    pass


class RayStartError(RuntimeError):
    """Ray could not be started or joined; the message says where and what to do."""


MAX_POINTS = 1_000_000  # a sweep runs at most this many points (each a task and a line of results)
DRY_RUN_PREVIEW = 50  # points --dry-run lists


def require_ray():
    try:
        import ray
    except ImportError:
        raise RayMissing(INSTALL_HINT) from None
    return ray


# ---- the spec ---------------------------------------------------------------------------

@dataclass
class Plot:
    x: str
    y: str
    by: list[str] | None = None
    title: str | None = None

    @property
    def file_name(self) -> str:
        return f"plot-{_slug(self.y)}-vs-{_slug(self.x)}.png"


@dataclass
class Point:
    index: int  # position in the spec's order (the table's order)
    axes: dict  # column -> value: workload, backend, parameters, launch settings
    key: str = ""  # hash of what decides the result


@dataclass
class Spec:
    path: Path
    name: str
    pipeline: Path
    columns: list[str]  # the swept columns, in the table's order
    points: list[Point]
    repeats: int = 1
    timeout: float | None = None
    metrics: list[str] | None = None  # None: all
    plots: list[Plot] = field(default_factory=list)
    workloads: dict = field(default_factory=dict)  # workload name -> Workload (checked against the pipeline)
    compiled: object = None
    total: int = 0  # points in the spec (more than len(points) only when load_spec built a preview)

    @property
    def varying(self) -> list[str]:
        """Columns with more than one value among the points."""
        return [c for c in self.columns if len({_hashable(p.axes.get(c)) for p in self.points}) > 1]


def load_spec(path: str | Path, preview: int | None = None) -> Spec:
    """Read and check a spec: every problem is collected and raised together as a SpecError;
    the pipeline is compiled and every workload loaded against it before anything runs.

    The points are counted before any is built: more than MAX_POINTS is a SpecError, unless
    `preview` is given (--dry-run), which builds only the first `preview` points (spec.total
    says how many there are)."""
    from ...backends.build import load
    from ...core.diagnostics import CompileError, did_you_mean
    from ..pipeline.workload import WorkloadError, load as load_workload, resolve

    from ...core.files import MAX_SOURCE_BYTES, FileProblem, read_source_bytes_any

    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > 16 * MAX_SOURCE_BYTES:
            raise SpecError(f"{path}: larger than {16 * MAX_SOURCE_BYTES >> 20} MiB; a spec is a small TOML file "
                            "(docs/sweep.md)")
        text = read_source_bytes_any(path).decode("utf-8")  # a regular file: a FIFO or /dev/zero is refused
    except FileProblem as exc:
        raise SpecError(exc.message.replace("remove it or choose another directory", "give a TOML spec")) from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not valid UTF-8 text; a spec is a TOML file (docs/sweep.md)") from None
    data = _parse(path, text)
    errors: list[str] = []
    for key in data:
        if key not in TOP_KEYS:
            errors.append(f"unknown key '{key}'{did_you_mean(key, TOP_KEYS)} (keys: {', '.join(TOP_KEYS)})")
    base = path.parent
    pipeline = data.get("pipeline")
    if not isinstance(pipeline, str) or not pipeline:
        raise SpecError(f"{path}: 'pipeline' must name the pipeline's .xl file (relative to the spec), "
                        'e.g. pipeline = "stages/xl_spec.xl"')
    pipeline_path = _relative(base, pipeline)
    if not pipeline_path.exists():
        raise SpecError(f"{path}: pipeline {pipeline!r}: no such file {pipeline_path}")
    try:
        compiled = load(pipeline_path)
    except CompileError as exc:
        raise SpecError(f"{path}: pipeline {pipeline} does not compile:\n{exc.render()}") from None
    module = compiled.sim_module()

    repeats = _integer(data.get("repeats", 1), "repeats", 1, 10_000, errors)
    timeout = data.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        errors.append(f"timeout = {timeout!r}: give a positive number of seconds")
        timeout = None
    metrics = data.get("metrics")
    if metrics is not None and (not isinstance(metrics, list) or not metrics
                                or not all(isinstance(m, str) and m for m in metrics)):
        errors.append("metrics: give a list of metric names, e.g. metrics = [\"tokens\", \"acceptance_rate\"]")
        metrics = None

    # The axes: top-level lists and settings, then the grid, then explicit points.
    base_axes: dict[str, list] = {}
    for key, column in (("workloads", "workload"), ("backends", "backend")):
        value = data.get(key, ["default"] if key == "workloads" else ["sim"])
        values = value if isinstance(value, list) else [value]
        if not values:
            errors.append(f"{key}: give at least one")
        base_axes[column] = values
    for key in LAUNCH_AXES:
        if key in data:
            base_axes[key] = data[key] if isinstance(data[key], list) else [data[key]]
    grid = data.get("grid", {})
    if not isinstance(grid, dict):
        errors.append("grid: give a table of column = [values], e.g. [grid] max_active = [16, 32]")
        grid = {}
    grid_axes = dict(base_axes)
    for key, values in grid.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            errors.append(f"grid.{key}: an empty list gives no points")
        grid_axes[_axis_name(key)] = values
    explicit = data.get("points", [])
    if not isinstance(explicit, list) or not all(isinstance(p, dict) for p in explicit):
        errors.append("points: give a list of tables ([[points]] in TOML), each column = value")
        explicit = []

    params = module.Params.TYPES
    columns = ["workload", "backend"] + [c for c in LAUNCH_AXES if c in grid_axes]
    columns += [_axis_name(k) for k in grid if _axis_name(k) not in columns]
    for p in explicit:
        columns += [_axis_name(k) for k in p if _axis_name(k) not in columns]
    for column in columns:
        if column not in RESERVED_AXES and column not in params:
            errors.append(f"'{column}' is neither a launch parameter of pipeline {module.PIPELINE}"
                          f"{did_you_mean(column, list(params) + list(RESERVED_AXES))} nor one of "
                          f"{', '.join(RESERVED_AXES)} (its parameters: {', '.join(params) or 'none'})")

    def combos():  # lazily: a grid of 10^9 points is counted, never built
        if grid or not explicit:
            names = list(grid_axes)
            for values in itertools.product(*(grid_axes[n] for n in names)):
                yield dict(zip(names, values))
        for p in explicit:  # crossed with the top-level workloads/backends/launch lists it does not set itself
            own = {_axis_name(k): v for k, v in p.items()}
            rest = [n for n in base_axes if n not in own]
            for values in itertools.product(*(base_axes[n] for n in rest)):
                yield dict(zip(rest, values)) | own

    total = (math.prod(len(v) for v in grid_axes.values()) if grid or not explicit else 0) + sum(
        math.prod(len(base_axes[n]) for n in base_axes if n not in {_axis_name(k) for k in p}) for p in explicit)
    if total > MAX_POINTS and preview is None:
        errors.append(f"the spec has {total:,} points, more than the {MAX_POINTS:,} a sweep runs: split it into "
                      "smaller specs (--dry-run counts the points and lists the first)")

    # Check every value once (not once per point), then every workload once: the values of every
    # axis (each a point's value for its column), not the points.
    checked: dict = {}
    values_of = [(column, v) for column, vs in grid_axes.items() for v in vs]
    for p in explicit:
        values_of += [(_axis_name(k), v) for k, v in p.items()]
    for column, value in values_of:
        token = (column, _hashable(value))
        if token not in checked:
            checked[token] = _check_axis(column, value, module, errors)
    workloads = {}
    for name in dict.fromkeys(v for c, v in values_of if c == "workload" and isinstance(v, str) and v):
        if name == "default":
            from ..pipeline.workload import Workload

            workloads[name] = Workload("default", [{} for _ in range(8)])
            workloads[name].config.max_active = 4
            continue
        try:
            workloads[name] = load_workload(resolve(str(_relative(base, name)) if _looks_like_path(name) else name),
                                            module)
        except WorkloadError as exc:
            errors.append(f"workload {exc}")
    plots = _plots(data.get("plot", []), columns, metrics, errors)
    if errors:
        raise SpecError(f"{path}: {len(errors)} problem{'s' if len(errors) > 1 else ''}:\n"
                        + "\n".join(f"  {e}" for e in errors))

    points = []
    seen = {}
    for combo in combos():
        if preview is not None and len(points) >= preview:
            break
        axes = {c: checked[(c, _hashable(combo[c]))] for c in columns if c in combo}
        token = json.dumps(axes, sort_keys=True, default=str)
        if token in seen:  # the grid and an explicit point may name the same point
            continue
        seen[token] = True
        points.append(Point(len(points), axes))
    spec = Spec(path, str(data.get("name") or path.stem), pipeline_path, columns, points, repeats or 1, timeout,
                metrics, plots, workloads, compiled)
    complete = preview is None or len(points) < preview  # else a preview: total counts the grid's duplicates too
    spec.total = len(points) if complete else total
    for point in points:
        point.key = point_key(spec, point)
    return spec


def _parse(path: Path, text: str) -> dict:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise SpecError(f"{path}: a YAML spec needs PyYAML (pip install pyyaml); or write it as TOML "
                            "(docs/sweep.md)") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: invalid YAML: {exc}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec is a table of keys (pipeline, workloads, grid, ...)")
    return data


def _axis_name(key: str) -> str:
    return {"workloads": "workload", "backends": "backend"}.get(key, key)


def _relative(base: Path, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() else base / p


def _looks_like_path(name: str) -> bool:
    return "/" in name or name.endswith(".json")


def _integer(value, what: str, lo: int, hi: int, errors: list[str]):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        errors.append(f"{what} = {value!r}: give an integer in {lo}..{hi}")
        return None
    return value


def _check_axis(column: str, value, module, errors: list[str]):
    """The value a point stores for `column` (an enum parameter's member name as given)."""
    from ..pipeline.workload import _Invalid, check_value, param_types

    if column == "workload":
        if not isinstance(value, str) or not value:
            errors.append(f"workload {value!r}: give a bundled workload's name or a JSON file")
        return value
    if column == "backend":
        if value not in BACKENDS:
            errors.append(f"backend {value!r}: choose from {', '.join(BACKENDS)}")
        return value
    if column in LAUNCH_AXES:
        lo = 0 if column == "count" else 1
        number = _integer(value, column, lo, (1 << 31) - 1, errors)
        if column == "count" and number is not None:  # the memory estimate --count makes
            from ..pipeline.workload import WorkloadError, check_request_count

            try:
                check_request_count(number, module)
            except WorkloadError as exc:
                errors.append(f"count = {number}: {exc}")
        return number
    types = param_types(module)
    if column not in types:
        return value  # reported once, as an unknown column
    try:
        check_value(value, types[column])
    except _Invalid as exc:
        errors.append(f"{column} = {value!r}: {exc}")
    return value


def _plots(raw, columns: list[str], metrics, errors: list[str]) -> list[Plot]:
    raw = [raw] if isinstance(raw, dict) else raw
    if not isinstance(raw, list):
        errors.append("plot: give [[plot]] tables with x (a swept column) and y (a metric)")
        return []
    plots = []
    for i, p in enumerate(raw):
        where = f"plot {i + 1}"
        if not isinstance(p, dict):
            errors.append(f"{where}: give a table with x and y")
            continue
        for key in p:
            if key not in PLOT_KEYS:
                errors.append(f"{where}: unknown key '{key}' (keys: {', '.join(PLOT_KEYS)})")
        x, y, by = p.get("x"), p.get("y"), p.get("by")
        if x not in columns:
            errors.append(f"{where}: x = {x!r} is not a swept column (columns: {', '.join(columns)})")
        if not isinstance(y, str) or not y:
            errors.append(f"{where}: y must name a metric, e.g. y = \"tokens_per_s\"")
        elif metrics is not None and y not in metrics and y not in ALWAYS:
            errors.append(f"{where}: y = {y!r} is not among the spec's metrics ({', '.join(metrics)})")
        if by is not None:
            by = [by] if isinstance(by, str) else by
            bad = [b for b in by if b not in columns] if isinstance(by, list) else [by]
            if bad:
                errors.append(f"{where}: by = {p.get('by')!r}: name swept columns ({', '.join(columns)})")
        plots.append(Plot(x, y, by, p.get("title")))
    return plots


def _hashable(value):
    return json.dumps(value, sort_keys=True, default=str)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))


# ---- points: what is run, and its key ------------------------------------------------------

def workload_fingerprint(workload) -> str:
    """A hash of what a workload gives a run: its requests, parameters and launch settings."""
    data = {"inputs": workload.inputs, "params": workload.params,
            "launch": [workload.config.max_active, workload.config.max_rounds]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def point_key(spec: Spec, point: Point) -> str:
    """What decides a point's result: the generated code, the workload's requests, the backend,
    the parameters and launch settings, the repeats. Not the timeout, nor which metrics show."""
    workload = spec.workloads[point.axes["workload"]]
    data = {"code": spec.compiled.key, "workload": workload_fingerprint(workload),
            "axes": {k: v for k, v in point.axes.items() if k != "workload"}, "repeats": spec.repeats}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def task_of(spec: Spec, point: Point) -> dict:
    """Everything a worker needs for a point, as plain data (it travels to the worker)."""
    w = spec.workloads[point.axes["workload"]]
    return {"pipeline": str(spec.pipeline.resolve()), "code": spec.compiled.key, "key": point.key,
            "axes": point.axes, "repeats": spec.repeats, "timeout": spec.timeout,
            "workload": {"name": w.name, "inputs": w.inputs, "params": w.params,
                         "max_active": w.config.max_active, "max_rounds": w.config.max_rounds}}


_LOADED: dict = {}  # per worker process: the compiled pipeline of each pipeline path


def _compiled(path: str, code: str):
    from ...backends.build import load

    hit = _LOADED.get(path)
    if hit is None or hit.key != code:
        hit = _LOADED[path] = load(path)
    if hit.key != code:
        raise RuntimeError(f"{path} here is not the pipeline the sweep was started with (generated code "
                           f"{hit.key}, expected {code}): the file changed, or this node has another copy")
    return hit


def run_point(task: dict) -> dict:
    """Run one point (in a Ray worker, or in this process with --serial) and return its row.
    Anything a run raises becomes the row's error: a point never takes the sweep down."""
    started = time.time()
    row = {"key": task["key"], "axes": task["axes"], "status": "ok", "error": "", "metrics": {},
           "host": socket.gethostname(), "pid": os.getpid(), "started": started}
    try:
        row["metrics"] = _measure(task)
        failed = row["metrics"].get("failed_requests", 0)
        if failed:
            row["status"] = "failed"
            row["error"] = row["metrics"].pop("_failure", f"{failed} requests failed")
        row["metrics"].pop("_failure", None)
    except Exception as exc:  # noqa: BLE001 - reported as the point's error, with its kind
        if getattr(exc, "interrupted", False):  # Ctrl-C inside the simulator: stop the sweep, record nothing
            raise KeyboardInterrupt from None
        row["status"] = "failed"
        row["error"] = exc.description if isinstance(exc, _Described) else _describe(exc)
    row["seconds"] = round(time.time() - started, 3)
    return row


def _describe(exc: BaseException) -> str:
    message = getattr(exc, "message", None)  # CompanionError, SimulatorLimit: written for the user already
    if isinstance(message, str) and message:
        return " ".join(message.split())[:500]
    report = getattr(exc, "report", None)  # SimHang, gpu.HangError: the first lines of the hang report
    if report:
        lines = [ln for ln in str(report).splitlines() if ln.strip()]
        return f"{type(exc).__name__}: " + " | ".join(lines[:3])
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:500]}" if text else type(exc).__name__


class _Described(Exception):
    """A point's failure already described (in the child process that ran it)."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


def _measure(task: dict) -> dict:
    """A point's metrics. With a `timeout`, the clock starts before the pipeline's companion
    loads; a CPU-build point (C++ that no signal interrupts) runs in a child process, killed when
    the timeout passes (per repeat: `timeout` x `repeats` in all)."""
    if task["timeout"] and task["axes"]["backend"] == "cpu":
        return _measure_in_child(task, task["timeout"] * task["repeats"])
    return _measure_here(task)


def _measure_in_child(task: dict, limit: float) -> dict:
    import multiprocessing

    from ...runtime import cpu

    cpu.build_library(_compiled(task["pipeline"], task["code"]))  # compiled before the clock starts
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_point, args=(task, send), daemon=True)
    child.start()
    send.close()
    try:
        if receive.poll(limit):
            try:
                kind, value = receive.recv()
            except EOFError:
                child.join(5)
                raise _Described(f"the CPU build's run died (exit code {child.exitcode})") from None
            child.join(5)
            if kind == "ok":
                return value
            raise _Described(value)
        raise _Described(f"Timeout: timeout = {task['timeout']:g} s reached (the CPU build's run, "
                         f"{task['repeats']} repeat{'s' if task['repeats'] > 1 else ''}, was stopped)")
    finally:
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()


def _child_point(task: dict, send) -> None:
    try:
        try:
            send.send(("ok", _measure_here(task)))
        except BaseException as exc:  # noqa: BLE001 - described for the parent
            send.send(("error", _describe(exc)))
        send.close()
    finally:
        os._exit(0)


def _measure_here(task: dict) -> dict:
    from ...runtime.sim import LaunchConfig
    from ..pipeline.companion import load_deadline, of_program
    from ..pipeline.workload import Workload

    with load_deadline(task["timeout"]):  # the timer starts before the companion loads
        compiled = _compiled(task["pipeline"], task["code"])
        module = compiled.sim_module()
        of_program(compiled.program)  # loaded now (then cached): one that loops when imported stops here
    w = task["workload"]
    axes = task["axes"]
    inputs = w["inputs"]
    if axes.get("count") is not None:
        n = axes["count"]
        if n and not inputs:
            raise ValueError(f"count = {n}: the workload has no requests to repeat")
        inputs = [dict(inputs[i % len(inputs)]) for i in range(n)]
    config = LaunchConfig(axes.get("max_active", w["max_active"]), axes.get("max_rounds", w["max_rounds"]))
    from ..pipeline.workload import check_value, param_types

    params = dict(w["params"])
    types = param_types(module)
    params.update({k: check_value(v, types[k]) for k, v in axes.items() if k not in RESERVED_AXES})  # stored form
    workload = Workload(w["name"], inputs, params, config)
    walls, result = [], None
    for _ in range(task["repeats"]):
        t0 = time.perf_counter()
        result = _run_backend(axes["backend"], compiled, module, workload, task["timeout"])
        walls.append(time.perf_counter() - t0)
    return point_metrics(compiled, workload, result, walls)


def _run_backend(backend: str, compiled, module, workload, timeout):
    from ...runtime import cpu, sim

    if backend == "sim":
        return sim.run_stoppable(module, workload.params, workload.inputs, workload.config, timeout)
    if backend == "cpu":
        return cpu.run(compiled, workload.params, workload.inputs, workload.config)
    from ...runtime import gpu

    if not gpu.available():
        raise RuntimeError("the gpu backend needs CuPy and an NVIDIA GPU on the worker (`xlgen doctor` says which CuPy to install)")
    mode = "fast" if backend == "gpu-fast" else "deterministic"
    return gpu.run(compiled, workload.params, workload.inputs, workload.config, mode=mode,
                   timeout=timeout or 120.0)


def point_metrics(compiled, workload, result, walls: list[float]) -> dict:
    """A run's metrics, from the same functions `xlgen bench` reports (xlgen.tools.measure.bench, xlgen.tools.pipeline.metrics):
    counts and timing for every pipeline; output elements and tokens/s with an `output`
    declaration; the declared metrics and the companion's @metrics (docs/language.md)."""
    from .bench import pipeline_metrics, run_metrics
    from ..pipeline.metrics import run_counts

    wall = statistics.median(walls)
    c = run_counts(result)
    out = {"requests": c.requests, "done": c.done, "failed_requests": c.failed + c.unfinished, "rounds": result.rounds}
    declared = pipeline_metrics(compiled, workload, result)
    if "output_elements" in declared:
        out["tokens"] = declared.pop("output_elements")
        out["tokens_per_s"] = out["tokens"] / wall if wall > 0 else 0.0
    out["wall_s"] = wall
    if len(walls) > 1:
        out["wall_s_min"], out["wall_s_max"] = min(walls), max(walls)
    timing = result.extra.get("timing")
    if timing is not None:
        out["gpu_wall_ms"] = timing.wall_ms
        out["kernel_ms"] = timing.kernel_ms
    if "fast" not in result.backend:
        metrics = run_metrics(result, workload.config.max_active)
        out["slot_utilisation"] = metrics.pop("slot_utilisation")
        out.update({k: v for k, v in metrics.items() if k in ("runtime_errors", "watchdog_stops")})
    out.update(declared)
    if out["failed_requests"]:
        out["_failure"] = _failure_text(compiled, result, c)
    return {k: _plain(v) for k, v in out.items()}


def _failure_text(compiled, result, c) -> str:
    from ..check.diff import describe_record

    parts = []
    if c.runtime_errors:
        parts.append(f"{c.runtime_errors} runtime error{'s' if c.runtime_errors > 1 else ''}")
    if c.watchdog:
        parts.append(f"{c.watchdog} stopped by the watchdog (max_rounds)")
    if c.unfinished:
        parts.append(f"{c.unfinished} unfinished")
    text = f"{c.failed + c.unfinished} of {c.requests} requests failed: {', '.join(parts)}"
    errors = result.errors()
    if len(errors):
        text += "; first: " + " ".join(describe_record(compiled.program, errors[0]).split())
    return text


def _plain(value):
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---- results: one line per finished point, and the table ---------------------------------

class ResultStore:
    """RESULTS/results.jsonl: one JSON line per finished point, appended and flushed as each
    arrives (the resume record); the table files are written from it.

    Never written through a symbolic link (xlgen.core.files). A damaged line (cut short when a
    sweep was killed, or edited by hand) is skipped and reported in `problems`, one per line:
    its point runs again. `read_only` (--dry-run) creates and opens nothing."""

    def __init__(self, out_dir: Path, read_only: bool = False):
        from ...core import files

        self.dir = Path(out_dir)
        self.path = self.dir / RESULTS_FILE
        self.rows: dict[str, dict] = {}
        self.problems: list[str] = []
        self._file = None
        if not read_only:
            files.ensure_directory(self.dir)
            if not os.access(self.dir, os.W_OK | os.X_OK):
                raise files.FileProblem(self.dir, f"cannot write results into '{self.dir}': permission denied (the "
                                                  "directory is not writable); fix its permissions or choose "
                                                  "another directory with -o")
        files.refuse_link(self.path)
        text = ""
        if self.path.exists():
            text = files.read_source_bytes_any(self.path).decode("utf-8", errors="replace")
            for n, line in enumerate(text.splitlines(), 1):
                problem = self._take(line)
                if problem:
                    self.problems.append(f"{self.path}:{n}: {problem}; skipped (its point runs again)")
        if not read_only:
            self._file = files.open_for_append(self.path)
            if text and not text.endswith("\n"):  # a line cut short: the next row starts on a line of its own
                self._file.write("\n")
                self._file.flush()

    def _take(self, line: str) -> str | None:
        """Take one line of results.jsonl; what is wrong with it, or None."""
        if not line.strip():
            return None
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            return f"not a JSON object ({getattr(exc, 'msg', 'nested too deep')})"
        if not isinstance(row, dict):
            return f"a JSON {type(row).__name__}, not an object"
        if not isinstance(row.get("key"), str) or not row["key"]:
            return "no 'key'"
        if row.get("status") not in ("ok", "failed"):
            return f"'status' is {row.get('status')!r}, not 'ok' or 'failed'"
        if not isinstance(row.get("metrics", {}), dict) or not isinstance(row.get("axes", {}), dict):
            return "'metrics' and 'axes' must be objects"
        if not isinstance(row.get("error", ""), str):
            row["error"] = str(row["error"])
        self.rows[row["key"]] = row
        return None

    def add(self, row: dict) -> None:
        self.rows[row["key"]] = row
        self._file.write(json.dumps(row, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def finished(self, key: str, retry_failed: bool) -> bool:
        row = self.rows.get(key)
        return row is not None and (row["status"] == "ok" or not retry_failed)


def table_rows(spec: Spec, store: ResultStore) -> tuple[list[str], list[dict]]:
    """The table: one row per point of the spec that has a result, in the spec's order."""
    metric_names: list[str] = []
    if spec.metrics is not None:
        metric_names = list(ALWAYS) + [m for m in spec.metrics if m not in ALWAYS]
    else:
        for p in spec.points:
            row = store.rows.get(p.key)
            for m in (row or {}).get("metrics", {}):
                if m not in metric_names:
                    metric_names.append(m)
    header = ["point", "status"] + spec.columns + metric_names + ["error", "key"]
    rows = []
    for p in spec.points:
        row = store.rows.get(p.key)
        if row is None:
            continue
        out = {"point": p.index, "status": row["status"]}
        out.update({c: p.axes.get(c, "") for c in spec.columns})
        out.update({m: row.get("metrics", {}).get(m, "") for m in metric_names})
        out["error"] = row.get("error", "")
        out["key"] = p.key
        rows.append(out)
    return header, rows


def write_tables(spec: Spec, store: ResultStore) -> list[Path]:
    from ...core.files import write_atomically, write_with

    header, rows = table_rows(spec, store)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    written = [store.dir / "results.csv", store.dir / "results.md"]
    write_atomically(written[0], buf.getvalue())
    write_atomically(written[1], markdown(header, rows) + "\n")
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        return written
    columns = {h: [_parquet_value(r[h]) for r in rows] for h in header}
    write_with(store.dir / "results.parquet", lambda tmp: pq.write_table(pyarrow.table(columns), tmp))
    return written + [store.dir / "results.parquet"]


def _parquet_value(value):
    return None if value == "" else (str(value) if isinstance(value, (list, dict)) else value)


def markdown(header: list[str], rows: list[dict]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r[h]) for h in header) + " |")
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def write_plots(spec: Spec, store: ResultStore) -> list[Path]:
    """One PNG per [[plot]]: y against x, a line per policy (the `by` columns; by default every
    other swept column that varies); points sharing a line and an x are averaged; failed points
    are left out."""
    if not spec.plots:
        return []
    from ...core.files import write_with
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    varying = spec.varying
    for plot in spec.plots:
        by = plot.by if plot.by is not None else [c for c in varying if c != plot.x]
        lines: dict[tuple, dict] = {}
        for p in spec.points:
            row = store.rows.get(p.key)
            if row is None or row["status"] != "ok":
                continue
            y = row.get("metrics", {}).get(plot.y)
            if not isinstance(y, (int, float)) or isinstance(y, bool):
                continue
            label = tuple((c, p.axes.get(c)) for c in by)
            lines.setdefault(label, {}).setdefault(p.axes.get(plot.x), []).append(float(y))
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        xs_all = sorted({x for line in lines.values() for x in line}, key=_sort_key)
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
        for label, points in sorted(lines.items(), key=lambda kv: [_sort_key(v) for _c, v in kv[0]]):
            xs = sorted(points, key=_sort_key)
            pos = xs if numeric else [xs_all.index(x) for x in xs]
            ax.plot(pos, [statistics.fmean(points[x]) for x in xs], "o-",
                    label=", ".join(f"{c}={'default' if v is None else v}" for c, v in label) or plot.y)
        if not numeric:
            ax.set_xticks(range(len(xs_all)), [str(x) for x in xs_all])
        ax.set_xlabel(plot.x)
        ax.set_ylabel(plot.y)
        ax.set_title(plot.title or f"{spec.name}: {plot.y} vs {plot.x}", fontsize=9)
        if len(lines) > 1 or by:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = store.dir / plot.file_name
        try:
            write_with(path, lambda tmp: fig.savefig(tmp, dpi=110))  # never through a link
        finally:
            plt.close(fig)
        written.append(path)
    return written


def _sort_key(value):
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


# ---- running a sweep -----------------------------------------------------------------------

@dataclass
class SweepOutcome:
    total: int  # points in the spec
    skipped: int  # finished in an earlier run
    ran: int  # run now and recorded
    failed: int  # of all the spec's points with a result: status "failed"
    lost: int  # tasks whose worker died (not recorded: the next run redoes them)
    ok: int = 0  # of all the spec's points with a result: status "ok"
    interrupted: bool = False
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # damaged lines of results.jsonl (skipped)


def run_sweep(spec: Spec, out_dir: Path, address: str | None = None, cpus: int | None = None,
              serial: bool = False, retry_failed: bool = False, on_result=None, on_start=None) -> SweepOutcome:
    """Run every point of `spec` that out_dir has no result for; `on_result(row, point)` is called
    as each arrives (row["lost"] is set for a task whose worker died). Ctrl-C stops the sweep,
    keeping what finished: the same command resumes it."""
    from ...core.files import check_target, ensure_directory

    ensure_directory(Path(out_dir))
    for name in ["results.csv", "results.md", "results.parquet"] + [plot.file_name for plot in spec.plots]:
        check_target(Path(out_dir) / name)  # before any point runs: every file written after them can be
    store = ResultStore(out_dir)
    todo = [p for p in spec.points if not store.finished(p.key, retry_failed)]
    outcome = SweepOutcome(total=len(spec.points), skipped=len(spec.points) - len(todo), ran=0, failed=0, lost=0,
                           problems=list(store.problems))
    t0 = time.time()
    last_write = 0.0

    def arrived(row: dict, point: Point) -> None:
        nonlocal last_write
        if row.get("lost"):
            outcome.lost += 1
        else:
            store.add(row)
            outcome.ran += 1
        if on_result is not None:
            on_result(row, point)
        if time.time() - last_write > 2.0:  # the table follows the results as they stream in
            write_tables(spec, store)
            last_write = time.time()

    if on_start is not None:
        on_start(outcome, todo)
    try:
        if todo and serial:
            for point in todo:
                arrived(run_point(task_of(spec, point)), point)
        elif todo:
            _run_on_ray(spec, todo, arrived, address, cpus)
    except KeyboardInterrupt:
        outcome.interrupted = True
    finally:
        status = [store.rows.get(p.key, {}).get("status") for p in spec.points]
        outcome.ok, outcome.failed = status.count("ok"), status.count("failed")
        outcome.seconds = time.time() - t0
        store.close()
        outcome.files = write_tables(spec, store) + write_plots(spec, store)
    return outcome


def start_ray(address: str | None = None, cpus: int | None = None, gpus: int | None = None):
    """Join the Ray cluster at `address`, or start a local one (this machine's cores, or `cpus`)."""
    import logging

    ray = require_ray()
    if ray.is_initialized():
        return ray
    kwargs = {"logging_level": logging.WARNING, "log_to_driver": True, "include_dashboard": False}
    if address:
        kwargs.pop("include_dashboard")
        _probe(address)  # ray.init waits for ever on an address nobody answers
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:  # noqa: BLE001 - Ray's many ways of not connecting
            raise RayStartError(f"cannot join the Ray cluster at --address {address}: {_first_line(exc)}; check "
                                "the address (ray status on the head node shows it)") from None
    else:
        kwargs["num_cpus"] = cpus or os.cpu_count()
        if gpus is not None:
            kwargs["num_gpus"] = gpus
        try:
            ray.init(**kwargs)
        except Exception as exc:  # noqa: BLE001 - e.g. its processes cannot start under `ulimit -v`
            raise RayStartError(f"cannot start a local Ray: {_first_line(exc)}; under a memory limit (ulimit -v) "
                                "Ray's processes may not start: raise the limit, or run the sweep with --serial "
                                "(no Ray)") from None
    return ray


RAY_CONNECT_SECONDS = 10.0  # how long --address may take to answer


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0][:300] if lines else type(exc).__name__)


def _probe(address: str) -> None:
    """A TCP connection to a HOST:PORT (or ray://HOST:PORT) address within RAY_CONNECT_SECONDS, so that
    an unreachable cluster is a one-line error, not a wait without end ('auto' is Ray's to find)."""
    text = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        if address != "auto":
            raise RayStartError(f"--address {address}: give HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:10001 "
                                "or auto")
        return
    try:
        number = int(port)
    except ValueError:
        raise RayStartError(f"--address {address}: the port {port!r} is not a number; give HOST:PORT") from None
    try:
        with socket.create_connection((host.strip("[]"), number), timeout=RAY_CONNECT_SECONDS) as conn:
            answer = _http2_settings(conn)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RayStartError(f"cannot reach the Ray cluster at --address {address} ({why}); start it "
                            "(ray start --head) or check the address") from None
    if not answer:  # Ray's GCS (and its client server) speak gRPC: HTTP/2, which answers with SETTINGS
        raise RayStartError(f"--address {address} answers, but not as a Ray cluster (no gRPC there); give the "
                            "head node's GCS port (6379 by default; ray://HOST:10001 for Ray Client)")


def _http2_settings(conn: socket.socket) -> bool:
    """Whether the server on `conn` answers the HTTP/2 connection preface with a SETTINGS frame."""
    conn.settimeout(RAY_CONNECT_SECONDS)
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    head = b""
    try:
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:  # a timeout, a reset
        return False
    return len(head) == 9 and head[3] == 0x04


def _run_on_ray(spec: Spec, todo: list[Point], arrived, address: str | None, cpus: int | None) -> None:
    ray = start_ray(address, cpus)
    remote = ray.remote(run_point)
    if not address and any(p.axes["backend"] == "cpu" for p in todo):
        from ...runtime import cpu

        cpu.build_library(spec.compiled)  # once, here, rather than by every worker at once
    pending = {}
    for point in todo:
        gpu = point.axes["backend"].startswith("gpu")
        options = {"num_gpus": 1, "num_cpus": 1} if gpu else {"num_cpus": 1}
        pending[remote.options(**options).remote(task_of(spec, point))] = point
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=min(len(pending), 16), timeout=0.5)
            for ref in done:
                point = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the worker died (killed, out of memory) past Ray's retries
                    row = {"key": point.key, "axes": point.axes, "status": "failed", "lost": True,
                           "error": f"worker lost: {_describe(exc)}", "metrics": {}}
                arrived(row, point)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def describe_point(point: Point, columns: list[str]) -> str:
    return " ".join(f"{c}={point.axes[c]}" for c in columns if c in point.axes)


def default_out_dir(spec: Spec) -> Path:
    return Path(f"sweep-{_slug(spec.name)}")

