"""PyTorch baselines for issue 14's targets: greedy decoding of the bundled target model
(models/bytes_pair/target.safetensors), 128 new tokens, batch 1 and batch 8, on the bundled
prompts, in float32:

  eager_nocache   the whole sequence recomputed each step (batch 1 only)
  eager_kv        a static KV cache, one eager decode step per token
  graph_kv        the same decode step (argmax and feedback included) captured once as a CUDA
                  graph and replayed per token, no host synchronisation between tokens
  graph_kv_loop   all decode steps of a request captured in one CUDA graph, replayed once
  compile_kv      the baseline a PyTorch user would pick: the same static-cache decode step with its
                  argmax, compiled by torch.compile(mode="reduce-overhead") (CUDA graphs through
                  cudagraph trees; the weights and the cache are the compiled module's buffers, so
                  their addresses are static), one compiled call per token, eager prefill; compiled
                  once per batch size (--compile-mode picks another mode; CUDA only)

Every mode's tokens are checked against plain greedy decoding (eager_nocache) of each prompt
before any timing counts. Times: median of --reps runs after a warm-up; `total` covers the
prefill (each row's prompt, eager) and all new tokens, `decode` only the steps after prefill.

    python3 scripts/torch_baselines.py --device cuda -o baselines.json
    python3 scripts/torch_baselines.py --device cpu --n 16 --reps 1     # a quick CPU check
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

import byte_lm  # noqa: E402


class GraphDecoder:
    """A static KV cache and the decode step with its argmax and feedback, on fixed buffers, so one
    step (or a whole request's steps) can be captured as a CUDA graph."""

    def __init__(self, w, cfg, batch: int, device: str, steps: int, whole_loop: bool, use_graph: bool = True):
        import torch
        self.w, self.cfg, self.device, self.steps = w, cfg, device, steps
        self.cache = byte_lm.StaticCache(cfg, batch, device)
        self.tok = torch.zeros(batch, dtype=torch.long, device=device)
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)
        self.seq = torch.zeros(batch, cfg.max_len, dtype=torch.long, device=device)
        self.graph = None
        if use_graph:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for _ in range(3):
                    self._step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.no_grad():
                for _ in range(steps if whole_loop else 1):
                    self._step()
            self.replays = 1 if whole_loop else steps

    def _step(self) -> None:
        import torch
        logits = byte_lm.decode_step(self.w, self.cfg, self.cache, self.tok, self.pos)
        nxt = torch.argmax(logits, dim=-1)
        self.seq[self.cache.rows, self.pos + 1] = nxt
        self.tok.copy_(nxt)
        self.pos.add_(1)

    def prefill(self, prompts: list[bytes]) -> None:
        import torch
        with torch.no_grad():
            last = torch.stack([self.cache.prefill(self.w, self.cfg, r, torch.tensor(list(p), device=self.device))
                                for r, p in enumerate(prompts)])
            lens = torch.tensor([len(p) for p in prompts], device=self.device)
            self.tok.copy_(torch.argmax(last, dim=-1))
            self.pos.copy_(torch.tensor([len(p) for p in prompts], device=self.device))
            self.seq[self.cache.rows, self.pos] = self.tok  # the first new token, from the prompt's last logits

    def decode(self) -> None:
        import torch
        if self.graph is None:
            with torch.no_grad():
                for _ in range(self.steps):
                    self._step()
        else:
            for _ in range(self.replays):
                self.graph.replay()

    def tokens(self, prompts: list[bytes]) -> list[list[int]]:
        seq = self.seq.tolist()
        return [seq[r][len(p): len(p) + self.steps + 1] for r, p in enumerate(prompts)]


class CompiledDecoder:
    """torch.compile of byte_lm.decode_step (the approach of the calibration run's
    torch_compile_baseline.py): a module whose buffers hold the weights and the static cache (it
    is the cache decode_step writes), argmax inside the compiled step, dynamic=False and fullgraph;
    `torch.compiler.cudagraph_mark_step_begin()` before each step and the step's output cloned (the
    next replay overwrites it). The same interface as GraphDecoder. The compiled step is kept per
    (weights, batch, mode), so the launches of one batch size compile once; the first call of a
    new one compiles (seconds: a warm-up run absorbs it)."""

    _compiled: dict = {}

    def __init__(self, w, cfg, batch: int, device: str, steps: int, mode: str | None = "reduce-overhead",
                 backend: str = "inductor"):
        import torch
        self.w, self.cfg, self.device, self.steps = w, cfg, device, steps
        key = (id(w), batch, device, mode, backend)
        if key not in self._compiled:
            module = step_module(w, cfg, batch, device)
            self._compiled[key] = (module, torch.compile(module, mode=mode, backend=backend, dynamic=False,
                                                         fullgraph=True))
        self.module, self.step = self._compiled[key]
        self.tok = self.pos = None
        self.out = None

    def prefill(self, prompts: list[bytes]) -> None:
        import torch
        m = self.module
        with torch.no_grad():
            firsts = []
            for r, p in enumerate(prompts):
                t = torch.tensor(list(p), dtype=torch.long, device=self.device).view(1, -1)
                logits, kvs = byte_lm.forward(self.w, self.cfg, t, return_kv=True)
                for i, (k, v) in enumerate(kvs):
                    m.k[i, r, :, : t.shape[1]] = k[0]
                    m.v[i, r, :, : t.shape[1]] = v[0]
                firsts.append(torch.argmax(logits[0, -1]))
            self.tok = torch.stack(firsts)
            self.pos = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=self.device)

    def decode(self) -> None:
        import torch
        outs, pos = [self.tok], self.pos
        with torch.no_grad():
            for _ in range(self.steps):
                torch.compiler.cudagraph_mark_step_begin()
                outs.append(self.step(outs[-1], pos).clone())
                pos = pos + 1
            self.out = torch.stack(outs, 1)

    def tokens(self, prompts: list[bytes]) -> list[list[int]]:
        return self.out.tolist()


def step_module(w, cfg, batch: int, device: str):
    """A torch.nn.Module computing the next token of each row (see StepModule); torch is imported here."""
    import torch

    class StepModule(torch.nn.Module):
        """decode_step + argmax with the weights and the static cache as buffers: the module is the
        cache (k, v, rows, span), as byte_lm.StaticCache."""

        def __init__(self, w, cfg, batch: int, device: str):
            super().__init__()
            self.names, self.cfg = list(w), cfg
            for n, t in w.items():
                self.register_buffer("w_" + n, t)
            shape = (cfg.n_layers, batch, cfg.n_heads, cfg.max_len, byte_lm.HEAD_DIM)
            self.register_buffer("k", torch.zeros(shape, device=device))
            self.register_buffer("v", torch.zeros(shape, device=device))
            self.register_buffer("rows", torch.arange(batch, device=device))
            self.register_buffer("span", torch.arange(cfg.max_len, device=device))

        def forward(self, tok, pos):
            ww = {n: getattr(self, "w_" + n) for n in self.names}
            return torch.argmax(byte_lm.decode_step(ww, self.cfg, self, tok, pos), dim=-1)

    return StepModule(w, cfg, batch, device).to(device)


def cudagraph_skips() -> object:
    """torch.compile's count of graphs it could not turn into CUDA graphs (0 expected), or why unknown."""
    try:
        from torch._dynamo.utils import counters
        skips = counters["inductor"].get("cudagraph_skips", 0)
        return dict(skips) if isinstance(skips, dict) else skips
    except Exception as exc:  # noqa: BLE001  (a private counter: report, never fail)
        return f"unknown ({exc})"


def make_decoder(mode: str, w, cfg, batch: int, device: str, steps: int, compile_mode: str = "reduce-overhead"):
    """The decoder of a KV-cache mode: eager_kv, graph_kv, graph_kv_loop or compile_kv."""
    if mode == "compile_kv":
        return CompiledDecoder(w, cfg, batch, device, steps, compile_mode)
    return GraphDecoder(w, cfg, batch, device, steps, whole_loop=mode == "graph_kv_loop", use_graph=mode != "eager_kv")


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_mode(mode: str, w, cfg, prompts: list[bytes], n_new: int, device: str, reps: int) -> dict:
    """Runs one mode reps + 1 times (the first is a warm-up); returns tokens and median times."""
    import torch
    totals, decodes, toks = [], [], None
    if mode == "eager_nocache":
        for rep in range(reps + 1):
            _sync(device)
            t0 = time.perf_counter()
            toks = [byte_lm.greedy_plain(w, cfg, p, n_new, device)[0] for p in prompts]
            _sync(device)
            totals.append(time.perf_counter() - t0)
        decodes = [float("nan")] * len(totals)
    else:
        dec = make_decoder(mode, w, cfg, len(prompts), device, n_new - 1)
        for rep in range(reps + 1):
            _sync(device)
            t0 = time.perf_counter()
            dec.prefill(prompts)
            _sync(device)
            t1 = time.perf_counter()
            dec.decode()
            _sync(device)
            t2 = time.perf_counter()
            totals.append(t2 - t0)
            decodes.append(t2 - t1)
        toks = dec.tokens(prompts)
    total, decode = statistics.median(totals[1:]), statistics.median(decodes[1:])
    new = len(prompts) * n_new
    return {"tokens": toks, "total_s": total, "decode_s": decode,
            "tokens_per_s": new / total,
            "decode_tokens_per_s": (len(prompts) * (n_new - 1)) / decode if decode == decode else None,
            "ms_per_token_step": 1e3 * total / n_new}


def profile(w, cfg, prompts: list[bytes], device: str) -> int:
    """The device time of each kernel over 20 eager decode steps (after a warm-up): which op costs what."""
    from torch.profiler import ProfilerActivity, profile as prof
    dec = GraphDecoder(w, cfg, len(prompts), device, 20, whole_loop=False, use_graph=False)
    dec.prefill(prompts)
    dec.decode()
    dec.prefill(prompts)
    _sync(device)
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        dec.decode()
        _sync(device)
    print(p.key_averages().table(sort_by="cuda_time_total" if device.startswith("cuda") else "cpu_time_total",
                                 row_limit=18, max_name_column_width=60))
    return 0


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="torch_baselines.py", description=doc[0],
                                 epilog="\n\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="target weights (default: models/bytes_pair/target.safetensors)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=128, help="new tokens per request (default 128)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batches", default="1,8", help="batch sizes (default 1,8)")
    ap.add_argument("-o", "--output", help="write the results as JSON")
    ap.add_argument("--profile", type=int, metavar="BATCH", help="only profile 20 eager decode steps at this batch size")
    args = ap.parse_args(argv)
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        cfg, arrays = byte_lm.load_weights(args.weights or byte_lm.MODEL_FILES["target"])
    except byte_lm.ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    w = byte_lm.torch_weights(arrays, args.device)
    prompts = byte_lm.load_prompts()
    if args.profile:
        return profile(w, cfg, [p["bytes"] for p in prompts][: args.profile], args.device)
    reference = {p["name"]: byte_lm.greedy_plain(w, cfg, p["bytes"], args.n, args.device) for p in prompts}
    graphs = args.device.startswith("cuda")
    out = {"device": torch.cuda.get_device_name() if graphs else "cpu", "torch": torch.__version__,
           "n_new": args.n, "model": f"{cfg.n_layers} layers, d_model {cfg.d_model}",
           "reference_min_margin": {k: v[1] for k, v in reference.items()}, "results": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)] if batch < len(prompts) else [prompts[:batch]]
        modes = ["eager_nocache"] if batch == 1 else []
        modes += ["eager_kv"] + (["graph_kv", "graph_kv_loop", "compile_kv"] if graphs else [])
        for mode in modes:
            runs = [time_mode(mode, w, cfg, [p["bytes"] for p in g], args.n, args.device, args.reps) for g in groups]
            agree = sum(t == reference[p["name"]][0] for r, g in zip(runs, groups) for t, p in zip(r["tokens"], g))
            row = {"batch": batch, "mode": mode, "requests": sum(len(g) for g in groups),
                   "tokens_equal_plain_greedy": f"{agree}/{sum(len(g) for g in groups)}",
                   "tokens_per_s": statistics.mean(r["tokens_per_s"] for r in runs),
                   "decode_tokens_per_s": (statistics.mean(r["decode_tokens_per_s"] for r in runs)
                                           if runs[0]["decode_tokens_per_s"] else None),
                   "ms_per_token_step": statistics.mean(r["ms_per_token_step"] for r in runs)}
            out["results"].append(row)
            dec = f"{row['decode_tokens_per_s']:9.0f}" if row["decode_tokens_per_s"] else "        -"
            print(f"batch {batch}  {mode:14s} {row['tokens_per_s']:9.0f} tok/s (decode only {dec})  "
                  f"{row['ms_per_token_step']:.3f} ms/step  tokens = plain greedy: {row['tokens_equal_plain_greedy']}",
                  flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
