"""Running generated cases: `generate(seed)`, the hypothesis strategy `programs()`, and
`run_case` (the simulator against each backend, trace for trace)."""

from __future__ import annotations
import numpy as np
from .base import Generator
from .model import FuzzCase


def generate(seed: int, launches: int = 3, nasty_names: bool = True, schedule_free: bool = False) -> FuzzCase:
    """The program and launches of one seed (`schedule_free`: per-request stages only and no
    pools, the programs fast mode must reproduce exactly)."""
    g = Generator(seed, nasty_names=nasty_names, schedule_free=schedule_free)
    source = g.program()
    crowd = [g.crowd_launch()] if "\ncollective " in source and launches > 0 else []
    return FuzzCase(seed, source, [g.launch() for _ in range(launches)] + crowd)


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
    """Run a compiled pipeline on one backend: "sim", "cpu", "gpu" (deterministic mode) or
    "gpu-fast" (fast mode)."""
    import importlib

    if backend == "sim":
        from ....runtime import sim

        return sim.run(compiled.sim_module(), params, inputs, cfg)
    if backend in ("gpu", "gpu-fast"):
        from ....runtime import gpu

        return gpu.run(compiled, params, inputs, cfg, mode="fast" if backend == "gpu-fast" else "deterministic")
    return importlib.import_module(f"xlgen.runtime.{backend}").run(compiled, params, inputs, cfg)


def schedule_free(program) -> bool:
    """True when every request's results are independent of the schedule: no arbiter or
    collective stage writes shared state and no pool is shared (docs/semantics.md §15)."""
    return not program.pools and all(stage.kind == "stage" for stage in program.stages)


def fast_mode_problem(program, got) -> str | None:
    """What fast mode must hold whatever the schedule: every request ends with exactly one
    done or error record, its last, and its records run in iteration order."""
    from ....runtime.sim import KIND_DONE, KIND_ERROR

    table = got.records
    for req_id in range(len(got.requests)):
        mine = table[table[:, 0] == req_id]
        ends = np.flatnonzero(np.isin(mine[:, 2], (KIND_DONE, KIND_ERROR)))
        if len(ends) != 1 or ends[0] != len(mine) - 1:
            return f"request {req_id}: {len(ends)} done/error records, {len(mine)} records in all"
        if np.any(np.diff(mine[:, 1].astype(np.int64)) < 0):
            return f"request {req_id}: records out of iteration order"
    return None


def run_case(case: FuzzCase, backends=("cpu",), compiled=None):
    """Compile a case (unless given `compiled`) and run every launch on the simulator and each backend.

    Deterministic backends are compared with `sim.run`, record for record and state for state.
    "gpu-fast" is compared with `sim.run_interleaved` (fast mode's semantics) in full when the
    program is schedule-free, else checked for what holds under every schedule.
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
            if backend == "gpu-fast":
                if schedule_free(compiled.program):
                    d = compare(compiled.program, sim.run_interleaved(module, launch.params, launch.inputs, cfg),
                                got)
                    text = d.render() if d is not None else None
                else:
                    text = fast_mode_problem(compiled.program, got)
            else:
                d = compare(compiled.program, expected, got)
                text = d.render() if d is not None else None
            if text is not None:
                problems.append((launch, backend, text))
    return problems
