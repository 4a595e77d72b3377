"""The README's example program stays valid, canonically formatted, and agrees across backends."""

import re
from pathlib import Path

from xlgen.backends.build import load_text
from xlgen.frontend.parser import parse_text
from xlgen.frontend.printer import format_module
from xlgen.runtime import cpu, sim
from xlgen.tools.check.diff import compare

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> str:
    return re.search(r"## A taste of the language\n\n```\n(.*?)```", README.read_text(), re.S).group(1)


def _collective_example() -> str:
    return re.search(r"gives the same tickets:.*?```\n(.*?)```", README.read_text(), re.S).group(1)


def test_readme_example_is_canonical_and_runs_identically():
    text = _example()
    assert format_module(parse_text(text, "tally.xl")) == text
    compiled = load_text(text, "tally.xl")
    config = sim.LaunchConfig(max_active=3)
    inputs = [{} for _ in range(6)]
    a = sim.run(compiled.sim_module(), {}, inputs, config)
    b = cpu.run(compiled, {}, inputs, config)
    assert compare(compiled.program, a, b) is None
    assert sorted(a.requests["ticket"].tolist()) == list(range(6))  # the arbiter granted one ticket each


def test_readme_collective_example_gives_the_arbiters_tickets():
    """The collective version hands out the tickets the serial arbiter does, on every backend."""
    text = _collective_example()
    assert format_module(parse_text(text, "tally_all_at_once.xl")) == text
    serial, parallel = load_text(_example(), "tally.xl"), load_text(text, "tally_all_at_once.xl")
    config = sim.LaunchConfig(max_active=3)
    inputs = [{} for _ in range(8)]
    a = sim.run(serial.sim_module(), {}, inputs, config)
    b = sim.run(parallel.sim_module(), {}, inputs, config)
    assert compare(parallel.program, b, cpu.run(parallel, {}, inputs, config)) is None
    assert b.requests["ticket"].tolist() == a.requests["ticket"].tolist() == list(range(8))
    assert int(b.shared["granted"][0]) == int(a.shared["granted"][0]) == 8


def _model_math_example() -> str:
    return re.search(r"A greedy LM head:\n\n```\n(.*?)```", README.read_text(), re.S).group(1)


def test_readme_model_math_example_is_exact_on_every_backend():
    import numpy as np

    text = _model_math_example()
    assert format_module(parse_text(text, "greedy_head.xl")) == text
    compiled = load_text(text, "greedy_head.xl")
    rng = np.random.default_rng(7)
    params = {"lm_head": rng.standard_normal((256, 64)).astype(np.float32)}
    inputs = [{"hidden": [float(x) for x in rng.standard_normal(64).astype(np.float32)]} for _ in range(3)]
    a = sim.run(compiled.sim_module(), params, inputs)
    b = cpu.run(compiled, params, inputs)
    assert compare(compiled.program, a, b) is None
    for r in a.requests:
        assert r["token"] == int(np.argmax(r["logits"]))  # the greedy token of the logits it computed
