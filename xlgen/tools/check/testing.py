"""Diff-test your own pipeline in your own test suite.

    # test_my_pipeline.py
    from xlgen.testing import assert_backends_agree

    def test_backends_agree():
        assert_backends_agree("my_pipeline.xl", workload="my_requests.json")

or, with the `xl_diff` fixture of xlgen's pytest plugin (xlgen.tools.check.pytest_plugin):

    def test_backends_agree(xl_diff):
        xl_diff("my_pipeline.xl", inputs=[{"seed": 1}, {"seed": 2}], max_active=2)

The simulator is the reference; the CPU build is always compared, and the GPU
(deterministic mode) too when CuPy finds a GPU, unless `backends` says otherwise.
When the pipeline declares a companion module, its invariants are checked after
every simulator round and on every backend's final state, and its reference
decoder against the declared output (`check_companion=False` skips both).
"""

from __future__ import annotations

from pathlib import Path

from ...backends.build import load
from .diff import compare
from ...runtime import cpu, sim
from ...runtime.sim import LaunchConfig, RunResult


class BackendMismatch(AssertionError):
    pass


class CompanionCheckFailed(AssertionError):
    """A companion's invariant was violated, or an output differs from its reference."""


def default_backends() -> list[str]:
    from ...runtime import gpu

    return ["cpu"] + (["gpu"] if gpu.available() else [])


def run_backends(source: str | Path, workload: str | Path | None = None, *, inputs: list[dict] | None = None,
                 params: dict | None = None, max_active: int | None = None, max_rounds: int | None = None,
                 backends: list[str] | None = None, check_companion: bool = True) -> dict[str, RunResult]:
    """Run a pipeline on the simulator and the given backends; returns {backend: result}."""
    from ..pipeline.workload import load as load_workload, resolve

    compiled = load(source)
    module = compiled.sim_module()
    config = LaunchConfig()
    if workload is not None:
        w = load_workload(resolve(str(workload)), module)
        inputs = w.inputs if inputs is None else inputs
        params = {**w.params, **(params or {})}
        config = w.config
    if max_active is not None:
        config.max_active = max_active
    if max_rounds is not None:
        config.max_rounds = max_rounds
    inputs = inputs if inputs is not None else [{}]
    checker = None
    if check_companion:
        from ..pipeline.companion import InvariantChecker, of_program, params_by_name

        companion = of_program(compiled.program)
        if companion is not None and (companion.of("invariant") or companion.of("reference")):
            checker = InvariantChecker(companion, compiled.program, params_by_name(module, params))
    observer = checker.observer if checker is not None and checker.per_round else None
    results = {"sim": sim.run(module, params, inputs, config, observer=observer)}
    for backend in backends if backends is not None else default_backends():
        if backend == "cpu":
            results[backend] = cpu.run(compiled, params, inputs, config)
        elif backend == "gpu":
            from ...runtime import gpu

            results[backend] = gpu.run(compiled, params, inputs, config)
        else:
            raise ValueError(f"unknown backend '{backend}' (cpu, gpu)")
    results["_program"] = compiled.program  # type: ignore[assignment]
    results["_checker"] = checker  # type: ignore[assignment]
    return results


def assert_backends_agree(source: str | Path, workload: str | Path | None = None, **kwargs) -> dict[str, RunResult]:
    """Fail (with the first divergence: request, round, stage, field, values, .xl line) unless
    every backend reproduces the simulator's traces and final state bit for bit."""
    results = run_backends(source, workload, **kwargs)
    program = results.pop("_program")
    checker = results.pop("_checker")
    reference = results["sim"]
    for name, result in results.items():
        if name == "sim":
            continue
        divergence = compare(program, reference, result)
        if divergence is not None:
            raise BackendMismatch(divergence.render())
    if checker is not None:
        from ..pipeline.companion import Run, check_reference

        runs = [Run(program, result, checker.params) for result in results.values()]
        for run in runs:
            checker.after_run(run)
        if checker.count:
            raise CompanionCheckFailed(checker.render())
        if checker.companion.of("reference") and program.tooling.output is not None:
            _checked, problems = check_reference(checker.companion, runs[0])
            if problems:
                raise CompanionCheckFailed("output differs from the reference:\n  " + "\n  ".join(problems))
    return results


try:  # installs registered before the plugin moved name this module as the pytest11 plugin
    from .pytest_plugin import xl_diff  # noqa: F401
except ImportError:  # pragma: no cover - pytest is optional at run time
    pass
