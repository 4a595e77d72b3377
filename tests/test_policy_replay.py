"""scripts/policy_replay.py: a policy's launch replayed on the CPU build, its time modelled from a
calibration (no GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import policy_replay  # noqa: E402

COSTS = {"costs": {"1": {"0": 100.0, "1": 150.0, "2": 200.0, "4": 300.0, "8": 500.0}}, "catchup": {"1": 2.0},
         "accept": {"1": 0.9}}


def test_a_replay_models_each_round_at_its_blocks_cost(tmp_path):
    cal = tmp_path / "costs.json"
    cal.write_text(json.dumps(COSTS))
    out = tmp_path / "out"
    assert policy_replay.main([str(cal), "--batch", "1", "--prompts", "2", "--n", "4", "--policies", "plain,B=2,cost",
                               "-o", str(out)]) == 0
    rows = {r["variant"]: r for r in json.loads((out / "policy_replay.json").read_text())["rows"]}
    plain, fixed, cost = rows["plain"], rows["B=2"], rows["cost"]
    assert plain["tokens"] == fixed["tokens"] == cost["tokens"] == 8
    # plain greedy: no draft, every round at cost_b0 (the rounds without a verify too)
    assert plain["draft_rows"] == 0 and set(plain["blocks"]) == {"0"}
    assert plain["model_us"] == pytest.approx(100.0 * plain["rounds"])
    # a fixed block drafts (the prompts first) and verifies blocks of at most 2; its time counts both
    assert fixed["draft_rows"] > 0 and set(fixed["blocks"]) <= {"1", "2"}
    assert fixed["model_us"] > fixed["draft_rows"] * 2.0
    # four tokens cannot repay the draft's catch-up over the prompt: the cost policy stays plain
    assert cost["blocks"] == plain["blocks"] and cost["draft_rows"] == 0


def test_bad_arguments_are_named(tmp_path):
    cal = tmp_path / "costs.json"
    cal.write_text(json.dumps(COSTS))
    with pytest.raises(SystemExit, match="no costs for batch 8"):
        policy_replay.main([str(cal), "--batch", "8"])
    with pytest.raises(SystemExit, match="variant 'B=0'"):
        policy_replay.main([str(cal), "--batch", "1", "--policies", "B=0", "--prompts", "1", "--n", "1"])
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        policy_replay.main([str(cal), "--batch", "1", "--param", "oops", "--prompts", "1", "--n", "1"])
