"""Differential fuzzing of the compiler (the technique Csmith made standard).

Random well-typed pipelines (xlgen/tools/check/fuzzgen/) run on the simulator and on
every other backend with random inputs, params and launch settings; traces,
done and error records and the final state must agree bit for bit.

    pytest tests/test_fuzz_backends.py                              # XLGEN_FUZZ_EXAMPLES programs (40)
    XLGEN_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz_backends.py     # thousands
    XLGEN_FUZZ_SEED=100000 pytest tests/test_fuzz_backends.py       # other programs

A failure prints the program (with line numbers), the launch and the first
divergence; `python -c "from xlgen.tools.check.fuzzgen import generate; print(generate(SEED).source)"`
reproduces it. Each program costs one C++ compile, so each runs several
launches, and the compiles of the next programs run in the background.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings

from xlgen.core.diagnostics import CompileError
from xlgen.tools.check.fuzzgen import backends, generate, programs, run_case

EXAMPLES = int(os.environ.get("XLGEN_FUZZ_EXAMPLES", "40"))
FIRST_SEED = int(os.environ.get("XLGEN_FUZZ_SEED", "0"))
SEEDS = range(FIRST_SEED, FIRST_SEED + EXAMPLES)
BACKENDS = [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in backends()]


def _compile(case):
    """Check, generate and build the CPU library of a case: (compiled or None, the exception or None)."""
    from xlgen.backends.build import load_text
    from xlgen.runtime import cpu

    try:
        compiled = load_text(case.source, name="fuzz.xl")
        cpu.build_library(compiled)
        return compiled, None
    except Exception as e:  # reported by the test of this case
        return None, e


@pytest.fixture(scope="module")
def builds():
    """Compiles of every seed's program, started in background threads (g++ runs beside the tests)."""
    with tempfile.TemporaryDirectory(prefix="xlgen-fuzz-") as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLGEN_CACHE", tmp)
        workers = max(1, (os.cpu_count() or 2) - 1)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {}

            def get(seed):
                for ahead in range(seed, min(seed + 2 * workers + 1, SEEDS.stop)):
                    if ahead not in futures:  # keep a few compiles ahead of the tests
                        futures[ahead] = pool.submit(_compile, generate(ahead))
                return futures.pop(seed).result() if seed in futures else _compile(generate(seed))

            yield get
            for f in futures.values():
                f.cancel()


def check_case(case, backend: str, compiled=None, error: Exception | None = None) -> None:
    try:
        if error is not None:
            raise error
        problems = run_case(case, backends=[backend], compiled=compiled)
    except CompileError as e:
        pytest.fail(f"the checker rejects a generated program (a generator or checker bug)\n"
                    f"{case.describe()}\n{e.render()}", pytrace=False)
    except Exception:
        pytest.fail(f"running a generated program failed\n{case.describe()}\n{traceback.format_exc()}", pytrace=False)
    if problems:
        launch, _, divergence = problems[0]
        pytest.fail(f"{backend} differs from the simulator\n{case.describe(launch)}\n{divergence}", pytrace=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_backend_agrees_with_simulator(seed, backend, builds):
    compiled, error = builds(seed) if backend == "cpu" else (None, None)
    try:
        check_case(generate(seed), backend, compiled, error)
    finally:
        if compiled is not None:
            shutil.rmtree(compiled.dir, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(case=programs())
def test_backend_agrees_with_simulator_hypothesis(case, backend):
    """Fresh seeds on every run; hypothesis shrinks a failure to its smallest seed."""
    with tempfile.TemporaryDirectory(prefix="xlgen-fuzz-") as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLGEN_CACHE", tmp)
        check_case(case, backend)


def test_generated_programs_are_valid():
    """No C++ compile: the next EXAMPLES seeds (after those the differential test runs) through the checker."""
    from xlgen.frontend.checker import PRELUDE_NAME, check_modules
    from xlgen.frontend.parser import parse_text
    from xlgen.core.resources import runtime_dir

    prelude = (runtime_dir() / "prelude.xl").read_text()
    for seed in range(SEEDS.stop, SEEDS.stop + EXAMPLES):
        case = generate(seed)
        sources = {PRELUDE_NAME: prelude, "fuzz.xl": case.source}
        try:
            check_modules([parse_text(prelude, PRELUDE_NAME), parse_text(case.source, "fuzz.xl")], sources)
        except CompileError as e:
            pytest.fail(f"the checker rejects a generated program\n{case.describe()}\n{e.render()}", pytrace=False)


# Seeds whose programs the checker once rejected (issue 26: a const as the unchanging index of a
# pool written in a lanes loop folded to an out-of-range constant index).
REJECTED_ONCE = (913319, 913385, 913447, 914085, 914208, 930070)


def test_generated_programs_are_valid_on_many_seeds():
    """The seeds once rejected and 250 around them (check only, no compile): every program is valid."""
    from xlgen.frontend.checker import PRELUDE_NAME, check_modules
    from xlgen.frontend.parser import parse_text
    from xlgen.core.resources import runtime_dir

    prelude = (runtime_dir() / "prelude.xl").read_text()
    seeds = sorted(set(REJECTED_ONCE) | set(range(913300, 913450)) | set(range(914080, 914130))
                   | set(range(930050, 930100)))
    rejected = []
    for seed in seeds:
        case = generate(seed)
        sources = {PRELUDE_NAME: prelude, "fuzz.xl": case.source}
        try:
            check_modules([parse_text(prelude, PRELUDE_NAME), parse_text(case.source, "fuzz.xl")], sources)
        except CompileError as e:
            rejected.append(f"seed {seed}: {next(l for l in e.render().splitlines() if 'error' in l)}")
    assert not rejected, "the checker rejects generated programs:\n" + "\n".join(rejected)


def test_generator_is_deterministic():
    assert generate(1234).source == generate(1234).source
    assert generate(1234).launches == generate(1234).launches
    assert generate(1234).source != generate(1235).source


def test_generated_programs_exercise_pools():
    """About half the programs declare pools (docs/semantics.md §13.3), written and read by their
    stages, in lanes loops and reductions too; their launches leave contents in the pools and
    some accesses fail with NOT_OWNER."""
    from xlgen.backends.build import load_text
    from xlgen.core import ir
    from xlgen.runtime import sim
    from xlgen.semantics.ops import ERR_NOT_OWNER

    seen = {"programs": 0, "lanes writes": 0, "reduction reads": 0, "contents": 0, "NOT_OWNER": 0}
    for seed in range(60):
        case = generate(seed)
        if " owned by " not in case.source:
            continue
        seen["programs"] += 1  # every one runs (a few seconds in all)
        with tempfile.TemporaryDirectory(prefix="xlgen-fuzz-") as tmp, pytest.MonkeyPatch.context() as mp:
            mp.setenv("XLGEN_CACHE", tmp)
            compiled = load_text(case.source, name="fuzz.xl")
            for stage in compiled.program.stages:
                for s in ir.statements(stage.body):
                    if isinstance(s, ir.Lanes):
                        seen["lanes writes"] += any(isinstance(x, ir.PoolStore) for x in ir.statements(s.body))
                    if isinstance(s, ir.Reduce):
                        seen["reduction reads"] += "PoolLoad" in repr(s.value)
            for launch in case.launches:
                config = sim.LaunchConfig(max_active=launch.max_active, max_rounds=launch.max_rounds)
                result = sim.run(compiled.sim_module(), launch.params, launch.inputs, config)
                seen["contents"] += any(v.any() for v in result.pools.values())
                seen["NOT_OWNER"] += int((result.errors()[:, 4] == ERR_NOT_OWNER).sum()) if len(result.errors()) else 0
    assert seen["programs"] >= 15 and all(seen.values()), seen


# Fast mode (docs/semantics.md §15): only schedule-independent results can be compared. The
# schedule-free programs (per-request stages, no pools) must come out of fast mode exactly as
# `sim.run_interleaved` runs them; every other program must still end each request once.
FAST_SEEDS = range(FIRST_SEED + 500_000, FIRST_SEED + 500_000 + EXAMPLES)


def test_schedule_free_programs_do_not_depend_on_the_schedule():
    """The claim the fast-mode comparison rests on, checked in the simulator: a schedule-free
    program's records and final state are the same under different worker counts and schedules."""
    from xlgen.backends.build import load_text
    from xlgen.runtime import sim
    from xlgen.tools.check.diff import compare
    from xlgen.tools.check.fuzzgen.run import schedule_free

    for seed in FAST_SEEDS[:12]:
        case = generate(seed, schedule_free=True)
        compiled = load_text(case.source, name="fuzz.xl")
        assert schedule_free(compiled.program), case.describe()
        module = compiled.sim_module()
        for launch in case.launches:
            config = sim.LaunchConfig(max_active=launch.max_active, max_rounds=launch.max_rounds)
            one = sim.run_interleaved(module, launch.params, launch.inputs, config, workers=1, seed=0)
            for workers, order in ((2, 1), (None, 7)):
                other = sim.run_interleaved(module, launch.params, launch.inputs, config, workers=workers, seed=order)
                d = compare(compiled.program, one, other)
                assert d is None, f"{case.describe(launch)}\n{d.render()}"


def test_schedule_free_programs_are_valid():
    from xlgen.frontend.checker import PRELUDE_NAME, check_modules
    from xlgen.frontend.parser import parse_text
    from xlgen.core.resources import runtime_dir

    prelude = (runtime_dir() / "prelude.xl").read_text()
    for seed in FAST_SEEDS:
        case = generate(seed, schedule_free=True)
        assert " owned by " not in case.source and "\narbiter " not in case.source
        try:
            check_modules([parse_text(prelude, PRELUDE_NAME), parse_text(case.source, "fuzz.xl")],
                          {PRELUDE_NAME: prelude, "fuzz.xl": case.source})
        except CompileError as e:
            pytest.fail(f"the checker rejects a generated program\n{case.describe()}\n{e.render()}", pytrace=False)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", FAST_SEEDS)
def test_fast_mode_agrees_with_interleaved_simulator(seed):
    if "gpu" not in backends():
        pytest.skip("no usable GPU")
    with tempfile.TemporaryDirectory(prefix="xlgen-fuzz-") as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLGEN_CACHE", tmp)
        check_case(generate(seed, schedule_free=True), "gpu-fast")
        check_case(generate(seed), "gpu-fast")  # arbiters, collectives, pools: what every schedule holds


def test_programs_with_collectives_get_a_crowd_launch():
    """A program with a collective stage also runs hundreds of requests at once (their
    participants span many warps and blocks); drawn on a stream of its own, it leaves the
    seed's other launches as they were."""
    from xlgen.tools.check.fuzzgen.base import Generator

    crowds = 0
    for seed in range(30):
        case = generate(seed)
        g = Generator(seed)
        assert g.program() == case.source
        alone = [g.launch() for _ in range(3)]  # without the crowd launch drawn first
        assert [(ln.inputs, ln.max_active, ln.max_rounds) for ln in alone] == \
            [(ln.inputs, ln.max_active, ln.max_rounds) for ln in case.launches[:3]]
        if "\ncollective " in case.source:
            crowds += 1
            crowd = case.launches[3]
            assert len(case.launches) == 4 and 150 <= len(crowd.inputs) <= 400 and crowd.max_active >= 64
        else:
            assert len(case.launches) == 3
    assert crowds >= 10
