"""docs/workloads.md: its example loads, and it names every key and distribution the loader knows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from xlgen.backends.build import load
from xlgen.tools.pipeline.workload import WorkloadError, from_dict

DOC = (Path(__file__).resolve().parent.parent / "docs" / "workloads.md").read_text()


@pytest.fixture(scope="module")
def module():
    return load("stages/xl_spec.xl").sim_module()


def test_the_example_loads(module):
    data = json.loads(re.search(r"```json\n(.*?)```", DOC, re.S).group(1))
    w = from_dict(data, module)
    assert len(w.inputs) == 1 + data["generate"]["count"]
    assert w.inputs[0]["profile"] == module.Profile.BURSTY and w.inputs[0]["req_flags"] == module.ReqFlag.KV_PRESSURE
    assert [r["seed"] for r in w.inputs[1:4]] == [1000, 1001, 1002]
    assert w.config.max_active == 32 and w.params == {"vocab": 50, "eos_token": 7}
    assert from_dict(data, module).inputs == w.inputs  # seeded: the same requests every time


def test_every_key_and_distribution_is_documented(module):
    with pytest.raises(WorkloadError) as info:
        from_dict({"nope": 1}, module)
    keys = re.search(r"\(expected (.*)\)", str(info.value)).group(1).split(", ")
    for key in keys:
        assert f"| `{key}` |" in DOC, key
    with pytest.raises(WorkloadError) as info:
        from_dict({"generate": {"count": 1, "fields": {"seed": {"nope": 1}}}}, module)
    kinds = re.search(r"\((.*)\)", str(info.value)).group(1).split(", ")
    for kind in kinds:
        assert f'`{{"{kind}": ' in DOC, kind
