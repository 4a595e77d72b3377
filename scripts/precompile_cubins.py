"""Compile a pipeline's GPU kernel here, with nvcc, into the cubin cache that gpu.compile_module
reads on the GPU machine, so that device calls spend no device time compiling (the real pair's
kernel takes 3-9 minutes of NVRTC per team shape there; device time is the scarce resource).

A cached cubin is named by the hash of the kernel's single source and its NVRTC options
(gpu.cubin_plan), and the source holds #line directives naming its files: compile from a
checkout at the same path as the device's copy (/work/main), with the same XLGEN_NVRTC_OPTIONS,
into a cache directory that travels with the call (ignored by git, named in `carry`):

    XLGEN_CACHE=$PWD/.xlcache python3 scripts/precompile_cubins.py --teams 32,16      # the real pair
    XLGEN_CACHE=$PWD/.xlcache python3 scripts/precompile_cubins.py --teams 16x4       # 4 blocks of 16 warps
    XLGEN_CACHE=$PWD/.xlcache XLGEN_NVRTC_OPTIONS=-DXL_ROWS_MAX=0 python3 scripts/precompile_cubins.py --teams 32
    XLGEN_CACHE=$PWD/.xlcache python3 scripts/precompile_cubins.py --teams 16x8 --timeline   # for --timeline runs
    XLGEN_CACHE=$PWD/.xlcache XLGEN_NVRTC_OPTIONS=-DXL_PROFILE_LINES python3 scripts/precompile_cubins.py --teams 16x8
                                                                # for scripts/line_profile.py --team-blocks 8
    # then, on the device:  export XLGEN_CACHE=$PWD/.xlcache  (after scripts/device_setup.sh)

--dry-run prints the cubins' paths without compiling. nvcc takes the NVRTC options but
-default-device (the runtime marks its device functions itself).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xlgen.backends.build import load
from xlgen.runtime import gpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pipeline", nargs="?", default=None, help="a .xl file (default: the real pair's pipeline)")
    ap.add_argument("--teams", default="32",
                    help="team shapes, a comma-separated list: warps, or warps x blocks (16x4); default 32")
    ap.add_argument("--arch", default="90", help="compute capability (default 90: H100/H200)")
    ap.add_argument("--timeline", action="store_true", help="the timeline build (gpu.run(timeline=True), --timeline)")
    ap.add_argument("--dry-run", action="store_true", help="print the cubins' paths only")
    args = ap.parse_args(argv)
    if args.pipeline is None:
        from xlgen.companion import load as load_companion
        from xlgen.core.resources import data_dir

        rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")
        args.pipeline = rp.load_binding().pipeline_path()
    compiled = load(args.pipeline)
    for shape in args.teams.split(","):
        team, _, blocks = shape.partition("x")
        team, blocks = int(team), int(blocks or 1)
        source, options, path = gpu.cubin_plan(compiled, team, args.arch, args.timeline, team_blocks=blocks)
        if args.dry_run or path.exists():
            print(f"{path} (team {shape}{', cached' if path.exists() else ''})")
            continue
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            cu = Path(d) / f"{compiled.name}_gpu.cu"
            cu.write_text(source)
            proc = subprocess.run(["nvcc", "-cubin", "-o", str(path), *[o for o in options if o != "-default-device"],
                                   str(cu)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"nvcc failed for team {shape}:\n{proc.stderr[-4000:]}", file=sys.stderr)
            return 1
        print(f"{path} (team {shape}, {time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
