"""Weight-once passes (xlgen/backends/grouping.py): which lanes loops the C++ code runs a row at a
time, and that doing so changes no bit: the CPU build (and the GPU, with every team shape)
against the simulator, with partial groups, a range that starts mid-row, and tails that fail
for some iterations."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xlgen.backends import grouping
from xlgen.backends.build import load, load_text
from xlgen.core import ir
from xlgen.runtime import cpu, sim
from xlgen.tools.check.diff import compare

# Positions x rows over n positions from position `first`: sums reading row i of `w` and the
# position's slice of `x`; the tail stores, and for rows past `limit` reads past `x` (an
# INDEX error for those iterations only, the lowest failing one reported).
PASS = """pipeline passes
const K: i32 = 8
const P: i32 = 5
tensor w: f32[K, 40]
request {
    first: i32
    skip: i32
    n: i32
    limit: i32 = 100
    x: f32[P * 40]
    y: f32[P * K]
    z: f32[P * K]
    done_: bool
}
stage pass when !done_ {
    lanes for e in first * K + skip..n * K {
        let t = e / K
        let i = e % K
        let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])
        let b = sum(j in 0..40: w[i, j] * w[i, j] - x[t * 40 + j])
        let c = sum(j in 0..33: x[t * 40 + j] * (t as f32))
        y[e] = a + b
        let at = i > limit ? P * 40 + t : t
        z[e] = c + x[at]
    }
    done_ = true
}
trace pass: y, z
done when done_
"""


def lanes_loops(compiled) -> list[ir.Lanes]:
    return [s for st in compiled.program.stages for s in ir.statements(st.body) if isinstance(s, ir.Lanes)]


def kernel(compiled) -> str:
    return next(text for name, text in compiled.files.items() if name.endswith("_kernel.cuh"))


def inputs_for(cases):
    rng = np.random.default_rng(7)
    return [{"first": first, "n": n, "limit": limit, "skip": skip,
             "x": rng.standard_normal(5 * 40).astype(np.float32).tolist()} for first, n, limit, skip in cases]


# (first position, end position, rows past which the tail fails, iterations skipped at the start).
# Grouped (xl_lanes_grouped) from 4 positions per row on average (XL_GROUP_MIN_POSITIONS): the
# first, third, fourth, fifth and last; the others run one iteration at a time.
CASES = [(0, 5, 100, 0), (0, 1, 100, 0), (0, 5, 100, 3), (1, 5, 5, 0), (0, 5, 0, 0), (0, 3, 100, 0),
         (0, 6, 100, 0), (0, 4, 100, 5), (2, 5, 100, 0)]


def weights():
    return {"w": (np.arange(8 * 40, dtype=np.float32).reshape(8, 40) / 7.0 - 20.0)}


def test_the_pass_is_grouped_with_the_weight_read_once():
    compiled = load_text(PASS, "passes.xl")
    code = kernel(compiled)
    # bound 40 (y, z of P * K), K = 8: groups of up to 5 positions
    assert "xl_lanes_grouped<true, 8, 5>(err, 1, xl_lo, xl_hi, xl_lo >= 0 && xl_hi <= 40" in code
    assert code.count("xl_sum_group<float, 5>") == 3
    # the weight is read once per element for every position of the group; a sum with no
    # weight (c) reads nothing once
    assert re.search(r"return p\.w\[\(xl_idx_v\(xl_chk, err, 1, \d+, i, 8, \d+\)\) \* 40 \+ \(int32_t\)\(j\)\]; \},", code)
    assert "return xl_fmul(xl_w, r.x[" in code  # the position's element
    assert "[](int32_t) -> int32_t { return 0; }," in code


def test_what_is_not_grouped():
    def plan_of(body: str):
        source = PASS.replace(PASS[PASS.index("    lanes for"):PASS.index("    done_ = true")], body)
        return [grouping.plan(s, 40) for s in lanes_loops(load_text(source, "passes.xl"))]

    split = "        let t = e / K\n        let i = e % K\n"
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..40: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") != [None]
    # a sum whose range depends on the position
    assert plan_of("    lanes for e in 0..n * K {\n" + split
                   + "        let a = sum(j in 0..t + 1: w[i, j] * x[t * 40 + j])\n        y[e] = a\n    }\n") == [None]
    # no split of the loop variable
    assert plan_of("    lanes for e in 0..n * K {\n"
                   + "        let a = sum(j in 0..40: w[e % K, j])\n        y[e] = a\n    }\n") == [None]
    # two different splits
    assert plan_of("    lanes for e in 0..n * K {\n        let t = e / K\n        let i = e % 4\n"
                   + "        let a = sum(j in 0..40: w[i, j])\n        y[e] = a\n    }\n") == [None]
    # a sum whose range reads an earlier sum (per position): the head ends before it (fuzz seed 4103995)
    assert [r.name for r in plan_of("    lanes for e in 0..n * K {\n" + split
                                    + "        let a = sum(j in 0..40: w[i, j])\n"
                                    + "        let b = sum(j in 0..clamp(a as i32, 0, 40): w[i, j])\n"
                                    + "        y[e] = b\n    }\n")[0].sums] == ["a"]
    # a sum reading a local of the body other than the split
    assert plan_of("    lanes for e in 0..n * K {\n" + split + "        let a = sum(j in 0..40: w[i, j])\n"
                   + "        let b = sum(j in 0..40: w[i, j] * a)\n        y[e] = b\n    }\n")[0].sums[0].name == "a"
    # not versioned (no bound): a grouped loop's fast path is the only one grouped
    loop = lanes_loops(load_text(PASS, "passes.xl"))[0]
    assert grouping.plan(loop, None) is None and grouping.plan(loop, 8) is None  # one position per group


def test_the_real_pairs_matrix_vector_passes_are_grouped():
    code = kernel(load("stages/byte_spec.xl"))
    # target: qkv, wo, up, down, the LM head; draft: qkv, wo, up, down
    assert code.count("xl_lanes_grouped<") == 9


def test_cpu_build_equals_the_simulator():
    compiled = load_text(PASS, "passes.xl")
    inputs = inputs_for(CASES)
    config = sim.LaunchConfig(max_active=len(inputs), max_rounds=5)
    want = sim.run(compiled.sim_module(), weights(), inputs, config)
    got = cpu.run(compiled, weights(), inputs, config)
    assert compare(compiled.program, want, got) is None
    errors = {int(r[0]) for r in want.records if int(r[2]) == sim.KIND_ERROR}
    # the failing tails (limit 5 and 0) and the range past the arrays (6 positions)
    assert errors == {3, 4, 6}, errors


@pytest.mark.gpu
@pytest.mark.parametrize("team_warps", [1, 4, 16])
def test_gpu_equals_the_simulator(team_warps):
    gpu = pytest.importorskip("xlgen.runtime.gpu")
    if not gpu.available():
        pytest.skip("needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
    compiled = load_text(PASS, "passes.xl")
    inputs = inputs_for(CASES * 3)
    config = sim.LaunchConfig(max_active=len(inputs), max_rounds=5)
    want = sim.run(compiled.sim_module(), weights(), inputs, config)
    got = gpu.run(compiled, weights(), inputs, config, mode="deterministic", team_warps=team_warps)
    assert compare(compiled.program, want, got) is None


def test_pass_cost_script_runs_on_the_cpu_build(tmp_path):
    """scripts/pass_cost.py end to end on the CPU build (its GPU numbers are in docs/benchmarks.md):
    four launches of the real pair, prompts of 9 * m1, 9 * m1 + 1, 9 * m2 and 9 * m2 + 1 bytes."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "pass_cost.py"), "-o", str(tmp_path),
                           "--backend", "cpu", "--repeats", "0", "--chunks", "1,2"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads((tmp_path / "pass_cost.json").read_text())
    assert sorted(int(n) for n in got["kernel_ms_by_prompt_bytes"]) == [9, 10, 18, 19]
    assert all(t > 0 for t in got["kernel_ms_by_prompt_bytes"].values())
    assert got["backend"] == "cpu" and "pass9_us" in got and "pass1_us" in got
