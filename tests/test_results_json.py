"""`--json FILE` on sim, diff, run and bench: the xlgen.result/1 document (docs/results_json.md).

sim and diff run here on the CPU; run and bench write through the same writer
(xlgen.tools.measure.results), and the GPU-marked tests at the end cover them on a GPU.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen import __version__
from xlgen.cli import main
from xlgen.runtime import gpu
from xlgen.tools.measure import results

REPO = Path(__file__).resolve().parent.parent

PIPELINE = """\
pipeline jsonish

param zero: f32 = 0.0

enum Kind { A, B }

request {
    kind: Kind = A
    n: i32
    x: f32
    nan_value: f32
    big: f32
    arr: i32[4]
    out: i32[4]
    n_out: i32
    bad: i32
}

stage step when n < 3 {
    n += 1
    x = x + 0.1
    nan_value = zero / zero
    big = 1.0 / zero
    out[n_out] = n * 10
    n_out += 1
    arr[bad] = 1
}

trace step: n, x

output out[n_out]

metric mean_x = mean(x)
metric x_by_kind[kind] = mean(x)

done when n >= 3
"""

WORKLOAD = {"requests": [{"kind": "A"}, {"kind": "B"}, {"kind": "B", "bad": 9}], "launch": {"max_active": 2}}


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "j.xl").write_text(PIPELINE)
    (tmp_path / "w.json").write_text(json.dumps(WORKLOAD))
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _reference_run():
    """The same run through the Python API: what the document must hold, exactly."""
    from xlgen.build import load
    from xlgen.runtime import sim
    from xlgen.tools.pipeline.metrics import collect_metrics
    from xlgen.tools.pipeline.workload import load as load_workload

    compiled = load("j.xl")
    module = compiled.sim_module()
    workload = load_workload(Path("w.json"), module)
    result = sim.run(module, workload.params, workload.inputs, workload.config)
    return compiled, result, collect_metrics(compiled.program, result, workload.config.max_active)


def test_sim_json_holds_every_result_at_full_precision(work):
    result = invoke("sim", "j.xl", "-w", "w.json", "--json", "out.json")
    assert result.exit_code == 4  # request 2 fails: the document still comes, with the exit status
    text = (work / "out.json").read_text()
    doc = json.loads(text)
    assert doc["schema"] == "xlgen.result/1" == results.SCHEMA
    assert doc["xlgen_version"] == __version__
    assert doc["command"] == "sim" and doc["argv"][-2:] == ["--json", "out.json"]
    assert doc["exit_status"] == 4 and doc["outcome"] == "requests_failed"
    assert doc["pipeline"]["name"] == "jsonish"
    assert doc["workload"] == {"name": "w", "requests": 3, "max_active": 2, "max_rounds": 100000,
                               "params": {"zero": 0.0}}
    [run] = doc["runs"]
    assert run["backend"] == "sim" and run["rounds"] == 4
    assert run["counts"] == {"requests": 3, "done": 2, "failed": 1, "runtime_errors": 1, "watchdog": 0,
                             "unfinished": 0}
    assert run["records"] == {"trace": 6, "done": 2, "error": 1, "trace_by_stage": {"step": 6}}
    assert run["slot_utilisation"] == {"busy_request_rounds": 7, "capacity": 2, "rounds": 4, "fraction": 0.875}

    compiled, reference, metrics = _reference_run()
    assert run["metrics"].keys() == {str(k) for k in metrics}
    for name, value in metrics.items():  # the same doubles, not 4 significant digits
        assert run["metrics"][name] == value, name
    assert run["metrics"]["mean_x"] != round(run["metrics"]["mean_x"], 4)
    for i, entry in enumerate(run["requests"]):
        assert entry["id"] == i
        assert entry["fields"]["x"] == float(reference.requests["x"][i])  # f32 widened exactly
        assert entry["fields"]["kind"] == ("A" if i == 0 else "B")  # enum members by name
        assert entry["fields"]["nan_value"] == "NaN" and entry["fields"]["big"] == "Infinity"
        assert "arr" not in entry["fields"]  # arrays: only the declared output
    assert [e["status"] for e in run["requests"]] == ["done", "done", "error"]
    assert run["requests"][0]["output"] == [10, 20, 30] and run["requests"][2]["output"] == [10]
    assert run["requests"][0]["error"] is None and run["requests"][0]["ended_round"] == 2
    assert run["requests"][2]["error"] == {
        "message": "request 2 round 3: runtime error in stage step (line 26): index 9 out of range for 'arr' (length 4)",
        "code": 2, "name": "index out of range", "line": 26, "file": "j.xl", "stage": "step",
        "subject": {"kind": "request", "name": "arr"}, "position": 0, "value": 9, "bound": 4}
    assert "NaN" not in re.sub(r'"NaN"', "", text) and "Infinity" not in re.sub(r'"-?Infinity"', "", text)
    assert results.load(work / "out.json") == doc


def test_diff_json_holds_every_backend_and_the_comparison(work):
    result = invoke("diff", "j.xl", "-w", "w.json", "--backend", "cpu", "--json", "d.json")
    assert result.exit_code == 4, result.output
    doc = json.loads((work / "d.json").read_text())
    assert doc["command"] == "diff" and doc["exit_status"] == 4
    assert [r["backend"] for r in doc["runs"]] == ["sim", "cpu"]
    assert doc["comparisons"] == [{"reference": "sim", "backend": "cpu", "compared": "traces and state",
                                   "identical": True, "divergence": None}]
    assert doc["checks"] == {"invariants": None, "reference": True}  # no companion: no invariants to check
    sim_run, cpu_run = doc["runs"]
    assert sim_run["requests"] == cpu_run["requests"] and sim_run["metrics"] == cpu_run["metrics"]


def test_the_bundled_pipeline_by_name_with_its_companion(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("diff", "xl_spec", "-w", "small", "--backend", "cpu", "--json", "d.json")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["outcome"] == "ok" and doc["checks"] == {"invariants": True, "reference": True}
    assert doc["runs"][0]["records"]["trace_by_stage"] == {"prefill": 7, "spec_verify": 94, "commit": 94,
                                                           "kv_manage": 101}
    assert doc["runs"][0]["metrics"]["output_elements"] == 191


def test_a_stopped_simulator_writes_exit_status_3_and_where_it_stopped(work):
    (work / "spin.xl").write_text(PIPELINE.replace("    n += 1\n", "    for i in 0..1048576 {\n"
                                                   "        for j in 0..1048576 {\n            x = x + 1.0\n"
                                                   "        }\n    }\n    n += 1\n", 1))
    result = CliRunner().invoke(main, ["sim", "spin.xl", "--timeout", "0.3", "--json", "t.json"])
    assert result.exit_code == 3
    doc = json.loads((work / "t.json").read_text())
    assert doc["exit_status"] == 3 and doc["outcome"] == "stopped" and doc["runs"] == []
    assert "--timeout 0.3 s reached" in doc["stopped"]


def test_a_compile_error_is_recorded(work):
    (work / "bad.xl").write_text(PIPELINE.replace("n += 1", "n += nowhere"))
    result = CliRunner().invoke(main, ["diff", "bad.xl", "--json", "c.json"])
    assert result.exit_code == 1
    doc = json.loads((work / "c.json").read_text())
    assert doc["exit_status"] == 1 and doc["outcome"] == "error" and doc["runs"] == []
    assert "unknown name 'nowhere'" in doc["error"] and "bad.xl:" in doc["error"]


def test_a_usage_error_writes_nothing(work):
    result = CliRunner().invoke(main, ["sim", "j.xl", "--show", "nofield", "--json", "u.json"])
    assert result.exit_code == 2
    assert not (work / "u.json").exists()


def test_never_through_a_symbolic_link_and_atomically(work):
    victim = work / "victim.json"
    victim.write_text("the user's file\n")
    os.symlink(victim, work / "link.json")
    result = CliRunner().invoke(main, ["sim", "j.xl", "--json", "link.json"])
    assert result.exit_code == 2 and "symbolic link" in result.output
    assert victim.read_text() == "the user's file\n"
    target = work / "old.json"
    target.write_text("{}")
    os.chmod(target, 0o640)
    assert invoke("sim", "j.xl", "--json", "old.json").exit_code == 0
    assert json.loads(target.read_text())["exit_status"] == 0
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o640)  # the file it replaced keeps its mode
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_the_writer_round_trips_every_double():
    values = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, float(np.float32(0.1)), -0.0, 2 ** 53 + 1.0]
    doc = results.finish(results.new_document("sim", None, argv=[]), 0)
    doc["runs"] = [{"metrics": {f"m{i}": v for i, v in enumerate(values)}, "special": [math.nan, math.inf,
                                                                                      -math.inf]}]
    back = json.loads(results.dumps(doc))
    for i, v in enumerate(values):
        got = back["runs"][0]["metrics"][f"m{i}"]
        assert got == v and math.copysign(1, got) == math.copysign(1, v)
    assert back["runs"][0]["special"] == ["NaN", "Infinity", "-Infinity"]
    assert back["argv"] == [] and back["outcome"] == "ok"


def test_the_schema_is_documented():
    """Every key the writer produces is in docs/results_json.md, and the README links it."""
    doc = (REPO / "docs" / "results_json.md").read_text()
    assert "xlgen.result/1" in doc
    keys = {"schema", "xlgen_version", "command", "argv", "source", "exit_status", "outcome", "pipeline",
            "workload", "runs", "comparisons", "checks", "stopped", "error", "bench", "backend", "rounds", "counts",
            "records", "trace_by_stage", "slot_utilisation", "metrics", "timing", "requests", "status",
            "ended_round", "error", "fields", "output", "identical", "divergence", "max_active", "params"}
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing, f"docs/results_json.md does not describe {missing}"
    assert "docs/results_json.md" in (REPO / "README.md").read_text()


# ---- on a GPU: run and bench -------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (xlgen doctor)")
@pytest.mark.parametrize("mode", ["deterministic", "fast"])
def test_run_json(work, mode):
    result = invoke("run", "j.xl", "-w", "w.json", "--mode", mode, "--json", "r.json")
    assert result.exit_code == 4, result.output
    doc = json.loads((work / "r.json").read_text())
    assert doc["command"] == "run" and doc["exit_status"] == 4
    [run] = doc["runs"]
    assert run["backend"].startswith("gpu") and "kernel_ms" in run["timing"]
    assert [e["status"] for e in run["requests"]] == ["done", "done", "error"]
    if mode == "deterministic":  # the same results as the simulator, exactly
        invoke("sim", "j.xl", "-w", "w.json", "--json", "s.json")
        sim_doc = json.loads((work / "s.json").read_text())
        assert run["requests"] == sim_doc["runs"][0]["requests"]
        assert run["records"] == sim_doc["runs"][0]["records"]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (xlgen doctor)")
def test_bench_json(work):
    result = invoke("bench", "xl_spec", "-w", "small", "--repeats", "1", "--json", "b.json")
    assert result.exit_code == 0, result.output
    doc = json.loads((work / "b.json").read_text())
    assert doc["command"] == "bench" and doc["outcome"] == "ok"
    assert [v["variant"] for v in doc["bench"]["variants"]] == ["mega-deterministic", "mega-fast", "host-loop",
                                                                "graph"]
    assert all(c["identical"] for c in doc["comparisons"])
    assert doc["runs"][0]["metrics"]["output_elements"] == 191
