"""The bundled byte-level model pair (models/bytes_pair/): architecture, loading, and an
independent greedy reference in PyTorch (float32) and NumPy. Knows nothing of xlgen.

The architecture (docs/models.md gives it line by line): vocab 256 (bytes), learned positions
(max_len 512), n_layers pre-norm blocks `x += attn(rmsnorm(x, g_attn)); x += mlp(rmsnorm(x,
g_mlp))`, causal multi-head attention with head dim 32, MLP `w_down @ silu(w_up @ x)`, final
RMSNorm and an untied LM head; no biases. Matrices are stored [out, in] (y[i] = sum_j W[i, j]
x[j]), float32, row-major, under flat names (`tok_emb`, `pos_emb`, `l0_wq`, ..., `final_g`,
`lm_head`). A file of another size of the same architecture loads too: the number of layers
and the width are read from the tensors. The pair file (`pair`, `load_pair`) holds both models
as `target_<name>` / `draft_<name>` with the per-layer tensors stacked (`target_wq` [L, d, d]).

    python3 models/byte_lm.py check                                   # the shipped files' names/shapes
    python3 models/byte_lm.py decode --prompt code_class -n 32        # target, greedy, no cache
    python3 models/byte_lm.py decode --text 'def main(' -n 64 --kv    # static KV cache
    python3 models/byte_lm.py decode --model draft --weights my.safetensors --numpy -n 16
    python3 models/byte_lm.py acceptance --device cuda -o acc.json    # draft vs target per prompt kind
    python3 models/byte_lm.py record -o models/bytes_pair/reference_tokens.json
    python3 models/byte_lm.py pair                                    # target_* + draft_* in pair.safetensors
    python3 models/byte_lm.py pair --target T.safetensors --draft D.safetensors -o my_pair.safetensors
    python3 models/byte_lm.py decode --weights my_pair.safetensors --model draft --numpy -n 16

`decode` prints the tokens (bytes) and the smallest top-1 logit margin (largest logit minus
the second largest) over the run: a margin near 0 is where another implementation of the same
math (the mega-kernel) may legitimately pick a different token. Ties go to the lowest byte.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PAIR_DIR = HERE / "bytes_pair"
PROMPTS = PAIR_DIR / "prompts.json"
MODEL_FILES = {"target": PAIR_DIR / "target.safetensors", "draft": PAIR_DIR / "draft.safetensors"}

VOCAB = 256
HEAD_DIM = 32
MAX_LEN = 512
EPS = 1e-5
SCALE = 1.0 / math.sqrt(HEAD_DIM)  # multiplies q.k; as float32: 0.17677669...


class ModelError(Exception):
    """A weights file or prompt that does not fit the architecture (message says what and where)."""


@dataclass(frozen=True)
class Config:
    n_layers: int
    d_model: int
    max_len: int = MAX_LEN

    @property
    def n_heads(self) -> int:
        return self.d_model // HEAD_DIM

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model


TARGET = Config(n_layers=4, d_model=128)
DRAFT = Config(n_layers=1, d_model=64)


def tensor_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every tensor of a model of this size, in file order."""
    d, f = cfg.d_model, cfg.d_ff
    shapes: dict[str, tuple[int, ...]] = {"tok_emb": (VOCAB, d), "pos_emb": (cfg.max_len, d)}
    for i in range(cfg.n_layers):
        shapes.update({f"l{i}_g_attn": (d,), f"l{i}_wq": (d, d), f"l{i}_wk": (d, d), f"l{i}_wv": (d, d),
                       f"l{i}_wo": (d, d), f"l{i}_g_mlp": (d,), f"l{i}_w_up": (f, d), f"l{i}_w_down": (d, f)})
    shapes.update({"final_g": (d,), "lm_head": (VOCAB, d)})
    return shapes


def shape_problems(arrays: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]]) -> list[str]:
    """Every tensor missing, of the wrong shape or dtype, or not in `expected`: one line each."""
    problems = []
    for name, shape in expected.items():
        if name not in arrays:
            problems.append(f"missing tensor '{name}' (expected float32{list(shape)})")
            continue
        a = arrays[name]
        if tuple(a.shape) != shape or a.dtype != np.float32:
            problems.append(f"tensor '{name}': expected float32{list(shape)}, found {a.dtype}{list(a.shape)}")
    extra = sorted(set(arrays) - set(expected))
    if extra:
        problems.append(f"tensors not in the architecture: {', '.join(extra)}")
    return problems


def config_of(arrays: dict[str, np.ndarray], source: str = "the weights") -> Config:
    """The model size the arrays describe, checked against the architecture (every name, shape, dtype)."""
    if "tok_emb" not in arrays or "pos_emb" not in arrays:
        raise ModelError(f"{source}: no 'tok_emb' / 'pos_emb' tensor (found: {', '.join(sorted(arrays)) or 'none'})")
    d = int(arrays["tok_emb"].shape[-1])
    max_len = int(arrays["pos_emb"].shape[0])
    n_layers = len({int(m.group(1)) for k in arrays if (m := re.fullmatch(r"l(\d+)_wq", k))})
    if d <= 0 or d % HEAD_DIM:
        raise ModelError(f"{source}: d_model {d} (tok_emb's second dimension) is not a positive multiple of {HEAD_DIM}")
    cfg = Config(n_layers=n_layers, d_model=d, max_len=max_len)
    expected = tensor_shapes(cfg)
    problems = shape_problems(arrays, expected)
    if problems:
        raise ModelError(f"{source} (read as {n_layers} layers, d_model {d}):\n  " + "\n  ".join(problems))
    return cfg


def load_weights(path: str | Path, model: str | None = None) -> tuple[Config, dict[str, np.ndarray]]:
    """A model's tensors from a .safetensors file (numpy, no torch), checked against the architecture.
    A pair file (target_* / draft_*, layers stacked) gives the model named by `model` ("target" by default)."""
    arrays = _read_safetensors(path)
    if any(k.startswith(("target_", "draft_")) for k in arrays):
        return split_pair(arrays, str(path))[model or "target"]
    return config_of(arrays, str(path)), arrays


def save_weights(path: str | Path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    from safetensors.numpy import save_file
    cfg = config_of(arrays, str(path))
    ordered = {k: np.ascontiguousarray(arrays[k], dtype=np.float32) for k in tensor_shapes(cfg)}
    save_file(ordered, str(path), metadata=metadata)


# --------------------------------------------------------------------------- the pair file

PAIR_MODELS = ("target", "draft")
LAYER_TENSORS = ("g_attn", "wq", "wk", "wv", "wo", "g_mlp", "w_up", "w_down")  # l{i}_<name>, stacked in a pair file
PAIR_FILE = PAIR_DIR / "pair.safetensors"


def stacked_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """One model's tensors in the pair file's layout, in file order: the per-layer tensors `l{i}_<name>`
    stacked into one `<name>` of shape [n_layers, ...] (layer i = index i), the others as they are."""
    flat = tensor_shapes(cfg)
    out: dict[str, tuple[int, ...]] = {"tok_emb": flat["tok_emb"], "pos_emb": flat["pos_emb"]}
    for name in LAYER_TENSORS:
        out[name] = (cfg.n_layers, *flat[f"l0_{name}"]) if cfg.n_layers else (0,)
    out.update({"final_g": flat["final_g"], "lm_head": flat["lm_head"]})
    return out


def stack_layers(arrays: dict[str, np.ndarray], source: str = "the weights") -> dict[str, np.ndarray]:
    """A model's per-layer tensors (`l0_wq`, `l1_wq`, ...) as stacked ones (`wq` [n_layers, d, d])."""
    cfg = config_of(arrays, source)
    out = {"tok_emb": arrays["tok_emb"], "pos_emb": arrays["pos_emb"]}
    for name in LAYER_TENSORS:
        out[name] = np.stack([arrays[f"l{i}_{name}"] for i in range(cfg.n_layers)])
    out.update({"final_g": arrays["final_g"], "lm_head": arrays["lm_head"]})
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def unstack_layers(stacked: dict[str, np.ndarray], source: str = "the weights") -> tuple[Config, dict[str, np.ndarray]]:
    """The inverse of stack_layers, checked: every name, shape and dtype of the stacked layout
    (the number of layers is the leading dimension of `wq`, the width `tok_emb`'s second)."""
    if "tok_emb" not in stacked or "pos_emb" not in stacked or "wq" not in stacked:
        raise ModelError(f"{source}: no 'tok_emb' / 'pos_emb' / 'wq' tensor "
                         f"(found: {', '.join(sorted(stacked)) or 'none'})")
    d = int(stacked["tok_emb"].shape[-1])
    if d <= 0 or d % HEAD_DIM:
        raise ModelError(f"{source}: d_model {d} (tok_emb's second dimension) is not a positive multiple of {HEAD_DIM}")
    cfg = Config(n_layers=int(stacked["wq"].shape[0]) if stacked["wq"].ndim == 3 else 0, d_model=d,
                 max_len=int(stacked["pos_emb"].shape[0]))
    expected = stacked_shapes(cfg)
    problems = shape_problems(stacked, expected)
    if cfg.n_layers < 1:
        problems.append("no layers ('wq' must be [n_layers, d, d] with n_layers >= 1)")
    if problems:
        raise ModelError(f"{source} (read as {cfg.n_layers} layers, d_model {d}):\n  " + "\n  ".join(problems))
    flat = {"tok_emb": stacked["tok_emb"], "pos_emb": stacked["pos_emb"]}
    for i in range(cfg.n_layers):
        for name in LAYER_TENSORS:
            flat[f"l{i}_{name}"] = np.ascontiguousarray(stacked[name][i])
    flat.update({"final_g": stacked["final_g"], "lm_head": stacked["lm_head"]})
    return config_of(flat, source), {k: flat[k] for k in tensor_shapes(cfg)}


def pair_arrays(target: dict[str, np.ndarray], draft: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Both models' per-layer tensors in the pair file's layout: `target_<name>` and `draft_<name>`,
    layers stacked (`target_wq` [4, 128, 128] = l0_wq .. l3_wq). The xl language's tensors have
    constant dims, so a pipeline indexes a layer as the leading dimension."""
    out = {}
    for model, arrays in (("target", target), ("draft", draft)):
        out.update({f"{model}_{k}": v for k, v in stack_layers(arrays, f"the {model}").items()})
    return out


def save_pair(path: str | Path, target: dict[str, np.ndarray], draft: dict[str, np.ndarray]) -> None:
    """Both models in one file (pair_arrays' layout): the one --weights file of a pipeline that binds
    the target and the draft in one launch."""
    from safetensors.numpy import save_file
    save_file(pair_arrays(target, draft), str(path),
              metadata={"layout": "target_<name>, draft_<name>; per-layer tensors stacked: [n_layers, ...]"})


def split_pair(arrays: dict[str, np.ndarray], source: str = "the pair") -> dict[str, tuple[Config, dict[str, np.ndarray]]]:
    """A pair file's tensors back as two models with per-layer names: {"target": (cfg, arrays), "draft": ...}."""
    models = {m: {k[len(m) + 1:]: v for k, v in arrays.items() if k.startswith(m + "_")} for m in PAIR_MODELS}
    stray = sorted(k for k in arrays if not k.startswith(tuple(m + "_" for m in PAIR_MODELS)))
    problems = [f"tensors named neither target_* nor draft_*: {', '.join(stray)}"] if stray else []
    out = {}
    for m, tensors in models.items():
        try:
            out[m] = unstack_layers(tensors, f"{m}_*")
        except ModelError as exc:
            problems.append(str(exc))
    if problems:
        raise ModelError(f"{source}: not a model pair in the stacked layout:\n  " + "\n  ".join(problems))
    return out


def load_pair(path: str | Path = PAIR_FILE) -> dict[str, tuple[Config, dict[str, np.ndarray]]]:
    """A pair file (save_pair's layout) read back and checked: {"target": (cfg, per-layer arrays), "draft": ...}."""
    return split_pair(_read_safetensors(path), str(path))


def _read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for a bad header
        raise ModelError(f"{path}: not a readable .safetensors file ({exc})") from None


def load_prompts(path: str | Path = PROMPTS) -> list[dict]:
    """The bundled prompts: each {name, kind, bytes} (from 'text' as UTF-8, or 'hex')."""
    out = []
    for p in json.loads(Path(path).read_text())["prompts"]:
        data = bytes.fromhex(p["hex"]) if "hex" in p else p["text"].encode("utf-8")
        out.append({"name": p["name"], "kind": p["kind"], "bytes": data})
    return out


# --------------------------------------------------------------------------- NumPy reference

def _np_rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x * (np.float32(1.0) / np.sqrt(ms + np.float32(EPS)))) * g


def forward_numpy(w: dict[str, np.ndarray], cfg: Config, tokens: list[int]) -> np.ndarray:
    """Logits [T, 256] for every position of `tokens` (float32 throughout, no cache)."""
    t = len(tokens)
    if not 0 < t <= cfg.max_len:
        raise ModelError(f"sequence of {t} tokens: must be 1..{cfg.max_len}")
    H, hd = cfg.n_heads, HEAD_DIM
    x = w["tok_emb"][np.asarray(tokens)] + w["pos_emb"][:t]
    causal = np.triu(np.ones((t, t), dtype=bool), 1)
    for i in range(cfg.n_layers):
        h = _np_rmsnorm(x, w[f"l{i}_g_attn"])
        q, k, v = ((h @ w[f"l{i}_{n}"].T).reshape(t, H, hd).transpose(1, 0, 2) for n in ("wq", "wk", "wv"))
        s = (q @ k.transpose(0, 2, 1)) * np.float32(SCALE)
        s = np.where(causal, np.float32(-np.inf), s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p = p / p.sum(-1, keepdims=True)
        o = (p @ v).transpose(1, 0, 2).reshape(t, cfg.d_model)
        x = x + o @ w[f"l{i}_wo"].T
        h = _np_rmsnorm(x, w[f"l{i}_g_mlp"])
        u = h @ w[f"l{i}_w_up"].T
        x = x + (u / (np.float32(1.0) + np.exp(-u))) @ w[f"l{i}_w_down"].T
    return _np_rmsnorm(x, w["final_g"]) @ w["lm_head"].T


def greedy_numpy(w, cfg: Config, prompt: bytes, n_new: int) -> tuple[list[int], float]:
    """Greedy decoding, whole sequence recomputed each step: (new tokens, smallest top-1 margin)."""
    seq, margin = list(prompt), math.inf
    _check_len(cfg, len(prompt), n_new)
    for _ in range(n_new):
        logits = forward_numpy(w, cfg, seq)[-1]
        top = int(np.argmax(logits))
        second = np.max(np.delete(logits, top))
        margin = min(margin, float(logits[top] - second))
        seq.append(top)
    return seq[len(prompt):], margin


def _check_len(cfg: Config, prompt_len: int, n_new: int) -> None:
    if prompt_len < 1:
        raise ModelError("empty prompt: give at least one byte")
    if prompt_len + n_new > cfg.max_len:
        raise ModelError(f"prompt of {prompt_len} bytes + {n_new} new tokens exceeds max_len {cfg.max_len}")


# --------------------------------------------------------------------------- PyTorch reference

def torch_weights(arrays: dict[str, np.ndarray], device: str = "cpu") -> dict:
    import torch
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)).to(device) for k, v in arrays.items()}


def _rmsnorm(x, g):
    import torch
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def _silu(u):
    import torch
    return u / (1.0 + torch.exp(-u))


def forward(w: dict, cfg: Config, idx, act=None, return_kv: bool = False):
    """Logits [B, T, 256] for token ids idx [B, T] at positions 0..T-1 (explicit torch ops; the
    training script runs this same function). With return_kv, also the per-layer (K, V), each
    [B, n_heads, T, 32]: the rows a KV cache holds."""
    import torch
    act = act or _silu
    B, T = idx.shape
    H, hd = cfg.n_heads, HEAD_DIM
    x = w["tok_emb"][idx] + w["pos_emb"][:T]
    causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).triu(1)
    kvs = []
    for i in range(cfg.n_layers):
        h = _rmsnorm(x, w[f"l{i}_g_attn"])
        q, k, v = ((h @ w[f"l{i}_{n}"].T).view(B, T, H, hd).transpose(1, 2) for n in ("wq", "wk", "wv"))
        kvs.append((k, v))
        s = (q @ k.transpose(-1, -2)) * SCALE
        p = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
        x = x + (p @ v).transpose(1, 2).reshape(B, T, cfg.d_model) @ w[f"l{i}_wo"].T
        h = _rmsnorm(x, w[f"l{i}_g_mlp"])
        x = x + act(h @ w[f"l{i}_w_up"].T) @ w[f"l{i}_w_down"].T
    logits = _rmsnorm(x, w["final_g"]) @ w["lm_head"].T
    return (logits, kvs) if return_kv else logits


class StaticCache:
    """A static KV cache: per layer K and V of [batch, n_heads, max_len, 32], and each row's
    next position. Fixed shapes, so a decode step can be captured in a CUDA graph."""

    def __init__(self, cfg: Config, batch: int, device: str):
        import torch
        shape = (cfg.n_layers, batch, cfg.n_heads, cfg.max_len, HEAD_DIM)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        self.rows = torch.arange(batch, device=device)
        self.span = torch.arange(cfg.max_len, device=device)

    def prefill(self, w, cfg: Config, row: int, prompt) -> "torch.Tensor":
        """Writes one row's prompt K/V (positions 0..T-1); returns the last position's logits [256]."""
        logits, kvs = forward(w, cfg, prompt.view(1, -1), return_kv=True)
        t = prompt.numel()
        for i, (k, v) in enumerate(kvs):
            self.k[i, row, :, :t] = k[0]
            self.v[i, row, :, :t] = v[0]
        return logits[0, -1]


def decode_step(w: dict, cfg: Config, cache: StaticCache, tok, pos):
    """One token per row: tok [B] at position pos [B] (per row); writes its K/V into the cache
    and attends over the row's positions 0..pos. Returns logits [B, 256]."""
    import torch
    B = tok.shape[0]
    H, hd = cfg.n_heads, HEAD_DIM
    x = w["tok_emb"][tok] + w["pos_emb"][pos]
    future = (cache.span[None, :] > pos[:, None])[:, None, :]  # [B, 1, max_len]
    for i in range(cfg.n_layers):
        h = _rmsnorm(x, w[f"l{i}_g_attn"])
        q, k, v = ((h @ w[f"l{i}_{n}"].T).view(B, H, hd) for n in ("wq", "wk", "wv"))
        cache.k[i, cache.rows, :, pos] = k
        cache.v[i, cache.rows, :, pos] = v
        s = torch.einsum("bhd,bhsd->bhs", q, cache.k[i]) * SCALE
        p = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)
        x = x + torch.einsum("bhs,bhsd->bhd", p, cache.v[i]).reshape(B, cfg.d_model) @ w[f"l{i}_wo"].T
        h = _rmsnorm(x, w[f"l{i}_g_mlp"])
        x = x + _silu(h @ w[f"l{i}_w_up"].T) @ w[f"l{i}_w_down"].T
    return _rmsnorm(x, w["final_g"]) @ w["lm_head"].T


def _top1(logits):
    """(argmax, top-1 minus top-2) along the last dimension; ties go to the lowest index."""
    import torch
    top = torch.argmax(logits, dim=-1)
    vals = torch.topk(logits, 2, dim=-1).values
    return top, vals[..., 0] - vals[..., 1]


def greedy_plain(w, cfg: Config, prompt: bytes, n_new: int, device: str = "cpu",
                 margins: list[float] | None = None) -> tuple[list[int], float]:
    """Greedy decoding with no cache (the whole sequence recomputed each step). Each step's top-1
    margin is appended to `margins` when given."""
    import torch
    _check_len(cfg, len(prompt), n_new)
    seq = torch.tensor(list(prompt), dtype=torch.long, device=device).view(1, -1)
    margin = math.inf
    with torch.no_grad():
        for _ in range(n_new):
            top, m = _top1(forward(w, cfg, seq)[0, -1])
            margin = min(margin, float(m))
            if margins is not None:
                margins.append(float(m))
            seq = torch.cat([seq, top.view(1, 1)], dim=1)
    return seq[0, len(prompt):].tolist(), margin


def greedy_cached(w, cfg: Config, prompts: list[bytes], n_new: int, device: str = "cpu",
                  track_margin: bool = True) -> tuple[list[list[int]], list[float]]:
    """Greedy decoding of a batch with a static KV cache (eager): each row's own prompt length and
    positions. Returns each row's new tokens and its smallest top-1 margin (inf when untracked)."""
    import torch
    for p in prompts:
        _check_len(cfg, len(p), n_new)
    B = len(prompts)
    cache = StaticCache(cfg, B, device)
    out = torch.zeros(B, n_new, dtype=torch.long, device=device)
    margins = torch.full((B,), math.inf, device=device)
    with torch.no_grad():
        last = torch.stack([cache.prefill(w, cfg, r, torch.tensor(list(p), dtype=torch.long, device=device))
                            for r, p in enumerate(prompts)])
        pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
        for step in range(n_new):
            tok, m = _top1(last)
            if track_margin:
                margins = torch.minimum(margins, m)
            out[:, step] = tok
            if step + 1 < n_new:
                last = decode_step(w, cfg, cache, tok, pos)
                pos = pos + 1
    return out.tolist(), margins.tolist()


# --------------------------------------------------------------------------- acceptance

BLOCKS = (1, 2, 4, 8)


def draft_match_lengths(wt, ct: Config, wd, cd: Config, prompt: bytes, n_new: int, device: str,
                        depth: int = max(BLOCKS)) -> tuple[list[int], list[int]]:
    """For the target's greedy continuation T of `prompt` (n_new + depth tokens) and every p <
    n_new: m[p] = how many of the draft's `depth` greedy tokens from prompt + T[:p] equal T[p:p+depth],
    counted from the first (the accepted prefix a greedy verify of a block of `depth` would keep).
    Returns (T[:n_new], m)."""
    import torch
    [target], _ = greedy_cached(wt, ct, [prompt], n_new + depth, device, track_margin=False)
    P = len(prompt)
    full = torch.tensor(list(prompt) + target, dtype=torch.long, device=device)
    with torch.no_grad():
        # The draft's K/V rows for every prefix are the rows of one causal pass over prompt + T.
        logits, kvs = forward(wd, cd, full[: P + n_new].view(1, -1), return_kv=True)
        cache = StaticCache(cd, n_new, device)
        for i, (k, v) in enumerate(kvs):
            cache.k[i, :, :, : P + n_new] = k[0]
            cache.v[i, :, :, : P + n_new] = v[0]
        tok = torch.argmax(logits[0, P - 1: P + n_new - 1], dim=-1)  # draft's first token at each p
        pos = torch.arange(P, P + n_new, device=device)
        proposals = [tok]
        for _ in range(depth - 1):
            tok = torch.argmax(decode_step(wd, cd, cache, tok, pos), dim=-1)
            pos = pos + 1
            proposals.append(tok)
    drafts = torch.stack(proposals, dim=1).tolist()  # [n_new, depth]
    return target[:n_new], matched_prefixes(drafts, target, depth)


def matched_prefixes(drafts: list[list[int]], target: list[int], depth: int) -> list[int]:
    """For each position p: how many of the draft's `depth` proposals from p equal the target's."""
    m = []
    for p, proposed in enumerate(drafts):
        k = 0
        while k < depth and proposed[k] == target[p + k]:
            k += 1
        m.append(k)
    return m


def block_rounds(m: list[int], block: int) -> list[int]:
    """Accepted-prefix length of every round of greedy speculative decoding with a fixed block:
    a round at position p accepts min(m[p], block) draft tokens and commits one more (correction
    or bonus), until len(m) tokens are committed."""
    n, p, out = len(m), 0, []
    while p < n:
        k = min(m[p], block, n - p - 1)
        out.append(k)
        p += k + 1
    return out


def acceptance_report(wt, ct, wd, cd, prompts: list[dict], n_new: int, device: str, window: int = 32) -> dict:
    rows = []
    for pr in prompts:
        _, m = draft_match_lengths(wt, ct, wd, cd, pr["bytes"], n_new, device)
        row = {"name": pr["name"], "kind": pr["kind"], "prompt_bytes": len(pr["bytes"]),
               "token_acceptance": sum(x >= 1 for x in m) / len(m),
               "window_acceptance": [sum(x >= 1 for x in m[i:i + window]) / len(m[i:i + window])
                                     for i in range(0, len(m), window)],
               "blocks": {}}
        for b in BLOCKS:
            ks = block_rounds(m, b)
            row["blocks"][str(b)] = {"rounds": len(ks), "tokens_per_round": n_new / len(ks),
                                     "mean_accepted": sum(ks) / len(ks),
                                     "accepted_hist": [ks.count(j) for j in range(b + 1)]}
        rows.append(row)
    kinds = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        rs = [r for r in rows if r["kind"] == kind]
        kinds[kind] = {"prompts": len(rs),
                       "token_acceptance": sum(r["token_acceptance"] for r in rs) / len(rs),
                       "tokens_per_round": {str(b): sum(r["blocks"][str(b)]["tokens_per_round"] for r in rs) / len(rs)
                                            for b in BLOCKS}}
    return {"n_new": n_new, "device": device, "prompts": rows, "kinds": kinds}


# --------------------------------------------------------------------------- CLI

def _load(model: str, weights: str | None) -> tuple[Config, dict]:
    return load_weights(weights or MODEL_FILES[model], model)


def _prompt_bytes(args) -> bytes:
    if args.text is not None:
        return args.text.encode("utf-8")
    by_name = {p["name"]: p for p in load_prompts()}
    if args.prompt not in by_name:
        raise ModelError(f"no bundled prompt '{args.prompt}' (have: {', '.join(by_name)})")
    return by_name[args.prompt]["bytes"]


def _show(tokens: list[int]) -> str:
    return bytes(tokens).decode("utf-8", errors="backslashreplace")


def cmd_check(args) -> None:
    for name, path in MODEL_FILES.items():
        cfg, arrays = load_weights(path)
        n = sum(a.size for a in arrays.values())
        print(f"{name}: {path.relative_to(HERE.parent)}: {cfg.n_layers} layers, d_model {cfg.d_model}, "
              f"{cfg.n_heads} heads, max_len {cfg.max_len}, {len(arrays)} tensors, {n:,} parameters")
    pair = load_pair(PAIR_FILE)
    same = all(np.array_equal(pair[m][1][k], v) for m, path in MODEL_FILES.items()
               for k, v in load_weights(path)[1].items())
    print(f"pair: {PAIR_FILE.relative_to(HERE.parent)}: layers stacked, "
          + ", ".join(f"{m} {c.n_layers} x {c.d_model}" for m, (c, _) in pair.items())
          + ("; equals the two files" if same else "; DIFFERS from the two files (python3 models/byte_lm.py pair)"))
    if not same:
        raise ModelError(f"{PAIR_FILE}: differs from {', '.join(str(p) for p in MODEL_FILES.values())}")


def cmd_pair(args) -> None:
    target = load_weights(args.target or MODEL_FILES["target"], "target")[1]
    draft = load_weights(args.draft or MODEL_FILES["draft"], "draft")[1]
    save_pair(args.output, target, draft)
    back = load_pair(args.output)  # the file reads back as the two models, bit for bit
    for model, arrays in (("target", target), ("draft", draft)):
        cfg, again = back[model]
        assert all(np.array_equal(again[k], v) for k, v in arrays.items()), model
    shapes = ", ".join(f"{m}_wq {list(stacked_shapes(back[m][0])['wq'])}" for m in PAIR_MODELS)
    print(f"wrote {args.output}: {len(target)} target and {len(draft)} draft tensors as "
          f"{len(stacked_shapes(back['target'][0]))} + {len(stacked_shapes(back['draft'][0]))} stacked ones ({shapes})")


def cmd_decode(args) -> None:
    cfg, arrays = _load(args.model, args.weights)
    prompt = _prompt_bytes(args)
    if args.numpy:
        tokens, margin = greedy_numpy(arrays, cfg, prompt, args.n)
        how = "numpy, no cache"
    else:
        import torch
        torch.use_deterministic_algorithms(True)
        w = torch_weights(arrays, args.device)
        if args.kv:
            [tokens], [margin] = greedy_cached(w, cfg, [prompt], args.n, args.device)
            how = f"torch {args.device}, static KV cache"
        else:
            tokens, margin = greedy_plain(w, cfg, prompt, args.n, args.device)
            how = f"torch {args.device}, no cache"
    print(f"# {args.model} ({how}), prompt {len(prompt)} bytes, {args.n} new tokens")
    print("tokens:", " ".join(map(str, tokens)))
    print("text:  ", repr(_show(tokens)))
    print(f"smallest top-1 logit margin: {margin:.6g}")


def cmd_acceptance(args) -> None:
    import torch
    ct, wt = _load("target", args.target)
    cd, wd = _load("draft", args.draft)
    wt, wd = torch_weights(wt, args.device), torch_weights(wd, args.device)
    rep = acceptance_report(wt, ct, wd, cd, load_prompts(args.prompts), args.n, args.device)
    for r in rep["prompts"]:
        tpr = "  ".join(f"B={b}: {r['blocks'][str(b)]['tokens_per_round']:.2f}" for b in BLOCKS)
        print(f"{r['name']:24s} {r['kind']:6s} acceptance {r['token_acceptance']:.3f}   tokens/round {tpr}")
    for kind, k in rep["kinds"].items():
        tpr = "  ".join(f"B={b}: {v:.2f}" for b, v in k["tokens_per_round"].items())
        print(f"kind {kind:6s} ({k['prompts']} prompts) acceptance {k['token_acceptance']:.3f}   tokens/round {tpr}")
    if args.output:
        Path(args.output).write_text(json.dumps(rep, indent=1) + "\n")


def record(device: str, n_new: int, prompts_path=PROMPTS, models: tuple[str, ...] = PAIR_MODELS) -> dict:
    """Target and draft greedy tokens of every bundled prompt (torch, no cache) with the smallest
    top-1 margin of each and every step's margin (`margins[k]`: the top-1 minus the top-2 logit
    where token k was chosen, 7 decimals), and whether static-cache decoding gives the same tokens."""
    import torch
    torch.use_deterministic_algorithms(True)
    out = {"n_new": n_new, "device": device, "torch": torch.__version__, "models": {}}
    for name in models:
        cfg, arrays = load_weights(MODEL_FILES[name])
        w = torch_weights(arrays, device)
        rows = []
        for pr in load_prompts(prompts_path):
            margins: list[float] = []
            plain, margin = greedy_plain(w, cfg, pr["bytes"], n_new, device, margins)
            [cached], [cmargin] = greedy_cached(w, cfg, [pr["bytes"]], n_new, device)
            rows.append({"name": pr["name"], "tokens": plain, "min_margin": margin,
                         "cached_agrees": cached == plain, "cached_min_margin": cmargin,
                         "margins": [round(m, 7) for m in margins]})
        out["models"][name] = rows
    return out


def cmd_record(args) -> None:
    models = tuple(args.model or PAIR_MODELS)
    rep = record(args.device, args.n, models=models)
    if set(models) != set(PAIR_MODELS):  # the other model's rows stay as the file has them
        old = json.loads(Path(args.output).read_text())
        if (old["n_new"], old["device"], old["torch"]) != (rep["n_new"], rep["device"], rep["torch"]):
            raise ModelError(f"{args.output}: recorded with n_new {old['n_new']} on {old['device']} (torch "
                             f"{old['torch']}); record every model again to change that")
        rep["models"] = {m: rep["models"].get(m, old["models"].get(m)) for m in PAIR_MODELS}
    for name, rows in rep["models"].items():
        for r in rows:
            print(f"{name:6s} {r['name']:24s} min margin {r['min_margin']:.4f}  cached agrees: {r['cached_agrees']}")
    Path(args.output).write_text(json.dumps(rep, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="byte_lm.py", description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n" + "\n".join(l for l in __doc__.splitlines() if "byte_lm.py" in l),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="load the shipped weights and print their sizes").set_defaults(fn=cmd_check)
    d = sub.add_parser("decode", help="greedy decoding of one prompt; prints tokens and the smallest margin")
    d.add_argument("--model", choices=sorted(MODEL_FILES), default="target")
    d.add_argument("--weights", help="a .safetensors file of the same architecture, or a pair file (--model picks "
                                     "one; default: the shipped model)")
    g = d.add_mutually_exclusive_group()
    g.add_argument("--prompt", default="code_class", help="a bundled prompt's name (models/bytes_pair/prompts.json)")
    g.add_argument("--text", help="the prompt as text (UTF-8)")
    d.add_argument("-n", type=int, default=32, help="new tokens (default 32)")
    d.add_argument("--kv", action="store_true", help="static KV cache (default: recompute the sequence each step)")
    d.add_argument("--numpy", action="store_true", help="the NumPy reference instead of torch")
    d.add_argument("--device", default="cpu")
    d.set_defaults(fn=cmd_decode)
    a = sub.add_parser("acceptance", help="draft-vs-target greedy acceptance per bundled prompt and kind")
    a.add_argument("--target", help="target weights (default: shipped)")
    a.add_argument("--draft", help="draft weights (default: shipped)")
    a.add_argument("--prompts", default=str(PROMPTS))
    a.add_argument("-n", type=int, default=128, help="new tokens per prompt (default 128)")
    a.add_argument("--device", default="cpu")
    a.add_argument("-o", "--output", help="write the report as JSON")
    a.set_defaults(fn=cmd_acceptance)
    pp = sub.add_parser("pair", help="write the target and the draft into one file (target_* / draft_* names, "
                                    "layers stacked: target_wq [n_layers, d, d])")
    pp.add_argument("--target", help="target weights (default: shipped)")
    pp.add_argument("--draft", help="draft weights (default: shipped)")
    pp.add_argument("-o", "--output", default=str(PAIR_DIR / "pair.safetensors"))
    pp.set_defaults(fn=cmd_pair)
    r = sub.add_parser("record", help="write both models' greedy tokens for every bundled prompt")
    r.add_argument("-o", "--output", required=True)
    r.add_argument("--model", action="append", choices=PAIR_MODELS,
                   help="record only this model (repeatable); the file's rows of the other are kept")
    r.add_argument("-n", type=int, default=128)
    r.add_argument("--device", default="cpu")
    r.set_defaults(fn=cmd_record)
    args = ap.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before torch starts CUDA
    try:
        args.fn(args)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
