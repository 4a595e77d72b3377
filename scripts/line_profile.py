"""Where a request's team spends its time, by line of the .xl source (GPU; issue 23).

The kernel is built with -DXL_PROFILE_LINES: at the end of every lanes loop and reduction of a
per-request stage, and at the stage's end, the first thread of the team adds the clock cycles
since the previous mark (or the stage's start) to that site's counter (xl_runtime.cuh). A lanes
loop ends with a team barrier, so a site's cycles are the team's time through that statement,
the scalar code since the previous site included. The table sums them over the launch.

    python3 scripts/line_profile.py -o OUT                     # the real pair, plain greedy, batch 1
    python3 scripts/line_profile.py -o OUT --block 8 --n 32    # a fixed block of 8 (verify passes of 9)

One request at a time (batch 1), so the counters are one team's critical path.

Its kernel is a build of its own (NVRTC takes minutes for it on the device): precompile it here
with the options this script adds, e.g. for a 16 x 8 team
`XLGEN_CACHE=$PWD/.xlcache XLGEN_NVRTC_OPTIONS=-DXL_PROFILE_LINES python3 scripts/precompile_cubins.py
--teams 16x8` (scripts/precompile_cubins.py says how the cache travels).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

from xlgen.companion import load as load_companion
from xlgen.core.resources import data_dir

rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")
SITES = 2048  # XL_LINE_SITES
CLOCK_GHZ = 1.98  # the H100's SM clock under load (clock64 counts SM cycles)


def site_lines(kernel_source: str) -> dict[int, str]:
    """Site number -> its `file:line` (and what), from the generated kernel's marks."""
    return {int(m[1]): m[2] for m in re.finditer(r"XL_LINE_MARK\((\d+)\);\s*// (.+)", kernel_source)}


def source_text(where: str, root: Path) -> str:
    path, _, rest = where.partition(":")
    line = int(rest.split()[0])  # "file:line in stage[ (the stage's end)]"
    for base in (root, data_dir("stages").parent):
        p = base / path
        if p.exists():
            return p.read_text().splitlines()[line - 1].strip()
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--team-warps", type=int, default=16)
    ap.add_argument("--team-blocks", type=int, default=1, help="blocks per team, a cluster (default 1)")
    ap.add_argument("--n", type=int, default=64, help="new tokens per prompt (default 64)")
    ap.add_argument("--block", type=int, default=0, help="a fixed block size (default 0: plain greedy)")
    ap.add_argument("--prompts", default="code_class,prose_modern", help="prompts by name or kind")
    ap.add_argument("--decode-only", action="store_true",
                    help="less a launch of 1 new token per prompt: the decode steps alone, per token")
    ap.add_argument("--pipeline", type=Path, default=None,
                    help="default: the binding's (models/bytes_pair/pipeline.json: stages/byte_spec.xl)")
    args = ap.parse_args(argv)
    os.environ["XLGEN_NVRTC_OPTIONS"] = (os.environ.get("XLGEN_NVRTC_OPTIONS", "") + " -DXL_PROFILE_LINES").strip()

    import cupy

    from xlgen.backends.build import load
    from xlgen.runtime import gpu, sim

    binding = rp.load_binding()
    compiled = load(args.pipeline or binding.pipeline_path())
    policy = ("fixed", args.block) if args.block else ("plain",)
    params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params(*policy))
    prompts = rp.select_prompts(rp.load_prompts(), args.prompts)
    module = gpu.compile_module(compiled, team_warps=args.team_warps, team_blocks=args.team_blocks).module
    memory = cupy.cuda.UnownedMemory(module.get_global_var("xl_line_prof"), SITES * 16, None)
    prof = cupy.ndarray((SITES, 2), dtype=cupy.uint64, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def launch(inputs):
        return gpu.run(compiled, params, inputs, sim.LaunchConfig(max_active=1), team_warps=args.team_warps,
                       team_blocks=args.team_blocks)

    def profile(n: int):
        """The counters and kernel ms of the prompts with n new tokens, one launch each (after a warm-up)."""
        counts, ms = 0, 0.0
        for prompt in prompts:  # one request per launch: the counters add one team's path
            inputs = rp.request_inputs([prompt], n, binding)
            launch(inputs)
            prof.fill(0)
            cupy.cuda.Device().synchronize()
            ms += launch(inputs).extra["timing"].kernel_ms
            counts = counts + prof.get().astype("int64")
        return counts, ms

    counts, kernel_ms = profile(args.n)
    tokens = args.n * len(prompts)
    if args.decode_only:  # less the launches of one token: the prefill and the first prediction
        first, first_ms = profile(1)
        counts, kernel_ms, tokens = counts - first, kernel_ms - first_ms, (args.n - 1) * len(prompts)
    sites = site_lines((compiled.dir / f"{compiled.name}_kernel.cuh").read_text())
    if sites and max(sites) >= SITES:  # the kernel folds site k into counter k % SITES
        raise SystemExit(f"{len(sites)} marked sites: more than XL_LINE_SITES ({SITES}) counters")
    by_line: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for site, where in sites.items():
        by_line[where][0] += int(counts[site][0])
        by_line[where][1] += int(counts[site][1])
    total = sum(c for c, _ in by_line.values())
    root = Path.cwd()
    rows = sorted(by_line.items(), key=lambda kv: -kv[1][0])
    what = (f"block {args.block}" if args.block else "plain greedy") + (", decode steps only" if args.decode_only else "")
    print(f"{what}, {len(prompts)} prompts x {args.n} tokens, team of {args.team_warps} warps"
          f"{f' x {args.team_blocks} blocks' if args.team_blocks > 1 else ''}: kernel {kernel_ms:.2f} ms, "
          f"marked {total / CLOCK_GHZ / 1e6:.2f} ms at {CLOCK_GHZ} GHz ({total / max(tokens, 1) / CLOCK_GHZ / 1e3:.1f} us per token)")
    print(f"{'site':52} {'share':>6} {'us/token':>9} {'times':>8} {'cycles/time':>11}  source")
    out = []
    for where, (cycles, times) in rows:
        if not cycles:
            continue
        share = cycles / total
        per_token = cycles / tokens / CLOCK_GHZ / 1e3
        text = source_text(where, root)
        out.append({"site": where, "cycles": cycles, "times": times, "share": share, "us_per_token": per_token,
                    "source": text})
        print(f"{where:52} {share:6.1%} {per_token:9.2f} {times:8d} {cycles / max(times, 1):11.0f}  {text[:70]}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "line_profile.json").write_text(json.dumps(
        {"what": what, "prompts": [p.name for p in prompts], "n": args.n, "team_warps": args.team_warps,
         "kernel_ms": kernel_ms, "clock_ghz": CLOCK_GHZ, "sites": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
