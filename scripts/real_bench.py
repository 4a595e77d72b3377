"""The real model pair in the mega-kernel against PyTorch (issue 14), side by side in one process
on one GPU: stages/byte_spec.xl running the bundled byte-level target and draft
(models/bytes_pair/), and PyTorch greedy decoding of the same target (scripts/torch_baselines.py).

Variants, each on the bundled prompts (3 code, 3 prose, 2 random bytes: a mix of kinds), --n new
tokens per prompt, at every batch size of --batches (batch B: the prompts in groups of B, one
launch per group, B requests resident at once):

  mega plain        greedy decoding of the target alone, no draft (speculate=false; the reference)
  mega ASBS         speculative decoding, block sizes chosen by ASBS
  mega cost         the cost policy (block_policy = COST): per round one block size in {0, 1, 2, 4, 8}
                    for the whole batch, of most expected tokens per unit of cost, 0 = a plain step;
                    its costs calibrated on this GPU at each batch size before the variants run (--costs)
  mega B=k          speculative decoding, fixed block size k (--blocks, default 1,2,4,8)
  torch eager_kv    PyTorch, a static KV cache, one eager decode step per token
  torch graph_kv    the decode step captured once as a CUDA graph, replayed per token
  torch graph_kv_loop  all decode steps of a request captured in one CUDA graph
  torch compile_kv  the same decode step compiled by torch.compile(mode="reduce-overhead"): static KV
                    cache, CUDA graphs (cudagraph trees), one compiled call per token, eager prefill
  limit (b), (c)    with --limit-dir: the hand-written CUDA decoders of the calibration folder
                    (calib/real_limit: (b) one SM per request under the language's exactness rules,
                    (c) a 16-SM cluster per request), built and run by its run_gpu.sh in a child
                    process on the same GPU, their results table parsed into the same rows

Calibration (--costs calibrate, the default on a GPU; --calibrate-only: nothing else): per batch
size and block size B in {0, 1, 2, 4, 8}, a launch of that many bundled prompts (prompts.json, never
the held-out ones) with a fixed block B (B = 0: plain) at 16 and at 80 new tokens, best of
--calibrate-repeats after a warm-up; a step's cost = extra wall time / extra rounds (the prefill and
the launch overhead cancel). The costs go into the cost policy's launch parameters (the binding's
block_costs): measured on the host, once per launch, so the simulator and the CPU build decide the
same way given the same parameters. They are in the report ("costs", "calibration") and, with
--calibrate-only, in costs.json, which --costs FILE reads back.

Every variant's tokens are checked equal to mega plain's at the first batch size (and mega
plain's against PyTorch's recorded greedy tokens, reference_tokens.json); the table says so per row.

What is timed: tokens/s = new tokens / wall time, best of --repeats timed runs after one warm-up
run of the same launch (the warm-up absorbs NVRTC compilation, module load, the weights' upload
and CUDA-graph capture, none of which is timed). Mega-kernel: host wall time from the launch to
the host seeing completion (xlgen.runtime.gpu's timing.wall_ms: no compile, no packing of the
requests, no copy of the results back); the whole gpu.run call is in `call_ms` too. PyTorch: the
prefill of every row (eager) and every new token, with a device synchronise at both ends (graph
capture and torch.compile's compilation excluded). A batch of several launches (batch 1: one per
prompt) sums its launches' best times. Hand-written limit: its own timing (CUDA events around each
launch, median of 15 after 2 warm-ups; the row's best is its best launch), prefill included, the 8
bundled prompts x 128 tokens whatever --prompts and --n say (the row's note says so when they differ).

    python3 scripts/real_bench.py -o bench/real                       # on a GPU: JSON + markdown table
    python3 scripts/real_bench.py -o /tmp/rb --team-warps 1,4 --request-in-shared 0,1
    python3 scripts/real_bench.py -o /tmp/rb --batches 8 --blocks 2,4 --no-torch --repeats 3
    python3 scripts/real_bench.py -o /tmp/rb --backend cpu --n 8 --prompts code_class --no-torch  # smoke test
    python3 scripts/real_bench.py -o $OUT --limit-dir .calib/real_limit --limit-parts bc   # + the hand-written limit
    python3 scripts/real_bench.py -o /tmp/rb --limit-log cuda.log ...    # its rows from a log of run_gpu.sh instead
    python3 scripts/real_bench.py -o /tmp/rb --prompts-file models/bytes_pair/heldout_prompts.json --batches 1,8,32
    python3 scripts/real_bench.py -o /tmp/rb --calibrate-only --batches 1,8,32    # the costs only: costs.json
    python3 scripts/real_bench.py -o /tmp/rb --costs /tmp/rb/costs.json --policies cost --no-torch
    python3 scripts/real_bench.py -o /tmp/rb --prompts-file models/bytes_pair/heldout_prompts.json \
        --batches 1,8,32 --policies cost,fixed --blocks 1 --n 64 --repeats 1 --team-warps 16 --no-torch
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # torch_baselines (imported only when torch runs)

from xlgen.companion import load as load_companion  # noqa: E402
from xlgen.core.resources import data_dir  # noqa: E402

# The real pair's code, beside byte_spec.xl's companion (stages/real_pair.py)
rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")

TORCH_MODES = ("eager_kv", "graph_kv", "graph_kv_loop", "compile_kv")
POLICIES = ("asbs", "cost", "fixed")  # mega-kernel variants beside plain greedy (--policies)
LIMIT_PARTS = "abc"  # run_gpu.sh's parts that time whole decodes (d: a verify pass, m: micro-benchmarks, t: torch)
REQUEST_MODE_OPTION = "-DXL_REQUEST_IN_SHARED="


@dataclass
class Row:
    """One variant at one batch size (and team size and request mode, for the mega-kernel)."""
    variant: str
    batch: int
    requests: int
    launches: int
    new_tokens: int  # committed new tokens over all launches
    best_ms: float  # sum over launches of each launch's best time
    median_ms: float
    team_warps: int | None = None
    request_mode: str | None = None  # XL_REQUEST_IN_SHARED (None: the default)
    team_blocks: int | None = None  # blocks per team (a cluster), the mega-kernel's
    call_ms: float | None = None  # mega-kernel: the whole gpu.run call, best
    kernel_ms: float | None = None  # mega-kernel: device time between events, best
    rounds: int | None = None  # mega-kernel: rounds of the longest launch
    verify_steps: int | None = None
    tokens_per_step: float | None = None
    acceptance: float | None = None  # accepted / drafted tokens
    equal_plain: str = ""  # "k/n": answers equal to mega plain greedy's (batch 1)
    equal_pytorch: str = ""  # "k/n": answers equal to PyTorch's recorded tokens (mega plain only)
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / (self.best_ms / 1e3) if self.best_ms > 0 else float("nan")

    @property
    def tokens_per_s_median(self) -> float:
        return self.new_tokens / (self.median_ms / 1e3) if self.median_ms > 0 else float("nan")

    @property
    def all_equal(self) -> bool:
        k, _, n = self.equal_plain.partition("/")
        return bool(n) and k == n

    def to_json(self) -> dict:
        d = asdict(self)
        d["tokens_per_s"] = rp.finite(self.tokens_per_s)
        d["tokens_per_s_median"] = rp.finite(self.tokens_per_s_median)
        for key in ("tokens_per_step", "acceptance"):
            d[key] = rp.finite(d[key]) if d[key] is not None else None
        return d


def groups(items: list, batch: int) -> list[list]:
    """`items` in launches of `batch` (the last may be smaller; one launch when batch >= len)."""
    return [items[i:i + batch] for i in range(0, len(items), batch)] if batch < len(items) else [list(items)]


def best_and_median(times: list[float]) -> tuple[float, float]:
    return min(times), statistics.median(times)


def equal_count(answers: list[list[int]], reference: list[list[int]]) -> str:
    return f"{sum(a == b for a, b in zip(answers, reference))}/{len(reference)}"


# ---- the mega-kernel ------------------------------------------------------------------------------

@dataclass
class Launch:
    result: object
    wall_ms: float  # timed: launch to completion (GPU), or the whole call (CPU build, simulator)
    call_ms: float
    kernel_ms: float | None


class MegaRunner:
    """Runs the pipeline on one backend and says how long it took. `gpu`: the mega-kernel
    (deterministic mode, a team of `team_warps`; None: the runtime's choice, noted in `chosen`);
    `cpu`/`sim`: the CPU build or the simulator (a smoke test of this script: their times mean little)."""

    def __init__(self, compiled, backend: str = "gpu", team_warps: int | None = 1, timeout: float = 300.0):
        self.compiled, self.backend, self.team_warps, self.timeout = compiled, backend, team_warps, timeout
        self.chosen, self.chosen_blocks = team_warps, None

    def __call__(self, params: dict, inputs: list[dict], batch: int) -> Launch:
        from xlgen.runtime import cpu, sim
        from xlgen.runtime.sim import LaunchConfig

        config = LaunchConfig(max_active=batch)
        t0 = time.perf_counter()
        if self.backend == "gpu":
            from xlgen.runtime import gpu

            result = gpu.run(self.compiled, params, inputs, config, team_warps=self.team_warps, timeout=self.timeout)
            self.chosen, self.chosen_blocks = result.extra["team_warps"], result.extra["team_blocks"]
            call_ms = (time.perf_counter() - t0) * 1e3
            timing = result.extra["timing"]
            return Launch(result, timing.wall_ms, call_ms, timing.kernel_ms)
        if self.backend == "cpu":
            result = cpu.run(self.compiled, params, inputs, config)
        else:
            result = sim.run(self.compiled.sim_module(), params, inputs, config)
        call_ms = (time.perf_counter() - t0) * 1e3
        return Launch(result, call_ms, call_ms, None)


def bench_mega(runner: MegaRunner, variant: str, params: dict, prompts: list[rp.Prompt], n_new: int, batch: int,
               repeats: int, plain: list[list[int]] | None, binding: rp.Binding) -> tuple[Row, list[list[int]]]:
    """One variant at one batch size: every launch once as a warm-up, then `repeats` timed runs;
    the answers of the last run (every run's must be the same: checked)."""
    program = runner.compiled.program
    answers: list[list[int]] = []
    stats: list[rp.Speculation] = []
    best = median = call = 0.0
    kernel: float | None = 0.0
    rounds = 0
    note = []
    teams = []  # each group's team (the runtime chooses by the group's requests: a short last group may differ)
    for group in groups(prompts, batch):
        inputs = rp.request_inputs(group, n_new, binding)
        first = runner(params, inputs, batch)  # warm-up
        got = rp.committed_tokens(program, first.result)
        timed = [runner(params, inputs, batch) for _ in range(repeats)]
        teams.append((runner.chosen, runner.chosen_blocks))
        if any(rp.committed_tokens(program, t.result) != got for t in timed):
            note.append(f"answers changed between runs of {', '.join(p.name for p in group)}")
        b, m = best_and_median([t.wall_ms for t in timed])
        best, median = best + b, median + m
        call += min(t.call_ms for t in timed)
        kernel = None if kernel is None or timed[0].kernel_ms is None else kernel + min(t.kernel_ms for t in timed)
        rounds = max(rounds, timed[-1].result.rounds)
        answers += got
        stats += rp.speculation(program, timed[-1].result, group, binding)
        failed = [rec for rec in timed[-1].result.records if rec[2] == 0xFFFFFFFF]
        if failed:
            note.append(f"{len(failed)} request(s) failed")
    teams = teams or [(runner.chosen, runner.chosen_blocks)]
    if len(set(teams)) > 1 and runner.backend == "gpu":
        note.append("teams per group: " + ", ".join(f"{w}x{b}" if b and b > 1 else str(w) for w, b in teams))
    steps = sum(s.steps for s in stats)
    proposed = None if any(s.proposed is None for s in stats) else sum(s.proposed for s in stats)
    accepted = sum(int(s.accepted.sum()) for s in stats)
    tokens = sum(len(a) for a in answers)
    row = Row(variant, batch, len(prompts), len(groups(prompts, batch)), tokens, best, median,
              team_warps=teams[0][0] if runner.backend == "gpu" else None,
              team_blocks=teams[0][1] if runner.backend == "gpu" else None, call_ms=call, kernel_ms=kernel,
              rounds=rounds, verify_steps=steps, tokens_per_step=tokens / steps if steps else None,
              acceptance=accepted / proposed if proposed else None,
              equal_plain=equal_count(answers, plain) if plain is not None else "", note="; ".join(note))
    return row, answers


def mega_variants(binding: rp.Binding, blocks: list[int], policies: tuple[str, ...] = POLICIES,
                  costs: dict[int, float] | None = None, catchup: float | None = None,
                  prior: float | None = None) -> list[tuple[str, dict]]:
    """(name, launch parameters) of every mega-kernel variant of `policies` (the binding names the
    parameters); the cost policy with `costs` (block size -> cost of a step; None: the pipeline's
    defaults), `catchup` (the draft's cost to catch up a position) and `prior` (the draft's
    acceptance, where each request's estimate starts; None: the defaults). Plain greedy always
    comes first: it is every other variant's reference."""
    out = [("mega plain", binding.params("plain"))]
    if "asbs" in policies:
        out.append(("mega ASBS", binding.params("speculative")))
    if "cost" in policies:
        out.append(("mega cost", {**binding.params("cost"), **binding.cost_params(costs or {}, catchup, prior)}))
    if "fixed" in policies:
        out += [(f"mega B={b}", binding.params("fixed", b)) for b in blocks]
    return out


# ---- calibration: the cost policy's costs on this machine at this batch size -----------------------

CALIBRATION_LENGTHS = (16, 80)  # new tokens of the short and the long launch


def calibrate(runner: MegaRunner, module, weights: dict, binding: rp.Binding, batch: int, prompts: list[rp.Prompt],
              repeats: int, lengths: tuple[int, int] = CALIBRATION_LENGTHS) -> dict:
    """The cost of one speculation step (µs of wall time per round) at each block size the cost
    policy chooses from, at `batch` requests per launch: per block size B, the same launch (`batch`
    of `prompts`, cycled; fixed block B, B = 0: plain greedy) with lengths[0] and lengths[1] new
    tokens, best of `repeats` after a warm-up each, and cost = (extra time) / (extra rounds): the
    prompt's prefill and the launch's overhead cancel. Host-side timing, once per launch: nothing
    measured enters a launch but these parameters.

    The draft's cost to catch up a position (catchup_us) comes from the same launches: what a
    launch of block 1 spends outside its rounds, less what plain greedy's does (each launch's time
    at lengths[0] less its rounds at their cost), is the draft's pass over the prompt, which the
    requests make side by side: per position of the longest prompt but one. 0 where noise makes
    it negative.

    And the draft's acceptance (accept), where the cost policy's estimate of it starts for each
    request (the binding's accept_prior): accepted / drafted tokens of the block-1 launch with
    lengths[1] new tokens, where every step drafts one token, so the share accepted is the
    probability the policy's model of a block takes (asbs.xl, expected_commit). Without it a
    request starts from the ASBS seeds' 0.8, and where the draft agrees less a batch speculates at
    a loss until its estimates fall (docs/benchmarks.md)."""
    group = [prompts[i % len(prompts)] for i in range(batch)]
    costs, points, accept = {}, {}, None
    for b in sorted(binding.block_costs):
        params = rp.launch_params(module, weights, binding.params("plain") if b == 0 else binding.params("fixed", b))
        measured = []
        for n in lengths:
            inputs = rp.request_inputs(group, n, binding)
            runner(params, inputs, batch)  # warm-up
            timed = [runner(params, inputs, batch) for _ in range(repeats)]
            measured.append((min(t.wall_ms for t in timed), int(timed[0].result.rounds)))
        if b == 1 and binding.accepted_total and binding.proposed_total:
            requests = timed[0].result.requests  # (the lengths[1] launch)
            drafted = sum(int(v) for v in requests[binding.proposed_total])
            accept = sum(int(v) for v in requests[binding.accepted_total]) / drafted if drafted else None
        (t1, r1), (t2, r2) = measured
        if r2 <= r1 or t2 <= t1:
            raise rp.RealPairError(f"calibration at batch {batch}, block {b}: {lengths[1]} new tokens took {t2:.3f} ms "
                                   f"in {r2} rounds, {lengths[0]} took {t1:.3f} ms in {r1}: no cost per round to "
                                   "fit (too noisy: raise --calibrate-repeats)")
        costs[b] = (t2 - t1) * 1e3 / (r2 - r1)
        points[b] = measured
    outside = {b: points[b][0][0] * 1e3 - points[b][0][1] * costs[b] for b in (0, 1) if b in points}
    longest = max(len(p.data) for p in group)
    catchup = max(outside[1] - outside[0], 0.0) / max(longest - 1, 1) if len(outside) == 2 else None
    return {"batch": batch, "costs_us": costs, "catchup_us": catchup, "accept": accept, "points_ms_rounds": points,
            "lengths": list(lengths), "prompts": [p.name for p in group]}


def load_costs(path: Path, batches: list[int]) -> tuple[dict[int, dict[int, float]], dict[int, float],
                                                       dict[int, float]]:
    """Costs per batch size from a JSON file: {"costs": {batch: {block: cost}}} (real_bench.json or
    costs.json of an earlier run) or the mapping itself; and the draft's catch-up and acceptance
    per batch size where the file has them ({"catchup": {batch: cost}, "accept": {batch: share}};
    else the pipeline's defaults)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise rp.RealPairError(f"--costs {path}: {exc}") from None
    table = doc.get("costs", doc) if isinstance(doc, dict) else None
    try:
        out = {int(batch): {int(b): float(c) for b, c in row.items()} for batch, row in table.items()}
    except (AttributeError, TypeError, ValueError):
        raise rp.RealPairError(f"--costs {path}: expected {{\"costs\": {{batch: {{block size: cost}}}}}}") from None
    missing = [b for b in batches if b not in out]
    if missing:
        raise rp.RealPairError(f"--costs {path}: no costs for batch {', '.join(map(str, missing))} "
                               f"(it has {', '.join(map(str, sorted(out))) or 'none'})")
    extra = []
    for key in ("catchup", "accept"):
        table = doc.get(key, {}) if isinstance(doc, dict) and "costs" in doc else {}
        try:
            extra.append({int(batch): float(c) for batch, c in table.items() if c is not None})
        except (AttributeError, TypeError, ValueError):
            raise rp.RealPairError(f"--costs {path}: expected {{\"{key}\": {{batch: number}}}}") from None
    return out, extra[0], extra[1]


def cost_line(batch: int, costs: dict[int, float], binding: rp.Binding, catchup: float | None = None,
              prior: float | None = None) -> str:
    params = " ".join(f"--param {n}={v:.4g}" for n, v in binding.cost_params(costs, catchup, prior).items())
    return (f"batch {batch:<2} costs (us per step): " + ", ".join(f"B={b} {c:,.1f}" for b, c in sorted(costs.items()))
            + (f"; the draft's catch-up {catchup:.2f} per position" if catchup is not None else "")
            + (f"; its acceptance {prior:.3f}" if prior is not None else "")
            + f"\n  as launch parameters: {params}")


def set_request_mode(mode: str | None) -> None:
    """XLGEN_NVRTC_OPTIONS with -DXL_REQUEST_IN_SHARED=mode (None: the option removed: the default)."""
    options = [o for o in os.environ.get("XLGEN_NVRTC_OPTIONS", "").split() if not o.startswith(REQUEST_MODE_OPTION)]
    if mode is not None:
        options.append(f"{REQUEST_MODE_OPTION}{mode}")
    os.environ["XLGEN_NVRTC_OPTIONS"] = " ".join(options)


# ---- PyTorch ------------------------------------------------------------------------------------------

def bench_torch(mode: str, w, cfg, prompts: list[rp.Prompt], n_new: int, batch: int, repeats: int, device: str,
                plain: list[list[int]] | None) -> tuple[Row, list[list[int]]]:
    """torch_baselines' decoders, timed here: best of `repeats` after a warm-up, per launch."""
    import torch
    import torch_baselines as tb

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    answers: list[list[int]] = []
    best = median = 0.0
    for group in groups(prompts, batch):
        data = [p.data for p in group]
        times = []
        if mode == "eager_nocache":
            for _ in range(repeats + 1):
                sync()
                t0 = time.perf_counter()
                toks = [tb.byte_lm.greedy_plain(w, cfg, d, n_new, device)[0] for d in data]
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
        else:
            dec = tb.make_decoder(mode, w, cfg, len(data), device, n_new - 1)
            for _ in range(repeats + 1):  # the first: compilation, graph capture
                sync()
                t0 = time.perf_counter()
                dec.prefill(data)
                dec.decode()
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            toks = dec.tokens(data)
        b, m = best_and_median(times[1:])
        best, median = best + b, median + m
        answers += [list(t) for t in toks]
    tokens = sum(len(a) for a in answers)
    note = f"cudagraph skips: {tb.cudagraph_skips()}" if mode == "compile_kv" else ""
    return Row(f"torch {mode}", batch, len(prompts), len(groups(prompts, batch)), tokens, best, median,
               equal_plain=equal_count(answers, plain) if plain is not None else "", note=note), answers


# ---- the hand-written limit (calib/real_limit) ---------------------------------------------------------------

def run_limit(limit_dir: Path, parts: str, out: Path, timeout: float = 400.0) -> Path:
    """Runs `bash run_gpu.sh ROOT PARTS` of a writable copy of LIMIT_DIR with OUT=out (it exports the
    bundled target from this checkout, builds real_limit.cu with nvcc and runs each part in its own
    process); returns the cuda.log it writes. Its stdout goes to out/run_gpu.log."""
    script = limit_dir / "run_gpu.sh"
    if not script.is_file():
        raise rp.RealPairError(f"--limit-dir {limit_dir}: no run_gpu.sh there (copy the calibration folder: "
                               f"mkdir -p .calib && cp -r ../shared/calib/real_limit .calib/)")
    import shutil
    import stat
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    log = out / "cuda.log"
    log.unlink(missing_ok=True)  # run_gpu.sh appends
    env = dict(os.environ, OUT=str(out.resolve()))
    # run_gpu.sh writes the exported weights and its binary beside itself: run a writable copy (the
    # calibration folder is read-only where it comes from, and 4 MB of weights need not come back in OUT)
    with tempfile.TemporaryDirectory(prefix="real_limit-") as tmp:
        work = Path(tmp) / "real_limit"
        shutil.copytree(limit_dir, work)
        for p in [work, *work.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR | (stat.S_IXUSR if p.is_dir() else 0))
        with open(out / "run_gpu.log", "w") as fh:
            proc = subprocess.run(["bash", str(work / "run_gpu.sh"), str(ROOT), parts], stdout=fh,
                                  stderr=subprocess.STDOUT, env=env, timeout=timeout)
    if not log.is_file():
        raise rp.RealPairError(f"{script}: wrote no cuda.log (exit {proc.returncode}; see {out / 'run_gpu.log'})")
    return log


_NUM = r"([0-9.]+)(?:\s*\(([0-9.]+)\))?\*?"


def parse_limit_log(text: str) -> dict:
    """The results tables of real_limit's cuda.log: {"device": str | None, "rows": [...], "failed": [...]},
    a row per (variant, batch): variant, batch, us_per_token excl./incl. prefill (median and best),
    tokens/s incl. prefill and decode only, tokens and prompts equal to the reference (k, n), and the new
    tokens per request of its header. Columns are found by their header's names. `failed`: parts whose
    `part X rc N` is not 0."""
    device = None
    rows: list[dict] = []
    header: list[str] | None = None
    n_new = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("device:") and device is None:
            device = line[len("device:"):].split(",")[0].strip()
        m = re.search(r"(\d+) new tokens per request", line)
        if line.startswith("== results") and m:
            n_new = int(m.group(1))
        if not line.startswith("|"):
            header = None  # a table ends at the first line that is not one of its rows
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] == "variant":
            header = cells
            continue
        if header is None or set(cells[0]) <= {"-", " "} or len(cells) != len(header):
            continue
        cell = dict(zip(header, cells))
        try:
            row = {"variant": cell["variant"], "batch": int(cell["batch"]), "new_tokens_per_request": n_new}
            for key, name in (("excl", "us/token excl. prefill"), ("incl", "us/token incl. prefill")):
                mm = re.fullmatch(_NUM, cell[name])
                row[f"us_per_token_{key}"] = float(mm.group(1))
                row[f"us_per_token_{key}_best"] = float(mm.group(2) or mm.group(1))
            row["tokens_per_s"] = float(cell["tokens/s incl. prefill"])
            row["decode_tokens_per_s"] = float(cell["tokens/s decode only"])
            eq = re.fullmatch(r"(\d+)/(\d+) tokens, (\d+)/(\d+) prompts", cell["tokens = reference"])
            row["tokens_equal"], row["tokens"], row["prompts_equal"], row["prompts"] = map(int, eq.groups())
        except (KeyError, AttributeError, ValueError):
            continue  # not a results row of the known shape
        rows.append(row)
    failed = [f"part {p} rc {rc}" for p, rc in re.findall(r"^part (\w) rc (\d+)", text, re.M) if rc != "0"]
    return {"device": device, "rows": rows, "failed": failed}


def limit_label(variant: str) -> str:
    """'(b) 1 SM/request, exact order, no FMA' -> 'limit (b) 1 SM/request, exact order, no FMA'."""
    return f"limit {variant}"


def limit_rows(parsed: dict, prompts: list[rp.Prompt], n_new: int) -> list[Row]:
    """parse_limit_log's rows as Rows: new tokens and launches from its counts (batch 1: one launch per
    prompt), times from its tokens/s (median) and the best/median ratio of its per-token times; `=
    PyTorch` from its reference check (the same recorded tokens as mega plain's). Its prompts are the 8
    bundled ones x its own token count: a note says so when this run's selection differs."""
    out = []
    names = [p.name for p in prompts]
    default = [p.name for p in rp.load_prompts()]
    for r in parsed["rows"]:
        tokens, n_prompts = r["tokens"], r["prompts"]
        median_ms = tokens / r["tokens_per_s"] * 1e3 if r["tokens_per_s"] > 0 else float("nan")
        best_ms = median_ms * r["us_per_token_incl_best"] / r["us_per_token_incl"] if r["us_per_token_incl"] else median_ms
        launches = n_prompts if r["batch"] == 1 else -(-n_prompts // r["batch"])
        note = ["median of 15 in its own process; prefill included"]
        if names != default or (r["new_tokens_per_request"] or n_new) != n_new:
            note.append(f"its prompts: the {n_prompts} bundled x {r['new_tokens_per_request']} tokens, not this run's")
        out.append(Row(limit_label(r["variant"]), r["batch"], n_prompts, launches, tokens, best_ms, median_ms,
                       equal_pytorch=f"{r['prompts_equal']}/{n_prompts}", note="; ".join(note)))
    return out


# ---- the report ------------------------------------------------------------------------------------------

def markdown(rows: list[Row], title: str = "") -> str:
    ref = {(r.batch, r.team_warps, r.team_blocks, r.request_mode): r for r in rows if r.variant == "mega plain"}
    out = [f"{title}\n" if title else "",
           "| variant | batch | team warps | request mode | launches | new tokens | best ms | median ms | tokens/s (best) "
           "| × mega plain | verify steps | tokens/step | acceptance | = plain greedy | = PyTorch | note |",
           "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for r in rows:
        base = ref.get((r.batch, r.team_warps, r.team_blocks, r.request_mode)) or next(
            (x for x in rows if x.variant == "mega plain" and x.batch == r.batch), None)
        speed = f"{r.tokens_per_s / base.tokens_per_s:.2f}" if base and base.tokens_per_s == base.tokens_per_s else "-"
        out.append(f"| {r.variant} | {r.batch} | {_team(r)} | {_cell(r.request_mode)} | {r.launches} | "
                   f"{r.new_tokens} | {r.best_ms:.2f} | {r.median_ms:.2f} | {r.tokens_per_s:,.0f} | {speed} | "
                   f"{_cell(r.verify_steps)} | {_cell(r.tokens_per_step, '.2f')} | "
                   f"{_cell(r.acceptance, '.1%')} | {r.equal_plain or '-'} | {r.equal_pytorch or '-'} | {r.note} |")
    return "\n".join(line for line in out if line) + "\n"


def summary(rows: list[Row]) -> str:
    """Per batch size: mega plain, the best PyTorch baseline and the hand-written limit (the one-SM exact
    variant (b) where present) side by side, and the ratios issue 23's targets are stated in."""
    out = ["| batch | mega plain tok/s | best PyTorch | tok/s | mega / best PyTorch | hand-written limit | tok/s "
           "| mega / limit | best mega speculative | tok/s | × mega plain |",
           "| ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for batch in dict.fromkeys(r.batch for r in rows):
        at = [r for r in rows if r.batch == batch]
        plain = max((r for r in at if r.variant == "mega plain"), key=lambda r: r.tokens_per_s, default=None)
        torch_best = max((r for r in at if r.variant.startswith("torch ")), key=lambda r: r.tokens_per_s, default=None)
        limits = [r for r in at if r.variant.startswith("limit ")]
        limit = next((r for r in limits if r.variant.startswith("limit (b)")), limits[0] if limits else None)
        spec = max((r for r in at if r.variant.startswith("mega ") and r.variant != "mega plain"),
                   key=lambda r: r.tokens_per_s, default=None)

        def rate(r):
            return f"{r.tokens_per_s:,.0f}" if r else "-"

        def ratio(a, b):
            return f"{a.tokens_per_s / b.tokens_per_s:.2f}" if a and b and b.tokens_per_s > 0 else "-"

        out.append(f"| {batch} | {rate(plain)} | {torch_best.variant[6:] if torch_best else '-'} | {rate(torch_best)} | "
                   f"{ratio(plain, torch_best)} | {limit.variant[6:] if limit else '-'} | {rate(limit)} | "
                   f"{ratio(plain, limit)} | {spec.variant[5:] if spec else '-'} | {rate(spec)} | {ratio(spec, plain)} |")
    return "\n".join(out) + "\n"


def _cell(value, spec: str = "") -> str:
    return "-" if value is None or value != value else format(value, spec)


def _team(r: Row) -> str:
    """Warps per team, and (a cluster) x blocks: 16x8."""
    return _cell(r.team_warps) + (f"x{r.team_blocks}" if r.team_blocks and r.team_blocks > 1 else "")


def line(r: Row) -> str:
    extra = ""
    if r.team_warps is not None:
        extra = f" team {_team(r)}" + (f" mode {r.request_mode}" if r.request_mode is not None else "")
    steps = f"  {r.tokens_per_step:.2f} tok/step" if r.tokens_per_step else ""
    return (f"batch {r.batch:<2} {r.variant:<20}{extra}: {r.tokens_per_s:>9,.0f} tok/s (best of runs; median "
            f"{r.tokens_per_s_median:,.0f}), {r.best_ms:.2f} ms{steps}  = plain: {r.equal_plain or '-'}"
            + (f"  = PyTorch: {r.equal_pytorch}" if r.equal_pytorch else "") + (f"  [{r.note}]" if r.note else ""))


# ---- main -------------------------------------------------------------------------------------------------

def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: a comma-separated list of integers, not '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{what}: integers >= 1, not '{text}'")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="real_bench.py", description=doc[0], epilog="\n\n".join(doc[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", type=Path, required=True, help="directory for real_bench.json and real_bench.md")
    ap.add_argument("--n", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per launch after the warm-up (default 5)")
    ap.add_argument("--batches", type=lambda s: _ints(s, "--batches"), default=[1, 8], help="default 1,8")
    ap.add_argument("--blocks", type=lambda s: _ints(s, "--blocks"), default=[1, 2, 4, 8],
                    help="fixed block sizes (default 1,2,4,8)")
    ap.add_argument("--prompts", default=None, help="prompts by name, kind or index (default: all of the file)")
    ap.add_argument("--prompts-file", type=Path, default=None,
                    help="the prompts (default: the 8 bundled, models/bytes_pair/prompts.json; e.g. "
                         "models/bytes_pair/heldout_prompts.json, 72 held-out prompts: PyTorch's recorded tokens "
                         "cover only the bundled ones, so = PyTorch compares those it has, every variant = plain)")
    ap.add_argument("--team-warps", type=lambda s: _ints(s, "--team-warps"), default=None,
                    help="warps per request of the mega-kernel, a list (default $XLGEN_TEAM_WARPS, else the runtime's "
                         "choice for each batch)")
    ap.add_argument("--request-in-shared", default=None, metavar="MODES",
                    help="XL_REQUEST_IN_SHARED values to compare, e.g. 0,1 (sets XLGEN_NVRTC_OPTIONS; "
                         "default: the kernel's default, or what XLGEN_NVRTC_OPTIONS says)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"mega-kernel variants beside plain greedy, of {','.join(POLICIES)} (default all)")
    ap.add_argument("--costs", default=None, metavar="calibrate|defaults|FILE",
                    help="the cost policy's costs: calibrate (default on a GPU), defaults (the pipeline's: "
                         "H100, batch 1; default on cpu and sim), or a costs.json / real_bench.json of an earlier run")
    ap.add_argument("--calibrate-only", action="store_true",
                    help="only calibrate the costs at each --batches size: costs.json and the launch parameters")
    ap.add_argument("--calibrate-repeats", type=int, default=5,
                    help="timed runs per calibration launch (default 5: with 3, one batch-32 calibration on an H100 put "
                         "a plain step at 224 us where three others gave 178-179; docs/benchmarks.md)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch baselines")
    ap.add_argument("--torch-modes", default=",".join(TORCH_MODES),
                    help=f"default {','.join(TORCH_MODES)} (eager_nocache too, batch 1 only)")
    ap.add_argument("--backend", choices=("gpu", "cpu", "sim"), default="gpu",
                    help="gpu (default); cpu or sim: a smoke test of the script (times mean nothing)")
    ap.add_argument("--pipeline", type=Path, default=None,
                    help="default: the binding's (models/bytes_pair/pipeline.json: stages/byte_spec.xl)")
    ap.add_argument("--weights", type=Path, default=None, help="default models/bytes_pair/pair.safetensors")
    ap.add_argument("--reference", type=Path, default=None,
                    help="PyTorch's recorded tokens (default models/bytes_pair/reference_tokens.json)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mega-kernel launch (default 300)")
    ap.add_argument("--limit-dir", type=Path, default=None,
                    help="the calibration folder calib/real_limit copied into the checkout (e.g. .calib/real_limit): "
                         "run its hand-written decoders on this GPU after the other variants")
    ap.add_argument("--limit-parts", default="bc", help=f"run_gpu.sh parts of {LIMIT_PARTS} to run (default bc)")
    ap.add_argument("--limit-log", type=Path, action="append", default=[],
                    help="parse the hand-written limit's rows from this cuda.log of run_gpu.sh (no run; repeatable)")
    ap.add_argument("--limit-timeout", type=float, default=400.0, help="seconds for run_gpu.sh (default 400)")
    args = ap.parse_args(argv)
    if not args.limit_parts or set(args.limit_parts) - set(LIMIT_PARTS):
        ap.error(f"--limit-parts: letters of {LIMIT_PARTS}, not '{args.limit_parts}'")
    if args.n < 1 or args.repeats < 1 or args.calibrate_repeats < 1:
        ap.error("--n, --repeats and --calibrate-repeats must be >= 1")
    args.policies = tuple(dict.fromkeys(p.strip() for p in args.policies.split(",") if p.strip()))
    bad = sorted(set(args.policies) - set(POLICIES))
    if bad:
        ap.error(f"--policies: unknown {', '.join(bad)} (choose from {', '.join(POLICIES)})")
    if args.costs is None:
        args.costs = "calibrate" if args.backend == "gpu" else "defaults"
    if args.request_in_shared is not None:
        modes = [m.strip() for m in args.request_in_shared.split(",") if m.strip()]
        if not modes or any(m not in ("0", "1", "2") for m in modes):
            ap.error(f"--request-in-shared: values of 0, 1, 2, not '{args.request_in_shared}'")
        args.request_in_shared = modes
    args.torch_modes = [m.strip() for m in args.torch_modes.split(",") if m.strip()]
    bad = sorted(set(args.torch_modes) - set(TORCH_MODES) - {"eager_nocache"})
    if bad:
        ap.error(f"--torch-modes: unknown {', '.join(bad)}")
    return args


def batch_costs(args, runner: MegaRunner, module, weights: dict, binding: rp.Binding, batch: int,
                cost_table: tuple[dict, dict, dict] | None,
                report: dict) -> tuple[dict[int, float] | None, float | None, float | None]:
    """The cost policy's costs at `batch`, the draft's cost to catch up a position and its
    acceptance (None: the pipeline's defaults), as --costs says; noted in the report and printed
    with their launch parameters."""
    if "cost" not in args.policies and not args.calibrate_only:
        return None, None, None
    if args.costs == "defaults" and not args.calibrate_only:
        return None, None, None
    if cost_table is not None:
        costs, catchup, prior = cost_table[0][batch], cost_table[1].get(batch), cost_table[2].get(batch)
    else:
        cal = calibrate(runner, module, weights, binding, batch, rp.load_prompts(), args.calibrate_repeats)
        cal["team_warps"] = runner.chosen
        report["calibration"].append(cal)
        costs, catchup, prior = cal["costs_us"], cal["catchup_us"], cal["accept"]
    report["costs"][str(batch)] = {str(b): c for b, c in costs.items()}
    for key, value in (("catchup", catchup), ("accept", prior)):
        if value is not None:
            report[key][str(batch)] = value
    print(cost_line(batch, costs, binding, catchup, prior), flush=True)
    return costs, catchup, prior


def run(args: argparse.Namespace) -> dict:
    from xlgen.backends.build import load

    binding = rp.load_binding()
    prompts = rp.select_prompts(rp.load_prompts(args.prompts_file), args.prompts)
    rp.request_inputs(prompts, args.n, binding)  # every prompt fits, before anything runs
    weights = rp.load_weights(args.weights)
    recorded = rp.load_reference(args.reference, binding.reference_model)
    with_record = [i for i, p in enumerate(prompts) if p.name in recorded]  # the held-out set has none
    compiled = load(args.pipeline or binding.pipeline_path())
    module = compiled.sim_module()
    rp.check_binding(compiled.program, binding)
    from xlgen.runtime import gpu  # (no GPU needed: the environment's team, None for the runtime's choice)

    teams = args.team_warps or [gpu.team_warps_default()]
    if args.backend != "gpu":
        teams = teams[:1]
    modes = args.request_in_shared or [None]
    timed = next(p for p in __doc__.split("\n\n") if p.startswith("What is timed"))
    report = {"timed": " ".join(timed.split()), "backend": args.backend, "device": None,
              "torch": None, "n_new": args.n, "repeats": args.repeats, "prompts": [p.name for p in prompts],
              "prompts_file": str(args.prompts_file or rp.prompts_file()),
              "pytorch_compared": [prompts[i].name for i in with_record],
              "pipeline": str(args.pipeline or binding.pipeline_path()), "first_launch_s": {}, "rows": []}
    if args.backend == "gpu":
        import cupy

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        report["device"] = name.decode() if isinstance(name, bytes) else str(name)
    rows: list[Row] = []
    plain: list[list[int]] | None = None
    report.update(costs_source=args.costs if "cost" in args.policies or args.calibrate_only else None, costs={},
                  catchup={}, accept={}, calibration=[])
    cost_table = load_costs(Path(args.costs), args.batches) if args.costs not in ("calibrate", "defaults") else None
    for mode in modes:
        if args.backend == "gpu":
            set_request_mode(mode)
        for team in teams:
            if team is not None and team > 1 and mode == "2":
                print(f"team {team} with request mode 2: skipped (a team keeps its request in mode 0 or 1)")
                continue
            runner = MegaRunner(compiled, args.backend, team, args.timeout)
            t0 = time.perf_counter()  # the first launch: compile (or the cache), module load, weights' upload
            runner(rp.launch_params(module, weights, binding.params("plain")), rp.request_inputs(prompts[:1], 1, binding),
                   1)
            report["first_launch_s"][f"team {team or 'chosen'} mode {mode or 'default'}"] = time.perf_counter() - t0
            for batch in args.batches:
                costs, catchup, prior = batch_costs(args, runner, module, weights, binding, batch, cost_table, report)
                if args.calibrate_only:
                    continue
                for variant, params in mega_variants(binding, args.blocks, args.policies, costs, catchup, prior):
                    row, answers = bench_mega(runner, variant, rp.launch_params(module, weights, params), prompts,
                                              args.n, batch, args.repeats, plain, binding)
                    row.request_mode = mode
                    if plain is None:  # the first row: mega plain, the reference of every other
                        plain = answers
                        row.equal_plain = equal_count(answers, plain)
                    if variant == "mega plain" and with_record:  # the prompts PyTorch's tokens were recorded for
                        agreement = rp.compare_run([answers[i] for i in with_record], [prompts[i] for i in with_record],
                                                   recorded, args.n)
                        row.equal_pytorch = f"{sum(a.agrees for a in agreement)}/{len(agreement)}"
                        noise = all(a.within_noise for a in agreement)
                        report["pytorch_agrees"] = report.get("pytorch_agrees", True) and noise
                        if "agreement" not in report:  # the first plain run's, in full
                            report["agreement"] = [asdict(a) for a in agreement]
                            for a in agreement:
                                if not a.agrees:
                                    print(f"  {a.name}: {a.describe()}")
                    rows.append(row)
                    print(line(row), flush=True)
    if args.calibrate_only:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "costs.json").write_text(json.dumps({k: report[k] for k in ("device", "costs", "catchup", "accept", "calibration")},
                                                        indent=1) + "\n")
        return report
    if not args.no_torch:
        import torch

        import torch_baselines as tb

        device = "cuda" if args.backend == "gpu" else "cpu"
        torch.backends.cuda.matmul.allow_tf32 = False
        report["torch"] = torch.__version__
        cfg, arrays = tb.byte_lm.load_weights(rp.pair_file() if args.weights is None else args.weights,
                                              binding.reference_model)
        w = tb.byte_lm.torch_weights(arrays, device)
        for batch in args.batches:
            for mode in args.torch_modes:
                if mode == "eager_nocache" and batch != 1:
                    continue
                if mode.startswith(("graph", "compile")) and device != "cuda":
                    continue
                row, _ = bench_torch(mode, w, cfg, prompts, args.n, batch, args.repeats, device, plain)
                rows.append(row)
                print(line(row), flush=True)
    logs = list(args.limit_log)
    if args.limit_dir is not None:  # a failure here leaves every other row in the report (exit 1)
        t0 = time.perf_counter()
        try:
            logs.append(run_limit(args.limit_dir, args.limit_parts, args.out / "limit", args.limit_timeout))
        except (rp.RealPairError, subprocess.TimeoutExpired) as exc:
            report["limit_error"] = str(exc)
            print(f"hand-written limit: {exc}", file=sys.stderr)
        report["limit_seconds"] = round(time.perf_counter() - t0, 1)
    if logs or "limit_error" in report:
        report["limit"] = []
        for log in logs:
            parsed = parse_limit_log(Path(log).read_text())
            parsed["log"] = str(log)
            report["limit"].append(parsed)
            for failure in parsed["failed"]:
                print(f"hand-written limit: {failure} (see {log})", file=sys.stderr)
            for row in limit_rows(parsed, prompts, args.n):
                rows.append(row)
                print(line(row), flush=True)
        report["limit_equal_reference"] = "limit_error" not in report and all(p["rows"] for p in report["limit"]) \
            and all(r["tokens_equal"] == r["tokens"] for p in report["limit"] for r in p["rows"])
    report["rows"] = [r.to_json() for r in rows]
    report["all_equal_plain"] = all(r.all_equal for r in rows if not r.variant.startswith("limit "))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "real_bench.json").write_text(json.dumps(report, indent=1) + "\n")
    title = (f"Real model pair, {report['device'] or args.backend}: {len(prompts)} prompts x {args.n} new tokens, "
             f"best of {args.repeats} after a warm-up" + (f"; torch {report['torch']}" if report["torch"] else ""))
    (args.out / "real_bench.md").write_text(markdown(rows, title) + "\n" + summary(rows))
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = run(args)
    except rp.RealPairError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.calibrate_only:
        print(f"wrote {args.out / 'costs.json'}")
        return 0
    print(f"wrote {args.out / 'real_bench.json'} and {args.out / 'real_bench.md'}")
    status = 0
    if not report["all_equal_plain"]:
        print("some variant's tokens DIFFER from plain greedy's (see the table)", file=sys.stderr)
        status = 1
    if not report.get("limit_equal_reference", True):
        print("the hand-written limit's tokens DIFFER from PyTorch's recorded tokens, or it gave no results "
              "(see 'limit' and its cuda.log)", file=sys.stderr)
        status = 1
    if not report.get("pytorch_agrees", True):
        print("plain greedy DIFFERS from PyTorch's recorded tokens beyond float32 noise (see 'agreement')",
              file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
