"""Warp instructions per multiply-add of the generated code (issue 23), counted by Nsight Compute.

    python3 scripts/inst_per_mac.py [out.json]        # on a GPU machine with ncu on PATH

Two kernels, each launched once under `ncu --metrics smsp__inst_executed.sum` (warp-level SASS
instructions executed, all SMs):
- gemv: examples/gemv/gemv.xl, 32 requests x 16 products of a 128x512 f32 matrix by a vector:
  nothing but matrix-vector loops (one reduction per row), so instructions / (MACs / 32) is the
  cost of one lane's multiply-add in them. A hand-written warp GEMV in the same order of
  additions issues ~3 (a load of each operand, a multiply and an add; the butterfly amortised).
- real: stages/byte_spec.xl, plain greedy decoding of prompt code_class (prefill + 8 tokens) by a
  team of 16 warps: the whole kernel (attention, norms, argmax, the round's control flow
  included) per multiply-add of the target's forward passes (matmuls + attention).

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
    inputs = rp.request_inputs(prompts, REAL_NEW, binding)
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


def count(which: str) -> int:
    cmd = ["ncu", "--csv", "--metrics", "smsp__inst_executed.sum", "-k", "regex:xl_run_deterministic",
           "--launch-count", "1", sys.executable, __file__, "--child", which]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600)
    rows = [r for r in csv.reader(io.StringIO(out.stdout[out.stdout.find('"ID"'):])) if r]
    if len(rows) < 2:
        raise SystemExit(f"ncu gave no metric for {which}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    header = rows[0]
    value = rows[1][header.index("Metric Value")]
    return int(value.replace(",", ""))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2])
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
