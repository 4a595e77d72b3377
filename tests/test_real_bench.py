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

from xlgen.companion import load as load_companion

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "real_pair" / "fake_byte_spec.xl"
rp = load_companion(ROOT / "stages" / "byte_spec_tools.py").beside("real_pair")  # the real pair's code


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
    assert (a.policies, a.costs, a.calibrate_only) == (("asbs", "cost", "fixed"), "calibrate", False)
    a = rb.parse_args(["-o", "x", "--backend", "cpu", "--policies", "cost,fixed"])
    assert (a.policies, a.costs) == (("cost", "fixed"), "defaults")
    a = rb.parse_args(["-o", "x", "--team-warps", "1,4", "--request-in-shared", "0,1", "--torch-modes", "graph_kv"])
    assert a.team_warps == [1, 4] and a.request_in_shared == ["0", "1"] and a.torch_modes == ["graph_kv"]
    for bad in (["--request-in-shared", "3"], ["--batches", "0"], ["--blocks", "x"], ["--torch-modes", "graph"],
                ["--n", "0"], ["--policies", "asbs,costs"], ["--calibrate-repeats", "0"]):
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
    assert names == ["mega plain", "mega ASBS", "mega cost", "mega B=2", "mega B=8"]
    assert [v for v, _ in rb.mega_variants(rp.load_binding(), [2], ("cost",))] == ["mega plain", "mega cost"]
    cost = dict(rb.mega_variants(rp.load_binding(), [], ("cost",), {0: 1.0, 1: 2.5, 2: 3.0, 4: 4.0, 8: 6.5}))
    assert cost["mega cost"] == {"eos_token": -1, "pool_pages": 512, "speculate": True, "fixed_block": 0,
                                 "block_policy": "COST", "cost_b0": 1.0, "cost_b1": 2.5, "cost_b2": 3.0,
                                 "cost_b4": 4.0, "cost_b8": 6.5}
    # the calibrated catch-up and acceptance: where a request's estimate of the draft starts
    cost = dict(rb.mega_variants(rp.load_binding(), [], ("cost",), {0: 1.0}, 2.0, 0.64))["mega cost"]
    assert (cost["cost_catchup"], cost["asbs_ema_init"]) == (2.0, 0.64)
    with pytest.raises(rp.RealPairError, match=r"block sizes \[3\]"):
        rb.mega_variants(rp.load_binding(), [], ("cost",), {3: 1.0})
    assert dict(rb.mega_variants(rp.load_binding(), [2]))["mega B=2"] == {"eos_token": -1, "pool_pages": 512, "speculate": True,
                                                                          "fixed_block": 2}


def test_whole_run_on_the_cpu_build_of_the_stand_in(tmp_path):
    n = 6
    ref = _reference(tmp_path, ["code_class", "random_0", "prose_verse"], n)
    out = tmp_path / "out"
    code = rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", str(n), "--repeats", "1",
                    "--prompts", "code_class,random_0,prose_verse", "--batches", "1,2", "--blocks", "2",
                    "--no-torch", "--reference", str(ref)])
    assert code == 0
    report = json.loads((out / "real_bench.json").read_text())
    assert report["all_equal_plain"] and report["pytorch_agrees"] and report["n_new"] == n
    got = [(r["variant"], r["batch"], r["launches"], r["new_tokens"], r["equal_plain"]) for r in report["rows"]]
    assert got == [(v, batch, launches, 18, "3/3") for batch, launches in ((1, 3), (2, 2))
                   for v in ("mega plain", "mega ASBS", "mega cost", "mega B=2")]
    assert report["costs_source"] == "defaults" and report["costs"] == {}
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


LIMIT_LOG = ROOT / "tests" / "real_pair" / "limit_cuda_h100.log"  # calib/real_limit/results_h100/cuda.log


def test_limit_log_parses_every_results_row():
    parsed = rb.parse_limit_log(LIMIT_LOG.read_text())
    assert parsed["device"] == "NVIDIA H100 80GB HBM3" and parsed["failed"] == []
    got = [(r["variant"][:3], r["batch"], r["tokens_per_s"]) for r in parsed["rows"]]
    assert got == [("(a)", 1, 14617), ("(a)", 8, 92477), ("(b)", 1, 13668), ("(b)", 8, 86162),
                   ("(c)", 1, 25676), ("(c)", 8, 128710)]
    b1 = parsed["rows"][2]
    assert b1["variant"] == "(b) 1 SM/request, exact order, no FMA" and b1["new_tokens_per_request"] == 128
    assert (b1["us_per_token_excl"], b1["us_per_token_excl_best"], b1["us_per_token_incl"]) == (48.78, 48.71, 73.16)
    assert (b1["decode_tokens_per_s"], b1["tokens_equal"], b1["tokens"], b1["prompts_equal"], b1["prompts"]) == \
        (20501, 1024, 1024, 8, 8)


def test_limit_log_failures_and_junk():
    text = ("device: X, 1 SM\n== results (median; 16 new tokens per request)\n"
            "| variant | batch | tokens/s incl. prefill | us/token excl. prefill | us/token incl. prefill | "
            "tokens/s decode only | tokens = reference |\n| --- | --- | --- | --- | --- | --- | --- |\n"
            "| (b) exact | 8 | 100 | 2.0 (1.5)* | 10.0 (8.0) | 400 | 120/128 tokens, 7/8 prompts |\n"
            "| (z) broken | x | 1 | 2 | 3 | 4 | 5 |\n"
            "part b rc 0\npart c rc 124\n| (b) exact | 1 | 1 | 1 | 1 | 1 | 1/1 tokens, 1/1 prompts |\n")
    parsed = rb.parse_limit_log(text)
    assert parsed["failed"] == ["part c rc 124"] and parsed["device"] == "X"
    [row] = parsed["rows"]  # columns by header name, in any order; a row outside a table is not one
    assert (row["tokens_per_s"], row["us_per_token_excl"], row["us_per_token_excl_best"], row["tokens_equal"]) == \
        (100, 2.0, 1.5, 120) and row["new_tokens_per_request"] == 16
    assert rb.parse_limit_log("nothing here") == {"device": None, "rows": [], "failed": []}


def test_limit_rows_and_summary():
    prompts = rp.load_prompts()
    rows = rb.limit_rows(rb.parse_limit_log(LIMIT_LOG.read_text()), prompts, 128)
    b1, b8 = rows[2], rows[3]
    assert b1.variant == "limit (b) 1 SM/request, exact order, no FMA" and (b1.launches, b8.launches) == (8, 1)
    assert b1.new_tokens == 1024 and b1.tokens_per_s_median == pytest.approx(13668)
    assert b1.best_ms == pytest.approx(1024 / 13668 * 1e3 * 73.06 / 73.16) and b1.equal_pytorch == "8/8"
    assert "not this run's" not in b1.note
    assert "not this run's" in rb.limit_rows(rb.parse_limit_log(LIMIT_LOG.read_text()), prompts[:2], 128)[0].note
    plain1 = rb.Row("mega plain", 1, 8, 8, 1024, 1024 / 1.072, 1000.0, team_warps=1, equal_plain="8/8")
    asbs1 = rb.Row("mega ASBS", 1, 8, 8, 1024, 1024 / 0.806, 1000.0, team_warps=1, equal_plain="8/8")
    graph1 = rb.Row("torch graph_kv", 1, 8, 8, 1024, 1024 / 3.647, 1000.0, equal_plain="8/8")
    comp1 = rb.Row("torch compile_kv", 1, 8, 8, 1024, 1024 / 2.858, 1000.0, equal_plain="8/8")
    table = rb.summary([plain1, asbs1, graph1, comp1] + rows)
    lines = table.splitlines()
    assert lines[0].startswith("| batch | mega plain tok/s | best PyTorch |") and len(lines) == 4
    assert lines[2].startswith("| 1 | 1,072 | graph_kv | 3,647 | 0.29 | (b) 1 SM/request, exact order, no FMA |")
    assert "| 0.08 | ASBS | 806 | 0.75 |" in lines[2]
    assert lines[3].startswith("| 8 | - | - | - | - | (b) 1 SM/request") and lines[3].endswith("| - | - | - | - |")
    full = rb.markdown([plain1, graph1] + rows)
    assert "| limit (b) 1 SM/request, exact order, no FMA | 1 | - | - | 8 | 1024 |" in full


def test_limit_options_and_a_missing_folder(tmp_path):
    a = rb.parse_args(["-o", "x", "--limit-dir", ".calib/real_limit"])
    assert a.limit_dir == Path(".calib/real_limit") and a.limit_parts == "bc" and a.limit_log == []
    assert "compile_kv" in a.torch_modes
    for bad in (["--limit-parts", "bt"], ["--limit-parts", ""]):
        with pytest.raises(SystemExit):
            rb.parse_args(["-o", "x", *bad])
    with pytest.raises(rp.RealPairError, match="no run_gpu.sh"):
        rb.run_limit(tmp_path, "b", tmp_path / "out")


def test_run_limit_runs_the_script_and_reads_its_log(tmp_path):
    """A stand-in run_gpu.sh: called with the checkout and the parts, OUT set; its cuda.log is returned."""
    calib = tmp_path / "calib"
    calib.mkdir()
    (calib / "run_gpu.sh").write_text('echo "$1 $2" > "$OUT/args"; cat "%s" >> "$OUT/cuda.log"\n'
                                      'cd "$(dirname "$0")" && touch weights.bin\n' % LIMIT_LOG)
    (calib / "run_gpu.sh").chmod(0o444)
    calib.chmod(0o555)  # read-only, as the shared calibration folder: run_gpu.sh runs in a writable copy
    out = tmp_path / "out"
    out.mkdir()
    (out / "cuda.log").write_text("stale\n")
    try:
        log = rb.run_limit(calib, "bc", out)
    finally:
        calib.chmod(0o755)
    assert (out / "args").read_text().split() == [str(ROOT), "bc"]
    assert log.read_text() == LIMIT_LOG.read_text()  # appended to a fresh file, not the stale one
    assert "denied" not in (out / "run_gpu.log").read_text() and not (calib / "weights.bin").exists()


def test_whole_run_with_a_limit_log(tmp_path):
    n = 4
    ref = _reference(tmp_path, ["random_0"], n)
    out = tmp_path / "out"
    args = ["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", str(n), "--repeats", "1",
            "--prompts", "random_0", "--batches", "1", "--blocks", "2", "--no-torch", "--reference", str(ref)]
    assert rb.main(args + ["--limit-log", str(LIMIT_LOG)]) == 0
    report = json.loads((out / "real_bench.json").read_text())
    assert report["limit_equal_reference"] and report["all_equal_plain"] and len(report["limit"][0]["rows"]) == 6
    assert [r["variant"][:9] for r in report["rows"]][-6:] == ["limit (a)"] * 2 + ["limit (b)"] * 2 + ["limit (c)"] * 2
    md = (out / "real_bench.md").read_text()
    assert "| limit (c) cluster of 16 SMs" in md and "| batch | mega plain tok/s |" in md
    bad = tmp_path / "bad.log"
    bad.write_text(LIMIT_LOG.read_text().replace("1024/1024 tokens, 8/8 prompts |", "1000/1024 tokens, 7/8 prompts |"))
    assert rb.main(args + ["--limit-log", str(bad)]) == 1
    assert not json.loads((out / "real_bench.json").read_text())["limit_equal_reference"]


def test_a_failing_limit_run_keeps_the_other_rows(tmp_path):
    (tmp_path / "run_gpu.sh").write_text("echo no nvcc here; exit 1\n")
    out = tmp_path / "out"
    code = rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", "2", "--repeats", "1",
                    "--prompts", "random_0", "--batches", "1", "--blocks", "1", "--no-torch",
                    "--limit-dir", str(tmp_path)])
    assert code == 1  # the stand-in disagrees with PyTorch too; the limit's failure is reported either way
    report = json.loads((out / "real_bench.json").read_text())
    assert "wrote no cuda.log" in report["limit_error"] and not report["limit_equal_reference"]
    assert [r["variant"] for r in report["rows"]] == ["mega plain", "mega ASBS", "mega cost", "mega B=1"]
    assert "no nvcc here" in (out / "limit" / "run_gpu.log").read_text()


def test_compiled_decoder_gives_greedy_tokens_on_cpu():
    """torch_baselines.CompiledDecoder (torch.compile of the static-cache step; here the 'eager' backend,
    no CUDA graphs) decodes what greedy decoding does, twice from one compiled step (a second launch
    of the same batch size reuses it; its cache rows are overwritten by the prefill)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "scripts"))
    import torch_baselines as tb

    torch.set_num_threads(1)
    cfg, arrays = tb.byte_lm.load_weights(tb.byte_lm.MODEL_FILES["target"])
    w = tb.byte_lm.torch_weights(arrays)
    prompts = [p["bytes"] for p in tb.byte_lm.load_prompts()]
    for group in (prompts[:2], prompts[5:7]):
        ref, _ = tb.byte_lm.greedy_cached(w, cfg, group, 6, "cpu", track_margin=False)
        dec = tb.CompiledDecoder(w, cfg, 2, "cpu", 5, mode=None, backend="eager")
        dec.prefill(group)
        dec.decode()
        assert dec.tokens(group) == ref
    assert len([k for k in tb.CompiledDecoder._compiled if k[1] == 2 and k[4] == "eager"]) == 1
    assert isinstance(tb.make_decoder("eager_kv", w, cfg, 1, "cpu", 3), tb.GraphDecoder)


def test_a_prompts_file_without_recorded_tokens(tmp_path):
    """--prompts-file: prompts PyTorch's tokens were not recorded for run and are checked against
    plain greedy; = PyTorch covers the recorded ones only (here one of two)."""
    held = json.loads((ROOT / "models/bytes_pair/heldout_prompts.json").read_text())["prompts"]
    bundled = json.loads((ROOT / "models/bytes_pair/prompts.json").read_text())["prompts"]
    doc = {"prompts": [held[-1], next(p for p in bundled if p["name"] == "random_0")]}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    n = 3
    data = bytes.fromhex(doc["prompts"][1]["hex"])
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"models": {"target": [{"name": "random_0", "min_margin": 1.0, "margins": [1.0] * n,
                                                      "tokens": [(data[k % len(data)] + 1) % 256 for k in range(n)]}]}}))
    out = tmp_path / "out"
    assert rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", str(n), "--repeats", "1",
                    "--prompts-file", str(tmp_path / "p.json"), "--batches", "2", "--blocks", "2", "--no-torch",
                    "--reference", str(ref)]) == 0
    report = json.loads((out / "real_bench.json").read_text())
    assert report["prompts"] == [held[-1]["name"], "random_0"] and report["pytorch_compared"] == ["random_0"]
    assert [(r["variant"], r["equal_plain"], r["equal_pytorch"]) for r in report["rows"]] == [
        ("mega plain", "2/2", "1/1"), ("mega ASBS", "2/2", ""), ("mega cost", "2/2", ""), ("mega B=2", "2/2", "")]


class _Clock:
    """A runner whose launches take 5 ms + rounds x the block's cost (µs), and with a block, the
    draft's catch-up over the longest prompt but one position, and whose drafts are accepted 3
    times in 4: calibration must recover all three."""
    COST_US = {0: 400.0, 1: 900.0, 2: 1300.0, 4: 2000.0, 8: 3200.0}
    CATCHUP_US = 4.0
    ACCEPT = 0.75

    team_warps = 1

    def __call__(self, params, inputs, batch):
        from types import SimpleNamespace

        block = params["fixed_block"] if params.get("speculate") else 0
        n = inputs[0]["max_new_tokens"]
        rounds = 1 + -(-n // (block + 1))
        catchup = self.CATCHUP_US * (max(int(i["prompt_len"]) for i in inputs) - 1) if block else 0.0
        drafted = [4 * n * block] * len(inputs)
        requests = {"total_proposed": drafted, "total_accepted": [int(d * self.ACCEPT) for d in drafted]}
        return rb.Launch(SimpleNamespace(rounds=rounds, requests=requests),
                         5.0 + (catchup + rounds * self.COST_US[block]) / 1e3, 0.0, None)


def test_calibration_recovers_the_cost_of_a_step_per_block_size_and_of_the_catch_up():
    prompts = rp.load_prompts()[:2]
    cal = rb.calibrate(_Clock(), FAKE_MODULE(), None, rp.load_binding(), 3, prompts, 2)
    assert cal["costs_us"] == pytest.approx(_Clock.COST_US)
    assert cal["catchup_us"] == pytest.approx(_Clock.CATCHUP_US)
    assert cal["accept"] == _Clock.ACCEPT  # (from the block-1 launch)
    assert cal["prompts"] == ["code_class", "code_imports", "code_class"] and cal["lengths"] == [16, 80]
    line = rb.cost_line(3, cal["costs_us"], rp.load_binding(), cal["catchup_us"], cal["accept"])
    assert "B=0 400.0" in line and "--param cost_b8=3200" in line and "--param cost_catchup=4" in line
    assert "its acceptance 0.750" in line and "--param asbs_ema_init=0.75" in line


def FAKE_MODULE():
    from xlgen.backends.build import load

    return load(FAKE).sim_module()


def test_costs_from_a_file(tmp_path):
    f = tmp_path / "costs.json"
    f.write_text(json.dumps({"device": "x", "costs": {"1": {"0": 1.0, "8": 2.0}, "8": {"0": 3.0}}}))
    assert rb.load_costs(f, [1, 8]) == ({1: {0: 1.0, 8: 2.0}, 8: {0: 3.0}}, {}, {})
    with pytest.raises(rp.RealPairError, match="no costs for batch 32"):
        rb.load_costs(f, [1, 32])
    f.write_text(json.dumps({"costs": {"1": {"0": 1.0}}, "catchup": {"1": 2.5, "8": None}, "accept": {"1": 0.7}}))
    assert rb.load_costs(f, [1]) == ({1: {0: 1.0}}, {1: 2.5}, {1: 0.7})  # (None: noise made it negative)
    f.write_text("[1]")
    with pytest.raises(rp.RealPairError, match="expected"):
        rb.load_costs(f, [1])
    # a run that takes them: the cost variant's launch parameters are the file's
    out = tmp_path / "out"
    f.write_text(json.dumps({"1": {"0": 1.0, "1": 2.0, "2": 3.0, "4": 10.0, "8": 20.0}}))
    code = rb.main(["-o", str(out), "--backend", "cpu", "--pipeline", str(FAKE), "--n", "24", "--repeats", "1",
                    "--prompts", "prose_verse", "--batches", "1", "--policies", "cost", "--costs", str(f), "--no-torch",
                    "--reference", str(_reference(tmp_path, ["prose_verse"], 24))])
    assert code == 0
    report = json.loads((out / "real_bench.json").read_text())
    assert [r["variant"] for r in report["rows"]] == ["mega plain", "mega cost"]
    assert report["costs"] == {"1": {"0": 1.0, "1": 2.0, "2": 3.0, "4": 10.0, "8": 20.0}}
    # the fake's cost policy decodes plain when 2 x cost_b0 < cost_b4 (these costs): its first block (the
    # fake's initial 8) commits 4 tokens of prose_verse, then 20 plain steps
    plain, cost = report["rows"]
    assert (plain["verify_steps"], cost["verify_steps"], cost["acceptance"]) == (24, 21, 3 / 8)


def _reference(tmp_path, names, n):
    """A recorded-tokens file for the stand-in pipeline: each prompt's bytes + 1, cycled."""
    prompts = rp.select_prompts(rp.load_prompts(), ",".join(names))
    rows = [{"name": p.name, "tokens": [(p.data[k % len(p.data)] + 1) % 256 for k in range(n)], "min_margin": 1.0,
             "margins": [1.0] * n} for p in prompts]
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"models": {"target": rows}}))
    return ref
