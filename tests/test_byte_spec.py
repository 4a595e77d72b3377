"""The real model pair in the pipeline (stages/byte_spec.xl, issue 14).

- Plain greedy decoding of the target in the language reproduces PyTorch's greedy tokens
  (models/bytes_pair/reference_tokens.json, recorded with torch ops) on the bundled prompts.
- Speculative decoding (ASBS, and fixed block sizes) commits exactly the plain greedy tokens,
  at every batch size, also when the KV pool is so small that pages are evicted and recomputed.
- The simulator and the CPU build agree bit for bit on every trace (and the GPU, on a GPU).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from xlgen.backends.build import load
from xlgen.runtime import cpu, sim
from xlgen.runtime.sim import LaunchConfig
from xlgen.tools.diff import compare

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "stages" / "byte_spec.xl"
MODELS = ROOT / "models" / "bytes_pair"
N_NEW = 32
# One prompt of each kind: boilerplate code, prose, random bytes.
PROMPTS = ("code_class", "prose_play", "random_0")


@lru_cache(maxsize=1)
def compiled():
    return load(PIPELINE)


@lru_cache(maxsize=1)
def weights() -> dict:
    from safetensors.numpy import load_file

    return dict(load_file(str(MODELS / "pair.safetensors")))


def prompt_bytes(name: str) -> bytes:
    for prompt in json.loads((MODELS / "prompts.json").read_text())["prompts"]:
        if prompt["name"] == name:
            return bytes.fromhex(prompt["hex"]) if "hex" in prompt else prompt["text"].encode()
    raise KeyError(name)


def reference(name: str) -> dict:
    for entry in json.loads((MODELS / "reference_tokens.json").read_text())["models"]["target"]:
        if entry["name"] == name:
            return entry
    raise KeyError(name)


def request(name: str, n_new: int = N_NEW) -> dict:
    data = prompt_bytes(name)
    seq = np.zeros(512, dtype=np.int32)
    seq[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return {"seq": seq, "prompt_len": len(data), "max_new_tokens": n_new}


def answers(result) -> list[list[int]]:
    reqs = result.requests
    return [list(map(int, reqs["out_tokens"][i][: reqs["n_out"][i]])) for i in range(len(reqs))]


def run_sim(names, params=None, max_active=8):
    module = compiled().sim_module()
    inputs = [request(name) for name in names]
    return sim.run(module, {**weights(), **(params or {})}, inputs, LaunchConfig(max_active=max_active))


@lru_cache(maxsize=None)
def plain(name: str) -> tuple[int, ...]:
    result = run_sim([name], {"speculate": False}, max_active=1)
    assert (result.requests["n_out"] == N_NEW).all()
    return tuple(answers(result)[0])


@pytest.mark.parametrize("name", PROMPTS)
def test_plain_greedy_equals_pytorch(name):
    ref = reference(name)
    assert list(plain(name)) == ref["tokens"][:N_NEW]


@pytest.mark.parametrize("policy", [{}, {"fixed_block": 1}, {"fixed_block": 4}, {"fixed_block": 8}],
                         ids=["asbs", "B1", "B4", "B8"])
@pytest.mark.parametrize("max_active", [1, 3])
def test_speculative_equals_plain_greedy(policy, max_active):
    result = run_sim(PROMPTS, policy, max_active=max_active)
    assert answers(result) == [list(plain(name)) for name in PROMPTS]
    reqs = result.requests
    assert (reqs["total_proposed"] > 0).all()


def test_eviction_recomputes_rows_and_keeps_the_answer():
    # A pool too small for three requests: the younger ones lose committed pages
    # and recompute their rows, and every answer is still plain greedy's.
    result = run_sim(PROMPTS, {"pool_pages": 24}, max_active=3)
    assert answers(result) == [list(plain(name)) for name in PROMPTS]
    reqs = result.requests
    assert reqs["recomputed_rows"].sum() > 0
    assert reqs["kv_misses"].sum() > 0


def test_cpu_build_agrees_with_the_simulator():
    module = compiled().sim_module()
    inputs = [request(name) for name in PROMPTS]
    params = {**weights(), "pool_pages": 24}
    config = LaunchConfig(max_active=2)
    reference_run = sim.run(module, params, inputs, config)
    cpu_run = cpu.run(compiled(), params, inputs, config)
    mismatch = compare(compiled().program, reference_run, cpu_run)
    assert mismatch is None, mismatch
