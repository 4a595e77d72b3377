"""Running generated cases: `generate(seed)`, the hypothesis strategy `programs()`, and
`run_case` (the simulator against each backend, trace for trace)."""

from __future__ import annotations
from .base import Generator
from .model import FuzzCase


def generate(seed: int, launches: int = 3, nasty_names: bool = True) -> FuzzCase:
    """The program and launches of one seed."""
    g = Generator(seed, nasty_names=nasty_names)
    source = g.program()
    return FuzzCase(seed, source, [g.launch() for _ in range(launches)])


def programs(launches: int = 3, nasty_names: bool = True):
    """A hypothesis strategy of FuzzCases, drawn (and shrunk) by seed."""
    from hypothesis import strategies as st

    return st.integers(min_value=0, max_value=2 ** 32 - 1).map(
        lambda seed: generate(seed, launches=launches, nasty_names=nasty_names))


def backends() -> list[str]:
    """The backends to compare with the simulator: the CPU build, and the GPU where one is usable."""
    out = ["cpu"]
    try:
        from ....runtime import gpu
    except ImportError:
        return out
    try:
        if gpu.available():
            out.append("gpu")
    except Exception:  # a broken CUDA install is "no GPU" here; tests/test_gpu.py reports it
        pass
    return out


def run_backend(backend: str, compiled, params, inputs, cfg):
    """Run a compiled pipeline on one backend ("sim", "cpu" or "gpu"; the GPU in deterministic mode)."""
    import importlib

    if backend == "sim":
        from ....runtime import sim

        return sim.run(compiled.sim_module(), params, inputs, cfg)
    runner = importlib.import_module(f"xlgen.runtime.{backend}")
    if backend == "gpu":
        return runner.run(compiled, params, inputs, cfg, mode="deterministic")
    return runner.run(compiled, params, inputs, cfg)


def run_case(case: FuzzCase, backends=("cpu",), compiled=None):
    """Compile a case (unless given `compiled`) and run every launch on the simulator and each backend.

    Returns a list of (launch, backend, divergence text) for every mismatch.
    """
    from ....backends.build import load_text
    from ..diff import compare
    from ....runtime import sim

    if compiled is None:
        compiled = load_text(case.source, name="fuzz.xl")
    module = compiled.sim_module()
    problems = []
    for launch in case.launches:
        cfg = sim.LaunchConfig(max_active=launch.max_active, max_rounds=launch.max_rounds)
        expected = sim.run(module, launch.params, launch.inputs, cfg)
        for backend in backends:
            got = run_backend(backend, compiled, launch.params, launch.inputs, cfg)
            d = compare(compiled.program, expected, got)
            if d is not None:
                problems.append((launch, backend, d.render()))
    return problems
