"""scripts/real_bench.py's parts that need no GPU: options, launch groups, rows, the markdown
table, the request-mode environment, and a whole run on the CPU build of the stand-in pipeline
(tests/real_pair/fake_byte_spec.xl) with a reference made for it. The GPU run is the lead's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xlgen.tools import real_pair as rp

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "real_pair" / "fake_byte_spec.xl"


def _load():
    spec = importlib.util.spec_from_file_location("real_bench", ROOT / "scripts" / "real_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_bench"] = module
    spec.loader.exec_module(module)
    return module


rb = _load()


def test_groups_and_counts():
    assert rb.groups([1, 2, 3], 1) == [[1], [2], [3]]
    assert rb.groups([1, 2, 3], 2) == [[1, 2], [3]]
    assert rb.groups([1, 2, 3], 8) == [[1, 2, 3]]
    assert rb.equal_count([[1], [2], [3]], [[1], [0], [3]]) == "2/3"
    assert rb.best_and_median([3.0, 1.0, 2.0]) == (1.0, 2.0)


def test_row_rates_json_and_table():
    plain = rb.Row("mega plain", 1, 8, 8, 1024, 500.0, 600.0, team_warps=1, verify_steps=1024, tokens_per_step=1.0,
                   equal_plain="8/8", equal_pytorch="8/8")
    spec = rb.Row("mega ASBS", 1, 8, 8, 1024, 250.0, 260.0, team_warps=1, verify_steps=400, tokens_per_step=2.56,
                  acceptance=float("nan"), equal_plain="7/8")
    assert plain.tokens_per_s == 2048.0 and plain.all_equal and not spec.all_equal
    d = spec.to_json()
    assert d["tokens_per_s"] == 4096.0 and d["acceptance"] is None and json.dumps(d)
    table = rb.markdown([plain, spec], "title")
    lines = table.splitlines()
    assert lines[0] == "title" and lines[2].startswith("| variant | batch |")
    assert "| mega ASBS | 1 | 1 | - | 8 | 1024 | 250.00 | 260.00 | 4,096 | 2.00 | 400 | 2.56 | - | 7/8 | - |" in table
    assert "mega ASBS" in rb.line(spec) and "= plain: 7/8" in rb.line(spec)


def test_options(capsys):
    a = rb.parse_args(["-o", "x"])
    assert (a.n, a.repeats, a.batches, a.blocks, a.team_warps, a.request_in_shared, a.backend) == \
        (128, 5, [1, 8], [1, 2, 4, 8], None, None, "gpu")
    a = rb.parse_args(["-o", "x", "--team-warps", "1,4", "--request-in-shared", "0,1", "--torch-modes", "graph_kv"])
    assert a.team_warps == [1, 4] and a.request_in_shared == ["0", "1"] and a.torch_modes == ["graph_kv"]
    for bad in (["--request-in-shared", "3"], ["--batches", "0"], ["--blocks", "x"], ["--torch-modes", "graph"],
                ["--n", "0"]):
        with pytest.raises(SystemExit):
            rb.parse_args(["-o", "x", *bad])


def test_request_mode_replaces_only_its_option(monkeypatch):
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", "-DXL_ROUND_BARRIERS=2 -DXL_REQUEST_IN_SHARED=2")
    rb.set_request_mode("0")
    import os

    assert os.environ["XLGEN_NVRTC_OPTIONS"] == "-DXL_ROUND_BARRIERS=2 -DXL_REQUEST_IN_SHARED=0"
    rb.set_request_mode(None)
    assert os.environ["XLGEN_NVRTC_OPTIONS"] == "-DXL_ROUND_BARRIERS=2"


def test_variants():
    names = [v for v, _ in rb.mega_variants(rp.load_binding(), [2, 8])]
    assert names == ["mega plain", "mega ASBS", "mega B=2", "mega B=8"]
    assert dict(rb.mega_variants(rp.load_binding(), [2]))["mega B=2"] == {"eos_token": -1, "pool_pages": 512, "speculate": True,
                                                                          "fixed_block": 2}


def test_whole_run_on_the_cpu_build_of_the_stand_in(tmp_path):
    prompts = rp.select_prompts(rp.load_prompts(), "code_class,random_0,prose_verse")
    n = 6
    rows = [{"name": p.name, "tokens": [(p.data[k % len(p.data)] + 1) % 256 for k in range(n)], "min_margin": 1.0,
             "margins": [1.0] * n} for p in prompts]
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"models": {"target": rows}}))
    out = tmp_path / "out"
    code = rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", str(n), "--repeats", "1",
                    "--prompts", "code_class,random_0,prose_verse", "--batches", "1,2", "--blocks", "2",
                    "--no-torch", "--reference", str(ref)])
    assert code == 0
    report = json.loads((out / "real_bench.json").read_text())
    assert report["all_equal_plain"] and report["pytorch_agrees"] and report["n_new"] == n
    got = [(r["variant"], r["batch"], r["launches"], r["new_tokens"], r["equal_plain"]) for r in report["rows"]]
    assert got == [("mega plain", 1, 3, 18, "3/3"), ("mega ASBS", 1, 3, 18, "3/3"), ("mega B=2", 1, 3, 18, "3/3"),
                   ("mega plain", 2, 2, 18, "3/3"), ("mega ASBS", 2, 2, 18, "3/3"), ("mega B=2", 2, 2, 18, "3/3")]
    plain = report["rows"][0]
    assert plain["equal_pytorch"] == "3/3" and plain["verify_steps"] == 18 and plain["tokens_per_s"] > 0
    assert report["rows"][2]["acceptance"] is not None and report["timed"].startswith("What is timed")
    assert "| mega B=2 | 2 |" in (out / "real_bench.md").read_text()
    # the stand-in's answers are not PyTorch's: plain greedy disagrees, exit 1
    assert rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", "4", "--repeats", "1",
                    "--prompts", "random_1", "--batches", "1", "--blocks", "1", "--no-torch"]) == 1
    assert not json.loads((out / "real_bench.json").read_text())["pytorch_agrees"]


def test_help_and_bad_prompt():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "real_bench.py"), "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "python3 scripts/real_bench.py" in out.stdout and "What is timed" in out.stdout
    assert rb.main(["-o", "/nonexistent/x", "--prompts", "nope", "--backend", "cpu", "--no-torch"]) == 2
