"""The bundled byte-level model pair (models/bytes_pair/, docs/models.md): the shipped weights have
the documented names, shapes and dtypes; the NumPy and PyTorch references decode the recorded
greedy tokens; the training script's smoke mode trains and writes loadable weights.

The tests that need torch skip where it is not installed (CI installs only the test extra)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "models" / "bytes_pair"
sys.path.insert(0, str(ROOT / "models"))

import byte_lm  # noqa: E402


def documented_shapes(n_layers: int, d: int) -> dict[str, tuple[int, ...]]:
    """docs/models.md's table, written out again here (not taken from byte_lm)."""
    shapes = {"tok_emb": (256, d), "pos_emb": (512, d), "final_g": (d,), "lm_head": (256, d)}
    for i in range(n_layers):
        shapes |= {f"l{i}_g_attn": (d,), f"l{i}_wq": (d, d), f"l{i}_wk": (d, d), f"l{i}_wv": (d, d),
                   f"l{i}_wo": (d, d), f"l{i}_g_mlp": (d,), f"l{i}_w_up": (4 * d, d), f"l{i}_w_down": (d, 4 * d)}
    return shapes


@pytest.mark.parametrize("name,n_layers,d", [("target", 4, 128), ("draft", 1, 64)])
def test_shipped_weights_have_documented_names_shapes_dtypes(name, n_layers, d):
    arrays = load_file(str(PAIR / f"{name}.safetensors"))
    assert {k: a.shape for k, a in arrays.items()} == documented_shapes(n_layers, d)
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for a in arrays.values())
    cfg, _ = byte_lm.load_weights(PAIR / f"{name}.safetensors")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.max_len) == (n_layers, d, d // 32, 512)


def documented_pair_shapes(prefix: str, n_layers: int, d: int) -> dict[str, tuple[int, ...]]:
    """docs/models.md's pair layout, written out again here: per-layer tensors stacked, layer first."""
    L, f = n_layers, 4 * d
    shapes = {"tok_emb": (256, d), "pos_emb": (512, d), "g_attn": (L, d), "wq": (L, d, d), "wk": (L, d, d),
              "wv": (L, d, d), "wo": (L, d, d), "g_mlp": (L, d), "w_up": (L, f, d), "w_down": (L, d, f),
              "final_g": (d,), "lm_head": (256, d)}
    return {f"{prefix}_{k}": v for k, v in shapes.items()}


def test_pair_file_has_the_documented_stacked_layout():
    pair = load_file(str(PAIR / "pair.safetensors"))
    assert {k: a.shape for k, a in pair.items()} == (documented_pair_shapes("target", 4, 128)
                                                     | documented_pair_shapes("draft", 1, 64))
    assert pair["target_wq"].shape == (4, 128, 128) and pair["draft_w_up"].shape == (1, 256, 64)
    assert all(a.dtype == np.float32 for a in pair.values())


def test_pair_file_equals_the_two_files_after_unstacking():
    pair = load_file(str(PAIR / "pair.safetensors"))
    stacked = {"g_attn", "wq", "wk", "wv", "wo", "g_mlp", "w_up", "w_down"}
    for name in ("target", "draft"):
        for k, a in load_file(str(PAIR / f"{name}.safetensors")).items():
            layer, _, base = k.partition("_")
            if base in stacked and layer[0] == "l":  # l{i}_<base> is row i of <name>_<base>
                np.testing.assert_array_equal(pair[f"{name}_{base}"][int(layer[1:])], a, err_msg=k)
            else:
                np.testing.assert_array_equal(pair[f"{name}_{k}"], a, err_msg=k)
    for model, (cfg, arrays) in byte_lm.load_pair(PAIR / "pair.safetensors").items():
        flat = load_file(str(PAIR / f"{model}.safetensors"))
        assert list(arrays) == list(byte_lm.tensor_shapes(cfg)) and arrays.keys() == flat.keys()
        assert all(np.array_equal(arrays[k], flat[k]) for k in flat)


def test_pair_command_converts_other_weights_and_reads_back(tmp_path):
    """A user's own weights of the same architecture (here: 2 layers x 32 and 1 x 32) through
    `byte_lm.py pair --target --draft -o`, then decoded from the pair file."""
    rng = np.random.default_rng(3)
    files = {}
    for model, n_layers in (("target", 2), ("draft", 1)):
        arrays = {k: (rng.standard_normal(shape) * 0.1).astype(np.float32)
                  for k, shape in documented_shapes(n_layers, 32).items()}
        files[model] = (tmp_path / f"{model}.safetensors", arrays)
        save_file(arrays, str(files[model][0]))
    out = tmp_path / "mine.safetensors"
    run = subprocess.run([sys.executable, str(ROOT / "models/byte_lm.py"), "pair", "--target", str(files["target"][0]),
                          "--draft", str(files["draft"][0]), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert {k: a.shape for k, a in load_file(str(out)).items()} == (documented_pair_shapes("target", 2, 32)
                                                                    | documented_pair_shapes("draft", 1, 32))
    back = byte_lm.load_pair(out)
    for model, (path, arrays) in files.items():
        cfg, again = back[model]
        assert (cfg.n_layers, cfg.d_model) == ((2, 32) if model == "target" else (1, 32))
        assert all(np.array_equal(again[k], v) for k, v in arrays.items())
        cfg2, w2 = byte_lm.load_weights(out, model)  # a pair file loads as one model too
        assert byte_lm.greedy_numpy(w2, cfg2, b"ab", 3) == byte_lm.greedy_numpy(arrays, cfg, b"ab", 3)


def test_pair_loader_names_what_is_wrong(tmp_path):
    pair = load_file(str(PAIR / "pair.safetensors"))
    pair["target_wk"] = pair["target_wk"][:3].copy()  # one layer short
    del pair["draft_final_g"]
    pair["stray"] = np.zeros(2, np.float32)
    bad = tmp_path / "bad_pair.safetensors"
    save_file(pair, str(bad))
    with pytest.raises(byte_lm.ModelError) as e:
        byte_lm.load_pair(bad)
    msg = str(e.value)
    assert "tensor 'wk': expected float32[4, 128, 128], found float32[3, 128, 128]" in msg
    assert "target_*" in msg and "draft_*" in msg and "missing tensor 'final_g'" in msg and "stray" in msg
    with pytest.raises(byte_lm.ModelError, match="no such file"):
        byte_lm.load_pair(tmp_path / "none.safetensors")


def test_load_names_what_is_wrong(tmp_path):
    arrays = load_file(str(PAIR / "draft.safetensors"))
    arrays["l0_wq"] = arrays["l0_wq"][:, :32].copy()
    del arrays["final_g"]
    arrays["extra"] = np.zeros(3, np.float32)
    bad = tmp_path / "bad.safetensors"
    save_file(arrays, str(bad))
    with pytest.raises(byte_lm.ModelError) as e:
        byte_lm.load_weights(bad)
    msg = str(e.value)
    assert "tensor 'l0_wq': expected float32[64, 64], found float32[64, 32]" in msg
    assert "missing tensor 'final_g'" in msg and "extra" in msg
    with pytest.raises(byte_lm.ModelError, match="no such file"):
        byte_lm.load_weights(tmp_path / "none.safetensors")


def test_prompts_are_bundled_in_every_kind_and_fit():
    prompts = byte_lm.load_prompts()
    assert {p["kind"] for p in prompts} == {"code", "prose", "random"}
    assert len({p["name"] for p in prompts}) == len(prompts) == 8
    assert all(1 <= len(p["bytes"]) <= 200 for p in prompts)


def test_block_rounds_accept_the_matching_prefix_then_commit_one():
    m = [3, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]
    # B=1: positions 0-1 (m=3: accept 1, +1), 2 and 3 (m=0: the correction only), then 2 per round
    assert byte_lm.block_rounds(m, 1) == [1, 0, 0, 1, 1, 1, 1, 1, 1]
    # B=4: tokens 0-3 (accept 3 of m=3, +1), 4-8, 9-13, then 14-15: capped by the 16 tokens asked for
    assert byte_lm.block_rounds(m, 4) == [3, 4, 4, 1]
    assert sum(k + 1 for k in byte_lm.block_rounds(m, 8)) == len(m)


RECORDED = json.loads((PAIR / "reference_tokens.json").read_text())


def test_recorded_margins_cover_every_step():
    for model in ("target", "draft"):
        for row in RECORDED["models"][model]:
            assert len(row["margins"]) == len(row["tokens"]) == RECORDED["n_new"]
            assert min(row["margins"]) == pytest.approx(row["min_margin"], abs=1e-7)
            assert all(m >= 0 for m in row["margins"])


@pytest.mark.parametrize("model", ["target", "draft"])
def test_numpy_reference_decodes_the_recorded_torch_tokens(model):
    cfg, w = byte_lm.load_weights(byte_lm.MODEL_FILES[model])
    prompts = {p["name"]: p["bytes"] for p in byte_lm.load_prompts()}
    for row in RECORDED["models"][model][:3]:
        tokens, margin = byte_lm.greedy_numpy(w, cfg, prompts[row["name"]], 12)
        assert tokens == row["tokens"][:12], row["name"]
        assert margin >= row["min_margin"] * 0.999


def test_torch_reference_is_deterministic_and_cache_agrees():
    torch = pytest.importorskip("torch")
    torch.use_deterministic_algorithms(True)
    cfg, arrays = byte_lm.load_weights(byte_lm.MODEL_FILES["target"])
    w = byte_lm.torch_weights(arrays)
    prompts = byte_lm.load_prompts()
    recorded = {r["name"]: r for r in RECORDED["models"]["target"]}
    first = byte_lm.greedy_plain(w, cfg, prompts[0]["bytes"], 16)
    assert byte_lm.greedy_plain(w, cfg, prompts[0]["bytes"], 16) == first
    assert first[0] == recorded[prompts[0]["name"]]["tokens"][:16]
    batch = [p["bytes"] for p in prompts[:4]]
    cached, margins = byte_lm.greedy_cached(w, cfg, batch, 16)
    for p, toks in zip(prompts[:4], cached):
        assert toks == recorded[p["name"]]["tokens"][:16], p["name"]


def test_training_smoke_mode_writes_loadable_weights(tmp_path):
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_models.py"), "train", "--tiny",
                          "--steps", "2", "--log-every", "1", "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "training.json").read_text())
    for name in ("target", "draft"):
        cfg, _ = byte_lm.load_weights(tmp_path / f"{name}.safetensors")
        info = report["models"][name]
        assert info["steps"] == 2 and len(info["loss_curve"]) == 2
        assert 0 < info["heldout_nats_per_byte"]["code"] < 10
    assert "held-out nats/byte" in out.stdout


@pytest.mark.parametrize("script", ["models/byte_lm.py", "scripts/train_models.py", "scripts/torch_baselines.py"])
def test_scripts_have_help_with_examples(script):
    out = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "python3 " in out.stdout, out.stderr


def test_decode_cli_explains_bad_input():
    out = subprocess.run([sys.executable, str(ROOT / "models/byte_lm.py"), "decode", "--numpy", "--prompt", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no bundled prompt 'nope'" in out.stderr and "Traceback" not in out.stderr
