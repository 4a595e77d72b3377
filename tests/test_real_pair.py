"""The real model pair's tools (stages/real_pair.py and real_demo.py, beside byte_spec.xl's companion; `xlgen demo --real`): prompts to launch
inputs, the pair file as launch parameters, a run's answers against PyTorch's recorded tokens,
speculation statistics and the block-size plot.

The pure parts are tested on their own; the parts that read a run are tested on
tests/real_pair/fake_byte_spec.xl, a stand-in with stages/byte_spec.xl's interface and no model
math (CI speed). The real pipeline's own end-to-end test is test_real_demo.py's."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.backends.build import load
from xlgen.cli import main
from xlgen.runtime import sim
from xlgen.runtime.sim import LaunchConfig
from xlgen.companion import load as load_companion

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "real_pair" / "fake_byte_spec.xl"
COMPANION = load_companion(ROOT / "stages" / "byte_spec_tools.py")
rp = COMPANION.beside("real_pair")
PNG = b"\x89PNG\r\n\x1a\n"


# ---- prompts and inputs ---------------------------------------------------------------------

def test_bundled_prompts_load_as_bytes():
    prompts = rp.load_prompts()
    assert [p.kind for p in prompts] == ["code"] * 3 + ["prose"] * 3 + ["random"] * 2
    by = {p.name: p for p in prompts}
    assert by["prose_verse"].data.startswith(b"Shall I compare thee")
    assert by["random_0"].data[:4] == bytes.fromhex("367e8a82") and len(by["random_0"].data) == 64


def test_prompt_file_errors_say_which_prompt():
    doc = {"prompts": [{"name": "a", "kind": "code", "text": "x", "hex": "00"}, {"name": "b", "kind": "x", "hex": "zz"},
                       {"name": "c"}, {"name": "d", "kind": "code", "text": ""},
                       {"name": "e", "kind": "k", "text": "1"}, {"name": "e", "kind": "k", "text": "2"}]}
    with pytest.raises(rp.RealPairError) as e:
        rp.parse_prompts(doc, "p.json")
    msg = str(e.value)
    assert msg.startswith("p.json:")
    for part in ("prompt 0 ('a'): give exactly one", "prompt 1 ('b'): non-hexadecimal", "prompt 2 ('c'): needs",
                 "prompt 3 ('d'): empty", "prompt name 'e' appears twice"):
        assert part in msg, part


def test_load_prompts_names_a_missing_or_bad_file(tmp_path):
    with pytest.raises(rp.RealPairError, match="none.json"):
        rp.load_prompts(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(rp.RealPairError, match="not JSON"):
        rp.load_prompts(tmp_path / "bad.json")


def test_select_by_name_kind_and_index_in_order_once_each():
    prompts = rp.load_prompts()
    assert rp.select_prompts(prompts, None) == prompts == rp.select_prompts(prompts, "all")
    picked = rp.select_prompts(prompts, "random_1, code, 0, 7")
    assert [p.name for p in picked] == ["random_1", "code_class", "code_imports", "code_unittest"]
    with pytest.raises(rp.RealPairError, match="no prompt, kind or index 'prose_vers'; did you mean 'prose_verse'"):
        rp.select_prompts(prompts, "prose_vers")
    with pytest.raises(rp.RealPairError, match="indices 0..7"):
        rp.select_prompts(prompts, "8")
    with pytest.raises(rp.RealPairError, match="names no prompt"):
        rp.select_prompts(prompts, " , ")


def test_the_binding_names_byte_specs_interface():
    b = rp.load_binding()
    assert b.pipeline_path().name == "byte_spec.xl" and b.pipeline_path().parent.name == "stages"
    assert (b.tokens, b.length, b.new_tokens, b.positions, b.headroom) == ("seq", "prompt_len", "max_new_tokens",
                                                                           512, 8)
    assert b.params("plain") == {"eos_token": -1, "pool_pages": 512, "speculate": False}
    assert b.params("speculative") == {"eos_token": -1, "pool_pages": 512, "speculate": True, "fixed_block": 0}
    assert b.params("fixed", 4) == {"eos_token": -1, "pool_pages": 512, "speculate": True, "fixed_block": 4}
    with pytest.raises(ValueError):
        b.params("fixed", 0)
    assert (b.verify_stage, b.accepted, b.block) == ("spec_verify", "accepted_prefix_len", "current_block_size")
    with pytest.raises(rp.RealPairError, match="not a binding.*no key 'request'"):
        rp.parse_binding({"pipeline": "x.xl"})


def test_request_inputs_put_the_prompt_at_the_start_of_seq():
    prompts = rp.load_prompts()[:2]
    inputs = rp.request_inputs(prompts, 16)
    for p, r in zip(prompts, inputs):
        assert r["prompt_len"] == len(p.data) and r["max_new_tokens"] == 16
        assert len(r["seq"]) == 512 and bytes(r["seq"][: len(p.data)]) == p.data
        assert not any(r["seq"][len(p.data):])
    long = rp.Prompt("long", "code", b"x" * 500)
    with pytest.raises(rp.RealPairError, match=r"'long' \(500 bytes\) \+ 16 new tokens \+ a block of 8 exceeds.*at most 4"):
        rp.request_inputs([long], 16)
    for bad in (0, -1, True, 2.0):
        with pytest.raises(rp.RealPairError, match="new tokens"):
            rp.request_inputs(prompts, bad)


# ---- weights and params -------------------------------------------------------------------

def test_shipped_pair_loads_stacked_and_a_bad_one_is_refused(tmp_path):
    from safetensors.numpy import save_file

    w = rp.load_weights()
    assert w["target_wq"].shape == (4, 128, 128) and w["draft_w_up"].shape == (1, 256, 64) and len(w) == 24
    del w["draft_lm_head"]
    save_file(w, str(tmp_path / "bad.safetensors"))
    with pytest.raises(rp.RealPairError, match="missing tensor 'lm_head'"):
        rp.load_weights(tmp_path / "bad.safetensors")
    with pytest.raises(rp.RealPairError, match="no such file"):
        rp.load_weights(tmp_path / "none.safetensors")


@lru_cache(maxsize=1)
def fake():
    return load(FAKE)


def test_launch_params_bind_declared_tensors_and_no_eos():
    module = fake().sim_module()
    params = rp.launch_params(module, rp.load_weights(), rp.load_binding().params("plain"))
    assert set(params) == {"target_final_g", "eos_token", "pool_pages", "speculate"}  # the fake declares one tensor
    assert params["eos_token"] == -1 and params["speculate"] is False
    assert rp.launch_params(module, None, {"eos_token": 3}) == {"eos_token": 3}
    with pytest.raises(rp.RealPairError, match="speculat: the pipeline has no such parameter"):
        rp.launch_params(module, None, {"speculat": True})


def test_check_binding_names_what_the_pipeline_lacks(tmp_path):
    rp.check_binding(fake().program, rp.load_binding())
    doc = json.loads(rp.binding_file().read_text())
    doc["request"]["tokens"] = "prompt_bytes"
    doc["launch"]["block_param"] = "block"
    doc["verify"]["block"] = "blk"
    with pytest.raises(rp.RealPairError) as e:
        rp.check_binding(fake().program, rp.parse_binding(doc))
    assert str(e.value) == ("pipeline fake_byte_spec does not have what the pair's binding names: request field "
                            "'prompt_bytes', launch parameter 'block', 'blk' in the trace of spec_verify")


# ---- the reference ------------------------------------------------------------------------------

REC = rp.Recorded("p", (1, 2, 3, 4, 5, 6), 0.01, (0.5, 0.4, 0.00002, 0.3, 0.01, 0.2))


def test_recorded_reference_has_every_prompt_and_margin():
    ref = rp.load_reference()
    assert [r for r in ref] == [p.name for p in rp.load_prompts()]
    assert all(len(r.tokens) == len(r.margins) == 128 for r in ref.values())
    assert min(ref["code_imports"].margins) == pytest.approx(0.00735, abs=1e-4)
    assert rp.load_reference(model="draft")["code_class"].min_margin == pytest.approx(0.0465, abs=1e-4)  # the distilled draft


def test_agreement_counts_prefix_and_equal_tokens():
    same = rp.compare_tokens("p", [1, 2, 3, 4, 5, 6], REC)
    assert same.agrees and same.prefix == same.equal == same.expected == 6 and same.min_margin == 0.00002
    assert "agrees: 6/6 equal prefix" in same.describe()
    # asked for 4: only the first 4 count, and the smallest margin is theirs
    four = rp.compare_tokens("p", [1, 2, 3, 4], REC, asked=4)
    assert four.agrees and four.expected == 4 and four.min_margin == 0.00002
    diff = rp.compare_tokens("p", [1, 2, 3, 9, 5, 6], REC)
    assert (diff.prefix, diff.equal, diff.first_diff, diff.margin_at_diff, diff.got, diff.want) == (3, 5, 3, 0.3, 9, 4)
    assert not diff.agrees and not diff.within_noise
    assert "DIFFERS at position 3: token 9" in diff.describe() and "recorded margin there 0.3" in diff.describe()
    noise = rp.compare_tokens("p", [1, 2, 7, 4, 5, 6], REC)
    assert noise.first_diff == 2 and noise.within_noise and "within float32 noise" in noise.describe()
    short = rp.compare_tokens("p", [1, 2], REC)
    assert (short.compared, short.prefix, short.first_diff, short.got, short.want) == (2, 2, 2, None, 3)
    assert not short.within_noise and "committed only 2 tokens" in short.describe()


def test_agreement_without_recorded_margins_uses_the_runs_smallest():
    rec = rp.Recorded("p", (1, 2, 3), 0.25)
    d = rp.compare_tokens("p", [1, 5, 3], rec)
    assert d.min_margin == 0.25 and d.margin_at_diff is None and not d.within_noise
    assert "not recorded" in d.describe()


def test_reference_errors_and_missing_prompts(tmp_path):
    with pytest.raises(rp.RealPairError, match="not a reference of model 'target'"):
        rp.parse_reference({"models": {}})
    with pytest.raises(rp.RealPairError, match="2 margins for 3 tokens"):
        rp.parse_reference({"models": {"target": [{"name": "a", "tokens": [1, 2, 3], "min_margin": 1,
                                                   "margins": [1, 2]}]}})
    prompts = [rp.Prompt("nope", "code", b"x")]
    with pytest.raises(rp.RealPairError, match="no recorded tokens for prompt\\(s\\) nope"):
        rp.compare_run([[1]], prompts, rp.load_reference(), 4)


def test_agreement_table():
    rows = [rp.compare_tokens("code_x", [1, 2, 3, 4, 5, 6], REC, kind="code"),
            rp.compare_tokens("prose_y", [1, 2, 3, 9, 5, 6], REC, kind="prose")]
    table = rp.format_agreement(rows)
    assert "code_x" in table and "6/6" in table and "position 3: '\\t' vs '\\x04', recorded margin 0.3" in table
    assert table.splitlines()[-1].split() == ["all", "1/2", "prompts", "agree,", "11/12", "tokens", "equal"]


# ---- a run (the stand-in pipeline) ---------------------------------------------------------

def run_fake(prompts, n_new, mode="speculative", block=0):
    compiled = fake()
    module = compiled.sim_module()
    params = rp.launch_params(module, rp.load_weights(), rp.load_binding().params(mode, block))
    result = sim.run(module, params, rp.request_inputs(prompts, n_new), LaunchConfig(max_active=len(prompts)))
    return compiled.program, result


def fake_answer(p: rp.Prompt, n: int) -> list[int]:
    """What the stand-in commits: the prompt repeated, each byte + 1 (the pair's target_final_g[0] > 0)."""
    return [(p.data[k % len(p.data)] + 1) % 256 for k in range(n)]


def test_speculation_from_the_traces():
    prompts = rp.select_prompts(rp.load_prompts(), "code_class,prose_verse,random_1")
    program, result = run_fake(prompts, 24)
    assert rp.committed_tokens(program, result) == [fake_answer(p, 24) for p in prompts]
    rows = rp.speculation(program, result, prompts)
    for i, r in enumerate(rows):
        assert r.tokens == 24 and r.steps == len(r.blocks) >= 24 / 9
        assert int(r.accepted.sum()) == int(result.requests["total_accepted"][i])
        assert r.proposed == int(result.requests["total_proposed"][i])  # no draft_len traced: the final state's
        assert r.tokens_per_step == pytest.approx(24 / r.steps) and 0 <= r.acceptance <= 1
        assert set(r.blocks.tolist()) <= {1, 4, 8}
    kinds = rp.by_kind(rows)
    assert [(k.kind, k.prompts, k.tokens) for k in kinds] == [("code", 1, 24), ("prose", 1, 24), ("random", 1, 24)]
    table = rp.format_speculation(rows)
    assert "kind random" in table and "tokens/step" in table
    plain = rp.speculation(*run_fake(prompts, 24, "plain"), prompts)
    assert all(r.steps == 24 and r.proposed == 0 and r.tokens_per_step == 1 for r in plain)
    assert rp.format_speculation(plain).count(" - ") >= 3  # no acceptance without proposals


def test_fixed_block_shows_in_the_trajectory(tmp_path):
    prompts = rp.select_prompts(rp.load_prompts(), "code_class,random_1")
    program, result = run_fake(prompts, 24, "fixed", 2)
    rows = rp.speculation(program, result, prompts)
    assert all(set(r.blocks.tolist()) == {2} for r in rows)
    path = rp.plot_block_sizes(rows, tmp_path / "sub" / "b.png")
    assert path.read_bytes()[:8] == PNG


def test_summarise_compares_with_the_reference():
    prompts = rp.select_prompts(rp.load_prompts(), "prose_verse")
    program, result = run_fake(prompts, 8)
    want = fake_answer(prompts[0], 8)
    reference = {"prose_verse": rp.Recorded("prose_verse", tuple(want[:5] + [0, 0, 0]), 0.1, (0.1,) * 8)}
    run = rp.summarise(program, result, prompts, 8, reference)
    assert run.tokens == 8 and run.answers == [want]
    [a] = run.agreement
    assert (a.prefix, a.first_diff, a.margin_at_diff) == (5, 5, 0.1)


# ---- xlgen demo --real on the stand-in -------------------------------------------------------

def fake_reference(tmp_path, prompts, n, tweak=None) -> Path:
    rows = []
    for p in prompts:
        tokens = fake_answer(p, n)
        margins = [1.0] * n
        if tweak and p.name in tweak:
            position, margin = tweak[p.name]
            tokens[position] ^= 1
            margins[position] = margin
        rows.append({"name": p.name, "tokens": tokens, "min_margin": min(margins), "margins": margins})
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"models": {"target": rows}}))
    return path


def test_real_demo_flow_on_the_stand_in(tmp_path):
    run_real_demo = COMPANION.beside("real_demo").run_real_demo

    prompts = rp.load_prompts()
    lines = []
    ref = fake_reference(tmp_path, prompts, 16, {"random_0": (3, 5e-5)})  # a difference within noise
    demo = run_real_demo(tmp_path / "out", None, 16, False, source=FAKE, reference_path=ref, echo=lines.append)
    text = "\n".join(lines)
    assert demo.ok and demo.diff == {"cpu": True} and demo.spec_equals_plain and not demo.failed
    assert "cpu: identical to the simulator" in text and "speculative = plain greedy: all 8 answers" in text
    assert "kind code" in text and "7/8 prompts agree, 127/128 tokens equal" in text and "(noise)" in text
    assert demo.plot.read_bytes()[:8] == PNG and demo.plot.name == "real_block_sizes.png"
    ref = fake_reference(tmp_path, prompts, 16, {"code_class": (0, 0.5)})  # a real difference
    demo = run_real_demo(tmp_path / "out", "code_class", 16, False, source=FAKE, reference_path=ref,
                         echo=lines.append)
    assert not demo.ok and demo.plain.agreement[0].first_diff == 0


def test_demo_real_usage_errors():
    runner = CliRunner()
    r = runner.invoke(main, ["demo", "--real", "-w", "small"])
    assert r.exit_code == 2 and "the demo of pipeline byte_spec (real_pair_demo) takes no argument 'workload'" in \
        r.output and "its arguments: prompts='all', new_tokens=128" in r.output
    r = runner.invoke(main, ["demo", "--prompts", "code"])
    assert r.exit_code == 2 and "the demo of pipeline xl_spec (asbs) takes no argument 'prompts'" in r.output
    r = runner.invoke(main, ["demo", "--real", "--prompts", "cod", "--no-gpu"])
    assert r.exit_code == 2 and "no prompt, kind or index 'cod'" in r.output
    r = runner.invoke(main, ["demo", "--real", "-n", "400", "--no-gpu"])
    assert r.exit_code == 2 and "at most" in r.output and "Traceback" not in r.output
    r = runner.invoke(main, ["demo", "--help"])
    assert "xlgen demo --real" in r.output
