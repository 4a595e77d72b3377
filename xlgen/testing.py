"""Diff-test your own pipeline in your own test suite.

    # test_my_pipeline.py
    from xlgen.testing import assert_backends_agree

    def test_backends_agree():
        assert_backends_agree("my_pipeline.xl", workload="my_requests.json")

or, with the `xl_diff` fixture this module registers as a pytest plugin:

    def test_backends_agree(xl_diff):
        xl_diff("my_pipeline.xl", inputs=[{"seed": 1}, {"seed": 2}], max_active=2)

The simulator is the reference; the CPU build is always compared, and the GPU
(deterministic mode) too when CuPy finds a GPU, unless `backends` says otherwise.
"""

from __future__ import annotations

from pathlib import Path

from .build import load
from .diff import compare
from .runtime import cpu, sim
from .runtime.sim import LaunchConfig, RunResult


class BackendMismatch(AssertionError):
    pass


def default_backends() -> list[str]:
    from .runtime import gpu

    return ["cpu"] + (["gpu"] if gpu.available() else [])


def run_backends(source: str | Path, workload: str | Path | None = None, *, inputs: list[dict] | None = None,
                 params: dict | None = None, max_active: int | None = None, max_rounds: int | None = None,
                 backends: list[str] | None = None) -> dict[str, RunResult]:
    """Run a pipeline on the simulator and the given backends; returns {backend: result}."""
    from .workload import load as load_workload, resolve

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
    results = {"sim": sim.run(module, params, inputs, config)}
    for backend in backends if backends is not None else default_backends():
        if backend == "cpu":
            results[backend] = cpu.run(compiled, params, inputs, config)
        elif backend == "gpu":
            from .runtime import gpu

            results[backend] = gpu.run(compiled, params, inputs, config)
        else:
            raise ValueError(f"unknown backend '{backend}' (cpu, gpu)")
    results["_program"] = compiled.program  # type: ignore[assignment]
    return results


def assert_backends_agree(source: str | Path, workload: str | Path | None = None, **kwargs) -> dict[str, RunResult]:
    """Fail (with the first divergence: request, round, stage, field, values, .xl line) unless
    every backend reproduces the simulator's traces and final state bit for bit."""
    results = run_backends(source, workload, **kwargs)
    program = results.pop("_program")
    reference = results["sim"]
    for name, result in results.items():
        if name == "sim":
            continue
        divergence = compare(program, reference, result)
        if divergence is not None:
            raise BackendMismatch(divergence.render())
    return results


try:  # the fixture, when pytest is present (this module is registered as a pytest11 plugin)
    import pytest

    @pytest.fixture
    def xl_diff():
        """`xl_diff(source, workload=None, **options)`: assert_backends_agree as a fixture."""
        return assert_backends_agree
except ImportError:  # pragma: no cover - pytest is optional at run time
    pass
