"""Where the real pair's kernel waits, by line of the .xl source and of the runtime (issue 23).

Nsight Compute samples the program counter of the team's warps (its SourceCounters section)
while the mega-kernel decodes; each sample is a warp at an instruction, issuing or stalled,
with the reason. This script maps the sampled SASS instructions to the source lines that made
them (the generated CUDA's #line directives name the .xl files; the runtime's templates are
xl_runtime.cuh) and sums the samples per line, with the reasons.

Two steps, since ncu runs only on the GPU machine and the cubin's line table is read here:

    # on the GPU machine (ncu on PATH), with the cubin built with -lineinfo:
    XLGEN_NVRTC_OPTIONS=-lineinfo python3 scripts/stall_lines.py sample -o OUT [--block 8] [--n 32]
    # here, with nvdisasm, the same cubin (XLGEN_CACHE=.xlcache XLGEN_NVRTC_OPTIONS=-lineinfo
    # python3 scripts/precompile_cubins.py prints its path):
    python3 scripts/stall_lines.py lines OUT/sass_samples.json --cubin CUBIN [--top 40]
    python3 scripts/stall_lines.py phase2 OUT/sass_samples.json --cubin CUBIN   # phase 2's parts

`sample` writes sass_samples.json: every SASS instruction of xl_run_deterministic that was
sampled or executed, in program order, with its samples by reason. `lines` aligns them with
nvdisasm's listing of the same function (the opcodes must agree, else it stops) and prints the
lines that hold the most samples. A sample counts a warp, so with a team of 32 warps at batch 1
a line's share is the share of the team's warp-time spent there, stalled or not.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
KERNEL = "xl_run_deterministic"


def child(block: int, n: int, team: int) -> None:
    """The launch ncu samples: prompt code_class, n new tokens, plain greedy or a fixed block."""
    from xlgen.backends.build import load
    from xlgen.companion import load as load_companion
    from xlgen.core.resources import data_dir
    from xlgen.runtime import gpu, sim

    rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")
    binding = rp.load_binding()
    compiled = load(binding.pipeline_path())
    policy = ("fixed", block) if block else ("plain",)
    params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params(*policy))
    inputs = rp.request_inputs(rp.select_prompts(rp.load_prompts(), "code_class"), n, binding)
    gpu.run(compiled, params, inputs, sim.LaunchConfig(max_active=1, max_rounds=100000), team_warps=team)


def parse_source_csv(text: str) -> list[dict]:
    """ncu's source page (--page source --csv --print-source sass) as rows: the opcode text and
    every numeric column (samples by reason, instructions executed), in program order."""
    rows = list(csv.reader(io.StringIO(text[max(text.find('"Address"'), 0):])))  # after the kernel's name
    header, out = rows[0], []
    source_col = header.index("Source")
    for r in rows[1:]:
        if len(r) != len(header):
            continue
        row = {"sass": r[source_col].strip(), "counts": {}}
        for name, value in zip(header, r):
            if name in ("Address", "Source"):
                continue
            try:
                v = float(value.replace(",", ""))
            except ValueError:
                continue
            if v:
                row["counts"][name] = v
        out.append(row)
    return out


def sample(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rep = Path(args.report) if args.report else out / "stalls"
    cmd = ["ncu", "--clock-control", "none", "--section", "SourceCounters", "--section", "WarpStateStats",
           "-k", f"regex:{KERNEL}", "--launch-count", "1", "-f", "-o", str(rep),
           sys.executable, __file__, "child", str(args.block), str(args.n), str(args.team_warps)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    (out / "ncu.log").write_text(done.stdout[-20000:] + done.stderr[-20000:])
    page = subprocess.run(["ncu", "-i", f"{rep}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
                          capture_output=True, text=True, timeout=args.timeout)
    if page.returncode != 0 or not page.stdout:
        raise SystemExit(f"ncu's source page failed:\n{page.stderr[-3000:]}")
    (out / "source_page.csv.gz").write_bytes(gzip.compress(page.stdout.encode()))  # to parse again here
    rows = parse_source_csv(page.stdout)
    kept = [{"index": i, **r} for i, r in enumerate(rows) if r["counts"]]
    (out / "sass_samples.json").write_text(json.dumps(
        {"kernel": KERNEL, "block": args.block, "n": args.n, "team_warps": args.team_warps,
         "instructions": len(rows), "rows": kept}) + "\n")
    print(f"{len(rows)} SASS instructions, {len(kept)} with counts: {out / 'sass_samples.json'}")
    return 0


def opcode(sass: str) -> str:
    """The opcode of a SASS instruction's text ('@P0 BRA 0x...' -> 'BRA'), predicate and operands dropped."""
    words = sass.replace(";", " ").split()
    words = [w for w in words if not w.startswith("@") and not w.startswith("{")]
    return words[0].split(".")[0] if words else ""


def disassembly_lines(cubin: Path, function: str = KERNEL) -> list[tuple[str, list[str]]]:
    nvdisasm = os.environ.get("NVDISASM", "nvdisasm")
    text = subprocess.run([nvdisasm, "-c", "-gi", str(cubin)], capture_output=True, text=True, check=True).stdout
    return parse_disassembly(text, function)


def parse_disassembly(text: str, function: str = KERNEL) -> list[tuple[str, list[str]]]:
    """(opcode, its source places innermost first) per SASS instruction of the function, in
    program order, from nvdisasm's listing with the inlined line table (-gi): before an
    instruction whose place changed, one `//## File "F", line N [inlined at ...]` line per
    level, innermost first."""
    out, inside, places, chain = [], False, [], []
    for line in text.splitlines():
        if line.startswith("//----"):
            inside = len(line.split()) > 1 and line.split()[1] == f".text.{function}"
            continue
        if not inside:
            continue
        if line.lstrip().startswith("//## File"):
            m = re.search(r'"([^"]+)", line (\d+)', line)
            chain.append(f"{m[1]}:{m[2]}")
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            places, chain = (chain or places), []  # no new entry: the previous instruction's places
            out.append((opcode(m[1]), places))
    return out


def xl_sites(kernel_source: str) -> list[str]:
    """Per line of the generated kernel (1-based), the .xl statement its code belongs to: the
    next XL_LINE_MARK's (a mark ends a lanes loop, a reduction or a stage: line_profile.py)."""
    lines = kernel_source.splitlines()
    out, after = [""] * (len(lines) + 2), "(after the last mark)"
    for k in range(len(lines), 0, -1):
        m = re.search(r"XL_LINE_MARK\(\d+\);\s*// (\S+)", lines[k - 1])
        if m:
            after = m[1]
        out[k] = after
    return out


def short(where: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{Path(path).name}:{line}"


SAMPLES = "Warp Stall Sampling (All Samples)"


def kernel_place(row: dict, listing, kernel: str) -> tuple[list[str], str | None]:
    """A sampled instruction's source places (innermost first) and its innermost place in the
    generated kernel, if any. Stops where its opcode is not nvdisasm's (another cubin)."""
    op, places = listing[row["index"]]
    if op != opcode(row["sass"]):
        raise SystemExit(f"instruction {row['index']}: ncu has {row['sass']!r}, nvdisasm {op}: not the same cubin")
    return places, next((p for p in places if p.rsplit(":", 1)[0] == kernel), None)


def attribute(rows: list[dict], listing, sites: list[str], kernel: str):
    """Each sampled instruction's counts added to its .xl line (by_line) and to that line and its
    innermost source place (by_inner: the runtime's template code, a kernel line); by_op: per
    .xl line, per full opcode, the instructions executed. Stops where an instruction's opcode
    is not nvdisasm's (another cubin)."""
    by_line = defaultdict(lambda: defaultdict(float))
    by_inner = defaultdict(lambda: defaultdict(float))
    by_op = defaultdict(lambda: defaultdict(float))
    for row in rows:
        places, in_kernel = kernel_place(row, listing, kernel)
        xl = sites[int(in_kernel.rsplit(":", 1)[1])] if in_kernel else short(places[-1] if places else "?")
        inner = short(places[0]) if places else "?"
        for name, v in row["counts"].items():
            by_line[xl][name] += v
            by_inner[xl + " <- " + inner][name] += v
        full = [w for w in row["sass"].split() if not w.startswith("@")]
        by_op[xl][full[0] if full else "?"] += row["counts"].get("Instructions Executed", 0.0)
    return by_line, by_inner, by_op


def lines(args) -> int:
    data = json.loads(Path(args.samples).read_text())
    listing = disassembly_lines(Path(args.cubin))
    if len(listing) != data["instructions"]:
        raise SystemExit(f"nvdisasm lists {len(listing)} instructions, ncu {data['instructions']}: not the same cubin")
    kernel = next(Path(args.cubin).resolve().parent.glob("*_kernel.cuh"))
    by_line, by_inner, by_op = attribute(data["rows"], listing, xl_sites(kernel.read_text()), str(kernel))
    total = sum(c.get(SAMPLES, 0.0) for c in by_line.values())
    reasons = sorted({k for c in by_line.values() for k in c if k.startswith("stall_") and "Not Issued" not in k})
    for title, table in (("lines of the .xl source", by_line), ("the same, by the innermost line (runtime code)", by_inner)):
        rows = sorted(table.items(), key=lambda kv: -kv[1].get(SAMPLES, 0.0))
        print(f"{total:.0f} samples; the {args.top} {title} holding the most (share of all samples):")
        for where, c in rows[:args.top]:
            s = c.get(SAMPLES, 0.0)
            top = sorted(((c[k], k) for k in reasons if k in c), reverse=True)[:3]
            print(f"{where:64} {s / total:6.1%}  executed {c.get('Instructions Executed', 0):>10.0f}  "
                  + ", ".join(f"{k}: {v / s:.0%}" for v, k in top if s))
    for where in args.mix or []:
        ops = by_op.get(where, {})
        fmul = ops.get("FMUL", 0.0)
        print(f"{where}: {sum(ops.values()):.0f} warp instructions executed, {sum(ops.values()) / fmul:.2f} per FMUL"
              if fmul else f"{where}: no FMUL executed")
        for op, n in sorted(ops.items(), key=lambda kv: -kv[1])[:16]:
            print(f"  {op:24} {n:>10.0f}" + (f"  {n / fmul:5.2f} per FMUL" if fmul else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"total_samples": total, "lines": [
            {"line": w, "share": c.get(SAMPLES, 0.0) / total, **c, "opcodes": dict(by_op[w])}
            for w, c in sorted(by_line.items(), key=lambda kv: -kv[1].get(SAMPLES, 0.0))]}, indent=1) + "\n")
    return 0


def phase2_regions(kernel_source: str) -> dict[int, str]:
    """Kernel line -> the part of phase 2 it belongs to: a collective stage's code ("NAME (its
    code)", from its `// FILE:LINE: collective NAME` mark), its `Stage_NAME` wrapper (guard, segment
    dispatch, trace: "NAME (its wrapper)") or the driver `run_collective`; lines of anything else
    are absent."""
    out, region = {}, None
    lines = kernel_source.splitlines()
    for number, text in enumerate(lines, 1):
        mark = re.match(r"// \S+:\d+: (collective stage|collective|stage|arbiter) (\w+)$", text)
        if mark:
            kind, name = mark.groups()
            region = {"collective": f"{name} (its code)", "collective stage": f"{name} (its wrapper)"}.get(kind)
        elif text.startswith("XL_DEVICE bool run_collective("):
            region = "run_collective (the driver)"
        elif text.startswith(("template <typename S>", "XL_DEVICE void xl_emit(", "XL_DEVICE int retire_check(")):
            region = None
        if region:
            out[number] = region
    return out


def phase2(args) -> int:
    """Phase 2's share of the samples: per part (each collective stage's code and wrapper, the
    driver), the samples, the stalls of those not at a barrier, and the warp instructions executed."""
    data = json.loads(Path(args.samples).read_text())
    listing = disassembly_lines(Path(args.cubin))
    if len(listing) != data["instructions"]:
        raise SystemExit(f"nvdisasm lists {len(listing)} instructions, ncu {data['instructions']}: not the same cubin")
    kernel = next(Path(args.cubin).resolve().parent.glob("*_kernel.cuh"))
    by_part = phase2_attribute(data["rows"], listing, phase2_regions(kernel.read_text()), str(kernel))
    total = defaultdict(float)
    for counts in by_part.values():
        for name, v in counts.items():
            total[name] += v
    print(f"phase 2's code, {data.get('n', '?')} new tokens (block {data.get('block', 0) or 'plain'}): samples, the "
          "stalls of those not at a barrier, warp instructions executed (every warp of the block counted)")
    for part, counts in sorted(by_part.items(), key=lambda kv: -kv[1].get(SAMPLES, 0.0)) + [("all", total)]:
        print(f"  {part:40} {phase2_line(counts)}")
    return 0


def phase2_attribute(rows: list[dict], listing, regions: dict[int, str], kernel: str) -> dict[str, dict]:
    """Each sampled instruction's counts added to the phase-2 part of its innermost kernel line."""
    by_part = defaultdict(lambda: defaultdict(float))
    for row in rows:
        _places, in_kernel = kernel_place(row, listing, kernel)
        part = regions.get(int(in_kernel.rsplit(":", 1)[1])) if in_kernel else None
        if part:
            for name, v in row["counts"].items():
                by_part[part][name] += v
    return by_part


def phase2_line(counts: dict) -> str:
    stalls = {k[len("stall_"):]: v for k, v in counts.items() if k.startswith("stall_") and "Not Issued" not in k}
    busy = sum(stalls.values()) - stalls.get("barrier", 0.0)
    mix = ", ".join(f"{k} {v / busy:.0%}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
                    if k != "barrier") if busy else "-"
    return (f"{counts.get(SAMPLES, 0.0):>7.0f} samples, {busy:>6.0f} not at a barrier: {mix}; "
            f"{counts.get('Instructions Executed', 0.0):>10.0f} instructions")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="on the GPU machine: ncu's samples of one launch")
    s.add_argument("-o", "--out", required=True)
    s.add_argument("--block", type=int, default=0, help="a fixed block (verify passes of block + 1); 0: plain greedy")
    s.add_argument("--n", type=int, default=32, help="new tokens (default 32)")
    s.add_argument("--team-warps", type=int, default=32)
    s.add_argument("--timeout", type=int, default=480)
    s.add_argument("--report", help="the ncu report's path, less .ncu-rep (default OUT/stalls)")
    c = sub.add_parser("child")
    c.add_argument("block", type=int)
    c.add_argument("n", type=int)
    c.add_argument("team", type=int)
    m = sub.add_parser("lines", help="here: the samples by source line")
    m.add_argument("samples")
    m.add_argument("--cubin", required=True)
    m.add_argument("--top", type=int, default=40)
    m.add_argument("--mix", action="append", metavar="LINE",
                   help="also the instruction mix of a .xl line (e.g. stages/byte_pass.xl:125), per FMUL")
    m.add_argument("--json", help="also write every line's counts here")
    q = sub.add_parser("phase2", help="here: phase 2's samples, by collective stage and driver")
    q.add_argument("samples")
    q.add_argument("--cubin", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "child":
        child(args.block, args.n, args.team)
        return 0
    return {"sample": sample, "lines": lines, "phase2": phase2}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
