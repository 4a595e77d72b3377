"""Output equivalence of the bundled pipeline (design.md section 5): speculative
decoding must not change the output. For every request, the committed tokens
(out_tokens[:n_out]) equal plain greedy decoding with the target alone
(the companion's greedy_tokens, stages/xl_spec_tools.py), at every batch size and block-size policy, in every backend.

The requests cover every acceptance profile, base_acceptance from 0.0 to 1.0,
answers from max_new_tokens <= 0 to beyond MAX_OUT (512), a vocabulary of 50
with a non-zero EOS token (so answers end on EOS) and the full 32000.
"""

from __future__ import annotations

from pathlib import Path

from functools import cache

import numpy as np
import pytest

from xlgen.backends.build import load
from xlgen.runtime import cpu, gpu, sim
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, LaunchConfig
from xlgen.tools.pipeline.workload import from_dict
from xlgen.tools.pipeline.companion import load as load_companion
from xlgen.tools.pipeline.metrics import trace_series

# The bundled pipeline's companion (stages/xl_spec_tools.py), loaded as every tool loads it.
TOOLS = load_companion(Path(__file__).resolve().parent.parent / "stages" / "xl_spec_tools.py").module
MAX_OUT = TOOLS.MAX_OUT
greedy_tokens = TOOLS.greedy_tokens

GPU_MARKS = [pytest.mark.gpu,
             pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")]
BACKENDS = ["sim", "cpu",
            pytest.param("gpu", marks=GPU_MARKS, id="gpu"),
            pytest.param("gpu-fast", marks=GPU_MARKS, id="gpu-fast")]

BATCH_SIZES = [1, 2, 8, 32, 256]
POLICIES = [0, 1, 4, 8]  # fixed_block: 0 is ASBS, > 0 a fixed block size
SMALL_VOCAB = {"vocab": 50, "eos_token": 7}  # EOS about once per 50 tokens
FULL_VOCAB = {"vocab": 32000, "eos_token": 0}  # EOS rare


@pytest.fixture(scope="module")
def compiled():
    return load("stages/xl_spec.xl")


# Answer lengths: mostly short, so the simulator keeps up; the edges of the limit
# (<= 0, 1, MAX_OUT - 1, MAX_OUT, beyond) come in every request set.
EDGE_LENGTHS = [0, -3, 1, 2, MAX_OUT - 1, MAX_OUT, MAX_OUT + 1, 700]


def _requests(module, count: int, seed: int) -> list[dict]:
    generated = from_dict({
        "seed": seed,
        "generate": {"count": count, "fields": {
            "seed": {"counter": 1000 * seed},
            "prompt_len": {"uniform": [1, 300]},
            "max_new_tokens": {"choice": [1, 3, 8, 9, 16, 24, 40, 64, 100]},
            "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
            "base_acceptance": {"choice": [0.0, 0.1, 0.3, 0.5, 0.7, 0.85, 0.95, 1.0]},
        }},
    }, module).inputs
    # The edges, each with a low (one token a step, the longest runs) and a full acceptance.
    edges = [{"seed": 7 * seed + i, "prompt_len": 5 + i, "max_new_tokens": n, "profile": i % 3,
              "base_acceptance": 1.0 if i % 2 else 0.0} for i, n in enumerate(EDGE_LENGTHS)]
    # Seeds at the ends of u32, and a prompt of length 0.
    odd = [{"seed": 0, "prompt_len": 0, "max_new_tokens": 30, "base_acceptance": 0.9},
           {"seed": 0xFFFFFFFF, "prompt_len": 1, "max_new_tokens": 30, "base_acceptance": 0.5, "profile": 2}]
    # Interleave so that edge requests are admitted early, mid-run and late.
    out = list(generated)
    for k, r in enumerate(edges + odd):
        out.insert((k * len(out)) // len(edges + odd), r)
    return out


@cache
def _expected(seed: int, prompt_len: int, max_new_tokens: int, vocab: int, eos_token: int) -> tuple[int, ...]:
    return tuple(greedy_tokens(seed, prompt_len, max_new_tokens, vocab, eos_token))


def _run(backend: str, compiled, params: dict, inputs: list[dict], max_active: int):
    config = LaunchConfig(max_active=max_active, max_rounds=100_000)
    if backend == "sim":
        return sim.run(compiled.sim_module(), params, inputs, config)
    if backend == "cpu":
        return cpu.run(compiled, params, inputs, config)
    mode = "fast" if backend == "gpu-fast" else "deterministic"
    return gpu.run(compiled, params, inputs, config, mode=mode)


def _check_committed_tokens(result, inputs: list[dict], params: dict) -> dict:
    """Every request is done, without error, and committed exactly the greedy tokens."""
    errors = result.records[result.records[:, 2] == KIND_ERROR]
    assert len(errors) == 0, f"runtime errors: {errors[:5]}"
    done = result.records[result.records[:, 2] == KIND_DONE]
    assert sorted(done[:, 0].tolist()) == list(range(len(inputs)))
    stats = {"eos": 0, "limit": 0, "empty": 0, "full": 0}
    for i, req in enumerate(inputs):
        want = _expected(req["seed"], req.get("prompt_len", 32), req["max_new_tokens"],
                         params["vocab"], params["eos_token"])
        n_out = int(result.requests["n_out"][i])
        got = tuple(int(t) for t in result.requests["out_tokens"][i][:n_out])
        if got != want:
            first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            pytest.fail(f"{result.backend}: request {i} ({req}) committed {n_out} tokens, greedy decoding "
                        f"{len(want)}; first difference at token {first}: {got[first:first + 4]} vs {want[first:first + 4]}")
        if not want:
            stats["empty"] += 1
        elif want[-1] == params["eos_token"]:
            stats["eos"] += 1
        else:
            stats["limit"] += 1
        stats["full"] += n_out == MAX_OUT
    return stats


@pytest.mark.parametrize("fixed_block", POLICIES, ids=lambda b: "asbs" if b == 0 else f"fixed{b}")
@pytest.mark.parametrize("max_active", BATCH_SIZES, ids=lambda n: f"batch{n}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_committed_tokens_equal_greedy_decoding(compiled, backend, max_active, fixed_block):
    module = compiled.sim_module()
    # More requests than the batch holds, so continuous batching admits some mid-run.
    count = max(64, max_active + max_active // 4)
    inputs = _requests(module, count, seed=max_active + fixed_block)
    totals = {"eos": 0, "limit": 0, "empty": 0, "full": 0}
    for vocab in (SMALL_VOCAB, FULL_VOCAB):
        params = {**vocab, "fixed_block": fixed_block}
        result = _run(backend, compiled, params, inputs, max_active)
        stats = _check_committed_tokens(result, inputs, params)
        totals = {k: totals[k] + stats[k] for k in totals}
    # The cases the test is meant to cover did occur.
    assert totals["eos"] > 0 and totals["limit"] > 0 and totals["empty"] >= 2 and totals["full"] >= 2, totals


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_largest_fixed_block_fills_draft_tokens(compiled, backend):
    """fixed_block = MAX_BLOCK (128) with full acceptance: commit reads the bonus token
    at target_tokens[128] and never draft_tokens[128]; and blocks beyond it are clamped."""
    inputs = [{"seed": s, "prompt_len": 3, "max_new_tokens": n, "base_acceptance": 1.0}
              for s, n in ((1, 129), (2, 300), (3, 512), (4, 128), (5, 127))]
    for fixed_block in (128, 1000):
        params = {**FULL_VOCAB, "fixed_block": fixed_block}
        result = _run(backend, compiled, params, inputs, max_active=4)
        _check_committed_tokens(result, inputs, params)
        np.testing.assert_array_equal(result.requests["current_block_size"], 128)


def test_greedy_reference_follows_the_pipeline_rules():
    """The reference itself: limit clamped to 0..MAX_OUT, EOS kept and final, positions
    prompt_len + k, the first token following seed % vocab."""
    from xlgen.semantics.builtins import b_target_token

    assert greedy_tokens(5, 10, 0, 32000, 0) == [] == greedy_tokens(5, 10, -1, 32000, 0)
    assert len(greedy_tokens(5, 10, 10_000, 32000, 0)) == MAX_OUT
    assert len(greedy_tokens(5, 10, 10_000, 32000, 0, max_out=20)) == 20
    toks = greedy_tokens(5, 10, 6, 32000, 0)
    assert toks[0] == b_target_token(5, 10, 5 % 32000, 32000)
    assert toks[3] == b_target_token(5, 13, toks[2], 32000)
    # With a vocabulary of 50, EOS comes early: the answer stops right after it.
    for seed in range(20):
        toks = greedy_tokens(seed, 4, 400, 50, 7)
        assert 7 not in toks[:-1]
        assert toks[-1] == 7 or len(toks) == 400


# The cost policy (block_policy = COST): costs with the break-even near an acceptance of 0.75,
# so requests switch between plain steps (B = 0), probes and blocks of 1 to 8.
COST_POLICY = {"block_policy": 1, "cost_b0": 1.0, "cost_b1": 1.75, "cost_b2": 2.4, "cost_b4": 3.3, "cost_b8": 5.0,
               "cost_probe_every": 3}


@pytest.mark.parametrize("max_active", [1, 8, 32], ids=lambda n: f"batch{n}")
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_cost_policy_commits_greedy_tokens(compiled, backend, max_active):
    module = compiled.sim_module()
    inputs = _requests(module, max(64, max_active + max_active // 4), seed=100 + max_active)
    blocks = set()
    for vocab in (SMALL_VOCAB, FULL_VOCAB):
        params = {**vocab, **COST_POLICY}
        result = _run(backend, compiled, params, inputs, max_active)
        _check_committed_tokens(result, inputs, params)
        for _, chosen in trace_series(compiled.program, result, "spec_verify", "current_block_size").values():
            blocks |= set(chosen.tolist())
    assert 0 in blocks and len(blocks) > 2, blocks  # plain steps and blocks of several sizes occurred
