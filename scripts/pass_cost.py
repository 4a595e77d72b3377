"""What a pass of the real pair's target over 9 positions costs against a pass over 1 (issue 23:
"the 9-position pass within 2x a 1-position pass").

Both are measured inside one stage, so no round or launch overhead enters either: plain greedy
decoding of one new token after a prompt of L bytes brings the target's KV rows up to the
prompt in passes of CHUNK (9) positions, then predicts. So, with T(L) the kernel time of that
launch (best of --repeats after a warm-up; one request, a team of --team-warps warps):

    pass of 9 positions = the slope of T(9 * m) over m = m1..m2 (least squares)
    pass of 1 position  = the median over m = m1..m2 of T(9 * m + 1) - T(9 * m)   (one byte more)

at contexts around 9 * m (attention grows with the context; the matrix-vector work does not). A
single difference of two launches of ~1 ms moves by tens of microseconds from launch to launch;
the median of m2 - m1 + 1 of them, each of the best of --repeats, does not.

    python3 scripts/pass_cost.py -o /tmp/pc            # on a GPU
    python3 scripts/pass_cost.py -o /tmp/pc --backend cpu --repeats 1   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from xlgen.companion import load as load_companion
from xlgen.core.resources import data_dir

rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")
CHUNK = 9  # positions per pass (byte_model.xl)


def kernel_ms(compiled, params: dict, prompt: bytes, backend: str, team_warps: int, repeats: int) -> float:
    from xlgen.runtime import cpu, sim

    inputs = rp.request_inputs([rp.Prompt("p", "random", prompt)], 1)
    config = sim.LaunchConfig(max_active=1)
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        if backend == "gpu":
            from xlgen.runtime import gpu

            result = gpu.run(compiled, params, inputs, config, team_warps=team_warps)
            times.append(result.extra["timing"].kernel_ms)
        else:
            t0 = time.perf_counter()
            cpu.run(compiled, params, inputs, config)
            times.append((time.perf_counter() - t0) * 1e3)
    return min(times[1:]) if repeats else times[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True, help="output directory (pass_cost.json)")
    ap.add_argument("--backend", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--team-warps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunks", default="4,8", help="m1,m2: prompts of CHUNK * m bytes for m = m1..m2 (default 4,8)")
    ap.add_argument("--pipeline", type=Path, default=None,
                    help="default: the binding's (models/bytes_pair/pipeline.json: stages/byte_spec.xl)")
    args = ap.parse_args(argv)
    m1, m2 = (int(x) for x in args.chunks.split(","))
    binding = rp.load_binding()
    from xlgen.backends.build import load

    compiled = load(args.pipeline or binding.pipeline_path())
    params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params("plain"))
    data = np.random.default_rng(1).integers(32, 127, size=CHUNK * m2 + 1, dtype=np.uint8).tobytes()

    def t(n: int) -> float:
        return kernel_ms(compiled, params, data[:n], args.backend, args.team_warps, args.repeats)

    ms = list(range(m1, m2 + 1))
    times = {n: t(n) for m in ms for n in (CHUNK * m, CHUNK * m + 1)}
    pass9 = float(np.polyfit(ms, [times[CHUNK * m] for m in ms], 1)[0])
    ones = [times[CHUNK * m + 1] - times[CHUNK * m] for m in ms]
    pass1 = float(np.median(ones))
    out = {"backend": args.backend, "team_warps": args.team_warps, "repeats": args.repeats,
           "kernel_ms_by_prompt_bytes": times, "pass9_us": pass9 * 1e3, "pass1_us": pass1 * 1e3,
           "pass1_us_each": [x * 1e3 for x in ones], "ratio": pass9 / pass1 if pass1 > 0 else None}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "pass_cost.json").write_text(json.dumps(out, indent=1) + "\n")
    print("kernel ms by prompt bytes: " + ", ".join(f"{n}: {v:.3f}" for n, v in times.items()))
    print(f"pass of 9 positions {pass9 * 1e3:.1f} us, of 1 position {pass1 * 1e3:.1f} us "
          f"(median of {', '.join(f'{x * 1e3:.1f}' for x in ones)}): "
          f"ratio {out['ratio']:.2f}" if out["ratio"] else "pass of 1 position: not resolved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
