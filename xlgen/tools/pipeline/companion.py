"""A pipeline's Python companion: what a pipeline needs beyond the language.

A pipeline names its companion module with `companion "FILE.py"` (a path relative
to the .xl file that declares it). The tools (`xlgen sim`, `diff`, `bench`, `demo`)
load it and call what it registers with the decorators below; the compiler never
looks at it, and nothing in xlgen names any particular pipeline's fields.

    from xlgen.companion import demo, invariant, metrics, plot, reference, report

    @invariant                        # after every round of the simulator: the whole batch
    def budget_kept(state):
        if state.shared.used > state.params["budget"]:
            return f"{state.shared.used} tokens in use, budget {state.params['budget']}"

    @invariant(each="request")        # after every round, for every active request
    def within_limit(request, state):
        if request.produced > request.limit:
            return f"produced {request.produced} > limit {request.limit}"

    @invariant(at="end")              # once, after a run, on every backend's final state
    def all_served(run): ...

    @metrics                          # extra metrics of a run: {name: number}
    def budget_use(run): return {"peak_in_use": ...}

    @reference                        # the output a request must produce (`output` declaration)
    def expected(request, params): return [...]

    @report("budget")                 # `xlgen sim --report budget`: text
    def budget_report(run): return "..."

    @plot("budget")                   # `xlgen sim --plot budget=PATH`: writes PATH
    def budget_plot(run, path): ...

    @demo                             # `xlgen demo PIPELINE [--arg workload=small]`
    def show(demo, workload: str = "mixed"): return demo.standard(workload)  # True: all agreed

An invariant returns None (or an empty list) when it holds, else a message or a
list of messages. `state` (in the simulator, after a round's phase 2, before
retirement) has `round`, `requests` (every request, by id; fields as attributes),
`shared` (fields as attributes), `active` (ids of the requests in the batch),
`params` (launch parameters by name) and `program`. `run` (after a run) has
`requests` (a numpy structured array: `run.requests["produced"]`), `shared` (its one
row), `params`, `program`, `result` (the RunResult), `backend`, `workload` and
`series(stage, field)` (a traced field per request: {id: (rounds, values)}).
`@reference`'s `request` is a request's final state (`request["seed"]`).
`report` and `plot` take `check=FUNCTION`: called with (program, params) before the
run, it returns None or why the report cannot be made (a usage error, nothing runs);
during the run a report may raise `Unavailable(why)`. `@demo`'s `demo` is an
xlgen.tools.demo.Demo (source, out_dir, use_gpu, echo, build(), output_directory(),
standard(workload)); the demo's parameters after it are its arguments; it raises
`Unavailable(why)` when it cannot run as asked (a usage error). At most one `@demo`.

A companion may keep code in other modules of its folder and import them relatively
(`from . import helpers`): it is loaded as a module of a package whose path is its
folder alone, so those imports stay in the folder. `Companion.beside(name)` gives a
script or a test the same module objects.

A companion that fails to import, or a function of it that raises, is reported as
`FILE:LINE: ...` (the line in the companion), never as a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("invariant", "metrics", "reference", "report", "plot", "demo")
_EACH = ("round", "request")
_AT = ("round", "end")


class CompanionError(Exception):
    """A companion that cannot be loaded, or one of its functions that raised: `message` says
    where (the companion's file and line) and what."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Unavailable(Exception):
    """Raised by a report or plot that has nothing to show for this run; the message says why."""


@dataclass(frozen=True)
class Hook:
    kind: str  # one of KINDS
    name: str
    fn: object
    options: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        code = getattr(self.fn, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code else "?"


def _mark(kind: str, fn, name: str | None = None, **options):
    if not callable(fn):
        raise TypeError(f"@{kind} decorates a function, not {type(fn).__name__}")
    hooks = list(getattr(fn, "__xlgen_hooks__", ()))
    hooks.append((kind, name or fn.__name__, options))
    fn.__xlgen_hooks__ = tuple(hooks)
    return fn


def invariant(fn=None, *, each: str = "round", at: str = "round", name: str | None = None):
    """Register an invariant: `@invariant`, `@invariant(each="request")` or `@invariant(at="end")`."""
    if each not in _EACH:
        raise ValueError(f"@invariant(each={each!r}): give 'round' or 'request'")
    if at not in _AT:
        raise ValueError(f"@invariant(at={at!r}): give 'round' or 'end'")
    if at == "end" and each != "round":
        raise ValueError("@invariant(at='end') takes the whole run (no each='request')")
    if fn is None:
        return lambda f: _mark("invariant", f, name, each=each, at=at)
    return _mark("invariant", fn, name, each=each, at=at)


def metrics(fn=None, *, name: str | None = None):
    """Register a function of a run returning {metric name: number} (empty when it has none)."""
    if fn is None:
        return lambda f: _mark("metrics", f, name)
    return _mark("metrics", fn, name)


def reference(fn=None, *, name: str | None = None):
    """Register the reference decoder: (request's final state, params) -> the expected output."""
    if fn is None:
        return lambda f: _mark("reference", f, name)
    return _mark("reference", fn, name)


def report(name: str, *, check=None):
    """Register a text report of a run, shown by `--report NAME`."""
    if not isinstance(name, str) or not name:
        raise TypeError("@report needs a name: @report(\"kv\")")
    return lambda f: _mark("report", f, name, check=check)


def plot(name: str, *, check=None):
    """Register a plot of a run, written by `--plot NAME=PATH` (and by `xlgen demo`)."""
    if not isinstance(name, str) or not name:
        raise TypeError("@plot needs a name: @plot(\"kv\")")
    return lambda f: _mark("plot", f, name, check=check)


def demo(fn=None, *, name: str | None = None):
    """Register the pipeline's demo, run by `xlgen demo PIPELINE`: fn(demo, **arguments) returns
    True when everything it checked agreed. Its parameters after the first, each with a default,
    are its arguments (`--arg NAME=VALUE`, converted to the default's type)."""
    if fn is None:
        return lambda f: _mark("demo", f, name)
    return _mark("demo", fn, name)


# ---- what the hooks are given -----------------------------------------------------------

@dataclass
class RoundState:
    """The simulator's state after a round's phase 2 (read only)."""
    round: int
    requests: list  # every request by id: generated Request objects, fields as attributes
    shared: object
    active: list[int]
    params: dict
    program: object


@dataclass
class Run:
    """A finished run, as the tools see it."""
    program: object
    result: object  # xlgen.runtime.sim.RunResult
    params: dict
    workload: str = ""

    @property
    def requests(self):
        return self.result.requests

    @property
    def shared(self):
        return self.result.shared[0]

    @property
    def backend(self) -> str:
        return self.result.backend

    def series(self, stage: str, field_name: str) -> dict:
        """{request id: (rounds, values)} of `field_name` each time `stage` ran (its trace)."""
        from .metrics import trace_series

        return trace_series(self.program, self.result, stage, field_name)


def params_by_name(module, overrides=None) -> dict:
    """Launch parameters by .xl name: the declared defaults with `overrides` (a workload's params)."""
    from ...backends.names import py
    from ...runtime.sim import make_params

    p = overrides if isinstance(overrides, module.Params) else make_params(module, overrides)
    return {name: getattr(p, py(name)) for name in module.Params.TYPES}


# ---- loading -------------------------------------------------------------------------------

class Companion:
    """A loaded companion module and the hooks it registered."""

    def __init__(self, path: Path, module):
        self.path = path
        self.module = module
        self.hooks: list[Hook] = []
        seen = set()
        for value in list(vars(module).values()):
            for kind, name, options in getattr(value, "__xlgen_hooks__", ()):
                if (kind, name, id(value)) not in seen:
                    seen.add((kind, name, id(value)))
                    self.hooks.append(Hook(kind, name, value, dict(options)))
        for kind in ("report", "plot"):
            names = [h.name for h in self.of(kind)]
            for dup in {n for n in names if names.count(n) > 1}:
                raise CompanionError(f"{path}: two {kind}s are named '{dup}'")
        for kind in ("reference", "demo"):
            if len(self.of(kind)) > 1:
                raise CompanionError(f"{path}: more than one @{kind} ({', '.join(h.name for h in self.of(kind))})")

    def beside(self, name: str):
        """The module `name` of the companion's folder, as the companion's `from . import name`
        gets it (one module object per loaded companion)."""
        return importlib.import_module(f"{self.module.__package__}.{name}")

    def of(self, kind: str) -> list[Hook]:
        return [h for h in self.hooks if h.kind == kind]

    def named(self, kind: str, name: str) -> Hook | None:
        return next((h for h in self.of(kind) if h.name == name), None)

    def invariants(self, each: str | None = None, at: str = "round") -> list[Hook]:
        return [h for h in self.of("invariant") if h.options["at"] == at and (each is None or h.options["each"] == each)]

    def call(self, hook: Hook, *args):
        """Call a hook; anything it raises becomes a CompanionError naming the companion's line."""
        try:
            return hook.fn(*args)
        except (Unavailable, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - a user's code: report it, whatever it is
            if type(exc).__name__ == "_Deadline":  # the simulator's --timeout: not the hook's fault
                raise
            raise CompanionError(f"{_line_in(exc, self.path, hook.where)}: {hook.kind} '{hook.name}' raised "
                                 f"{type(exc).__name__}: {exc}") from None


def _line_in(exc: BaseException, path: Path, fallback: str) -> str:
    """`FILE:LINE` of the deepest frame of the traceback that is in `path`."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == os.path.realpath(path):
            found = f"{_shown(path)}:{frame.lineno}"
    if found is None and isinstance(exc, SyntaxError) and exc.lineno:
        found = f"{_shown(Path(exc.filename or path))}:{exc.lineno}"
    return found or fallback


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


class _LoadDeadline(BaseException):
    """The load deadline passed while a companion was loading (load_deadline, deadline_for_command)."""


@functools.lru_cache(maxsize=32)
def _load_cached(path: str, digest: str) -> Companion:
    # A package of the companion's folder (and nothing else): `from . import helpers` in the
    # companion finds helpers.py beside it, and `..` cannot leave the folder.
    package_name = f"xlgen_companion_{Path(path).stem}_{digest}"
    package = types.ModuleType(package_name, f"the folder of the companion {path}")
    package.__path__ = [os.path.dirname(path)]
    package.__package__ = package_name
    mod_name = f"{package_name}.{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise CompanionError(f"{_shown(Path(path))}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[package_name] = package
    sys.modules[mod_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the companion's own code
        for loaded in [m for m in sys.modules if m == package_name or m.startswith(package_name + ".")]:
            del sys.modules[loaded]
        if isinstance(exc, (KeyboardInterrupt, _LoadDeadline)):
            raise
        raise CompanionError(f"{_line_in(exc, Path(path), _shown(Path(path)))}: the companion module failed to "
                             f"load: {type(exc).__name__}: {exc}") from None
    return Companion(Path(path), module)


_DEADLINE: list = [None]  # (time.monotonic() by which a companion must have loaded, the seconds) or None
_ANNOUNCED: set = set()
_LOADED: set = set()  # (path, digest) of the companions _load_cached holds
_CLICK_KEY = "xlgen_companion_deadline"


@contextlib.contextmanager
def load_deadline(seconds: float | None):
    """Within the block, a companion must finish loading within `seconds` from now (a sweep's
    `timeout`): a module that loops when imported is stopped with a CompanionError."""
    import time

    saved = _DEADLINE[0]
    _DEADLINE[0] = None if not seconds else (time.monotonic() + seconds, seconds)
    try:
        yield
    finally:
        _DEADLINE[0] = saved


def deadline_for_command(seconds: float | None) -> None:
    """The same for the rest of the current click command (`--timeout`, whose timer starts
    before the companion loads)."""
    import time

    import click

    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_CLICK_KEY] = None if not seconds else (time.monotonic() + seconds, seconds)


def _first_time(path: str) -> bool:
    """Whether this command (the click command running, else this process) loads `path` for the first time."""
    try:
        import click

        ctx = click.get_current_context(silent=True)
    except ImportError:
        ctx = None
    seen = ctx.find_root().meta.setdefault("xlgen_companions_announced", set()) if ctx is not None else _ANNOUNCED
    if path in seen:
        return False
    seen.add(path)
    return True


def _current_deadline():
    try:
        import click

        ctx = click.get_current_context(silent=True)
    except ImportError:
        ctx = None
    if ctx is not None and ctx.meta.get(_CLICK_KEY) is not None:
        return ctx.meta[_CLICK_KEY]
    return _DEADLINE[0]


def load(path: str | Path) -> Companion:
    """Load a companion module by path (once per content of the file), saying so on stderr the
    first time: loading it runs its Python (docs/language.md, "The companion's trust model")."""
    p = os.path.realpath(path)
    try:
        data = Path(p).read_bytes()
    except OSError as exc:
        raise CompanionError(f"{_shown(Path(path))}: cannot read the companion module: {exc.strerror}") from None
    digest = hashlib.sha256(p.encode() + b"\0" + data).hexdigest()[:16]
    if _first_time(p):
        sys.stderr.write(f"xlgen: running the pipeline's companion {_shown(Path(p))} (its Python code)\n")
        sys.stderr.flush()
    if (p, digest) in _LOADED:  # cached: nothing runs
        return _load_cached(p, digest)
    companion = _within_deadline(lambda: _load_cached(p, digest), p)
    _LOADED.add((p, digest))
    return companion


def _within_deadline(load_it, path: str):
    """load_it() stopped (SIGALRM, main thread) when the load deadline passes."""
    import signal
    import threading
    import time

    limit = _current_deadline()
    if limit is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        return load_it()
    if signal.getitimer(signal.ITIMER_REAL)[0] > 0:  # inside another timer (the simulator's): that one governs
        return load_it()
    deadline, seconds = limit

    def expire(signum, frame):
        raise _LoadDeadline()

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.001))
        return load_it()
    except _LoadDeadline:
        raise CompanionError(f"{_shown(Path(path))}: the companion module did not finish loading within the "
                             f"timeout ({seconds:g} s); does it loop or wait when imported? Fix it, or raise "
                             "--timeout") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def of_program(program) -> Companion | None:
    """The companion a program declares (`companion "FILE.py"`), loaded; None when it declares none."""
    path = program.tooling.companion
    return load(path) if path else None


def no_companion_reason(program, kind: str, name: str) -> str | None:
    """Why `program` has no `kind` (report, plot) called `name`, or None when it has one."""
    companion = of_program(program)
    if companion is None:
        return (f"pipeline {program.name} has no companion module, so no {kind} '{name}' "
                f"(declare one with `companion \"FILE.py\"`; docs/language.md)")
    if companion.named(kind, name) is None:
        have = ", ".join(h.name for h in companion.of(kind)) or "none"
        return f"pipeline {program.name}'s companion {_shown(companion.path)} has no {kind} '{name}' (its {kind}s: {have})"
    return None


# ---- invariants ----------------------------------------------------------------------------

@dataclass
class Violation:
    invariant: str
    message: str
    round: int | None = None  # None: after the run
    request: int | None = None
    backend: str | None = None

    def __str__(self) -> str:
        if self.round is None:
            where = f"after the run ({self.backend})" if self.backend else "after the run"
        else:
            where = f"round {self.round}" + (f", request {self.request}" if self.request is not None else "")
        return f"{where}: invariant '{self.invariant}' violated: {self.message}"


def _messages(value) -> list[str]:
    if value is None or value is True:
        return []
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value if v]


class InvariantChecker:
    """Checks a companion's invariants: `observer` after every simulator round (pass it to
    `sim.run(..., observer=...)`), `after_run` on a finished run. Violations are collected,
    up to `limit` (the rest are counted)."""

    def __init__(self, companion: Companion, program, params: dict, limit: int = 20):
        self.companion = companion
        self.program = program
        self.params = params
        self.limit = limit
        self.violations: list[Violation] = []
        self.count = 0
        self.rounds_checked = 0
        self._round = companion.invariants("round")
        self._request = companion.invariants("request")
        self._end = companion.invariants(at="end")

    @property
    def per_round(self) -> bool:
        return bool(self._round or self._request)

    def _add(self, v: Violation) -> None:
        self.count += 1
        if len(self.violations) < self.limit:
            self.violations.append(v)

    def observer(self, rnd, reqs, sh, active) -> None:
        self.rounds_checked += 1
        state = RoundState(rnd, reqs, sh, list(active), self.params, self.program)
        for hook in self._round:
            for msg in _messages(self.companion.call(hook, state)):
                self._add(Violation(hook.name, msg, rnd))
        for hook in self._request:
            for req_id in active:
                for msg in _messages(self.companion.call(hook, reqs[req_id], state)):
                    self._add(Violation(hook.name, msg, rnd, req_id))

    def after_run(self, run: Run) -> None:
        for hook in self._end:
            for msg in _messages(self.companion.call(hook, run)):
                self._add(Violation(hook.name, msg, backend=run.backend))

    def render(self) -> str:
        lines = [f"invariants: {self.count} violation{'s' if self.count != 1 else ''}"]
        lines += [f"  {v}" for v in self.violations]
        if self.count > len(self.violations):
            lines.append(f"  ... and {self.count - len(self.violations)} more")
        return "\n".join(lines)


# ---- the reference decoder -----------------------------------------------------------------

def check_reference(companion: Companion, run: Run, limit: int = 5) -> tuple[int, list[str]]:
    """Compare every finished request's output (the `output` declaration) with the companion's
    @reference: (requests checked, up to `limit` mismatches, each naming request and position)."""
    import numpy as np

    from .metrics import finished_requests

    hook = companion.of("reference")[0]
    out = run.program.tooling.output
    reqs = run.requests
    problems: list[str] = []
    checked = 0
    for i in finished_requests(run.result):
        row = reqs[i]
        got = [int(x) for x in np.asarray(row[out.field])[: max(int(row[out.count]), 0)]]
        want = [int(x) for x in companion.call(hook, row, run.params)]
        checked += 1
        if got != want:
            k = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            at = (f"at position {k}: {got[k]} where the reference has {want[k]}" if k < min(len(got), len(want))
                  else f"in length: {len(got)} elements where the reference has {len(want)}")
            problems.append(f"request {i}: {out.field}[:{out.count}] differs from the reference "
                            f"'{hook.name}' {at}")
            if len(problems) >= limit:
                break
    return checked, problems
