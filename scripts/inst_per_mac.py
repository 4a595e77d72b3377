"""Warp instructions per multiply-add of the generated code (issue 23), counted by Nsight Compute.

    python3 scripts/inst_per_mac.py [out.json]        # on a GPU machine with ncu on PATH
    python3 scripts/inst_per_mac.py --stalls real-b8 [out.json]   # where the warps wait, by reason

Two kernels, each launched once under `ncu --metrics smsp__inst_executed.sum` (warp-level SASS
instructions executed, all SMs):
- gemv: examples/gemv/gemv.xl, 32 requests x 16 products of a 128x512 f32 matrix by a vector:
  nothing but matrix-vector loops (one reduction per row), so instructions / (MACs / 32) is the
  cost of one lane's multiply-add in them. A hand-written warp GEMV in the same order of
  additions issues ~3 (a load of each operand, a multiply and an add; the butterfly amortised).
- real: stages/byte_spec.xl, plain greedy decoding of prompt code_class (prefill + 8 tokens) by a
  team of 16 warps: the whole kernel (attention, norms, argmax, the round's control flow
  included) per multiply-add of the target's forward passes (matmuls + attention).

--stalls KERNEL: instead of counting, the average cycles a warp spent stalled per instruction it
issued, by reason (ncu's smsp__average_warps_issue_stalled_*_per_issue_active), for gemv, real,
or real-b8 (the real pair with a fixed block of 8: its verify passes hold 9 positions; 32 tokens).

Run it from a tree's root with that tree's xlgen on PYTHONPATH to compare two trees on one card.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))

GEMV_REQUESTS, ROWS, COLS, REPS = 32, 128, 512, 16
REAL_PROMPT, REAL_NEW = "code_class", 8


def child(which: str) -> None:
    """The launch that ncu counts (the first deterministic kernel of this process)."""
    from xlgen.backends.build import load
    from xlgen.runtime import gpu, sim

    if which == "gemv":
        compiled = load(ROOT / "examples/gemv/gemv.xl")
        rng = np.random.default_rng(13)
        w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        inputs = [{"x": [float(v) for v in rng.standard_normal(COLS).astype(np.float32)]}
                  for _ in range(GEMV_REQUESTS)]
        gpu.run(compiled, {"w": w}, inputs, sim.LaunchConfig(max_active=GEMV_REQUESTS))
        return
    from xlgen.companion import load as load_companion
    from xlgen.core.resources import data_dir

    rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")

    binding = rp.load_binding()
    prompts = rp.select_prompts(rp.load_prompts(), REAL_PROMPT)
    compiled = load(binding.pipeline_path())
    params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params("plain"))
    if which == "real-b8":
        params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params("fixed", 8))
    inputs = rp.request_inputs(prompts, REAL_NEW if which == "real" else 32, binding)
    gpu.run(compiled, params, inputs, sim.LaunchConfig(max_active=1, max_rounds=100000), team_warps=16)


def real_macs() -> int:
    """Multiply-adds of the target's passes for the prompt + REAL_NEW tokens: per position, the
    matmuls (4 layers of q, k, v, o: 4 x 128 x 128; up and down: 2 x 512 x 128) + the LM head
    (256 x 128) + attention over the context (scores and weighted sum: 2 x 128 per earlier
    position per layer)."""
    from xlgen.companion import load as load_companion
    from xlgen.core.resources import data_dir

    rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")

    prompt = rp.select_prompts(rp.load_prompts(), REAL_PROMPT)[0]
    n = len(prompt.data)
    positions = n + REAL_NEW - 1
    per_position = 4 * (4 * 128 * 128 + 2 * 512 * 128) + 256 * 128
    attention = sum(4 * 2 * 128 * (p + 1) for p in range(positions))
    return positions * per_position + attention


STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "wait", "math_pipe_throttle", "lg_throttle",
          "mio_throttle", "not_selected", "selected", "no_instruction", "branch_resolving", "dispatch_stall",
          "drain", "imc_miss", "misc", "sleeping", "tex_throttle")


def metrics(which: str, names: list[str]) -> dict[str, float]:
    cmd = ["ncu", "--csv", "--metrics", ",".join(names), "-k", "regex:xl_run_deterministic",
           "--launch-count", "1", sys.executable, __file__, "--child", which]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    rows = [r for r in csv.reader(io.StringIO(out.stdout[out.stdout.find('"ID"'):])) if r]
    if len(rows) < 2:
        raise SystemExit(f"ncu gave no metric for {which}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    header = rows[0]
    return {r[header.index("Metric Name")]: float(r[header.index("Metric Value")].replace(",", "")) for r in rows[1:]}


def count(which: str) -> int:
    return int(metrics(which, ["smsp__inst_executed.sum"])["smsp__inst_executed.sum"])


def stalls(which: str) -> dict:
    """Cycles per issued instruction, by stall reason, largest first; and the total."""
    names = [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALLS]
    got = metrics(which, names + ["smsp__inst_executed.sum", "smsp__warps_active.avg.per_cycle_active"])
    by = {r: got[f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio"] for r in STALLS}
    return {"kernel": which, "instructions": int(got["smsp__inst_executed.sum"]),
            "warps_active_per_scheduler": got["smsp__warps_active.avg.per_cycle_active"],
            "cycles_per_instruction": sum(by.values()),
            "stalls": dict(sorted(by.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2])
    if sys.argv[1:2] == ["--stalls"]:
        report = stalls(sys.argv[2])
        print(json.dumps(report, indent=1))
        if len(sys.argv) > 3:
            Path(sys.argv[3]).write_text(json.dumps(report, indent=1))
        return
    report = {}
    gemv_macs = GEMV_REQUESTS * ROWS * COLS * REPS
    inst = count("gemv")
    report["gemv"] = {"warp_instructions": inst, "macs": gemv_macs, "per_mac": inst / (gemv_macs / 32)}
    macs = real_macs()
    inst = count("real")
    report["real"] = {"warp_instructions": inst, "macs": macs, "per_mac": inst / (macs / 32),
                      "what": f"plain greedy, {REAL_PROMPT} + {REAL_NEW} tokens, team of 16 warps"}
    print(json.dumps(report, indent=1))
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
