"""Honest reports on the GPU (issue 16): the mega-kernel's records give the simulator's
counts and slot utilisation, `xlgen bench` reports them, and exit codes hold there too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.backends.build import load
from xlgen.cli import main
from xlgen.tools.pipeline.metrics import run_counts, slot_utilisation
from xlgen.runtime import sim
from xlgen.tools.pipeline.workload import from_dict, load as load_workload, resolve

gpu = pytest.importorskip("xlgen.runtime.gpu")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')"),
]

REPO = Path(__file__).resolve().parent.parent
PIPE = REPO / "tests" / "cli_inputs" / "inputs.xl"
FAILING = {"launch": {"max_active": 2, "max_rounds": 20},
           "requests": [{}, {"divisor": 0}, {"forever": True}, {"bound": 5}, {"bound": 1}]}


def test_gpu_counts_and_utilisation_equal_the_simulators():
    compiled = load(PIPE)
    module = compiled.sim_module()
    w = from_dict(FAILING, module)
    expected = sim.run(module, w.params, w.inputs, w.config)
    got = gpu.run(compiled, w.params, w.inputs, w.config)
    assert run_counts(got) == run_counts(expected)
    assert slot_utilisation(got, 2) == slot_utilisation(expected, 2)
    assert slot_utilisation(got, 2).busy == 29


def test_bench_reports_utilisation_and_failures():
    from xlgen.tools.measure.bench import run_bench

    compiled = load("stages/xl_spec.xl")
    module = compiled.sim_module()
    w = load_workload(resolve("small"), module)
    report = run_bench(compiled, w, repeats=1)
    reference = sim.run(module, w.params, w.inputs, w.config)
    u = slot_utilisation(reference, w.config.max_active)
    assert report.metrics["slot_utilisation"] == u.fraction and report.metrics["busy_request_rounds"] == u.busy
    assert report.metrics["failed_requests"] == 0 and report.metrics["done_records"] == 7
    assert "slot_utilisation: " in report.table()


def test_run_exits_4_when_a_request_fails(tmp_path):
    path = tmp_path / "failing.json"
    path.write_text(json.dumps(FAILING))
    result = CliRunner().invoke(main, ["run", str(PIPE), "-w", str(path)])
    assert result.exit_code == 4, result.output
    assert "gpu-deterministic: 5 requests, 3 done, 2 failed (1 runtime error, 1 stopped by the watchdog)" in result.output
    assert "slot utilisation 72.5% (29 busy request-rounds of 2 slots x 20 rounds)" in result.output
