"""scripts/stall_lines.py: ncu's source page, nvdisasm's inlined line table and the kernel's line
marks put together (the GPU and nvdisasm parts run on the GPU machine and in the issue's notes;
these are the parsers and the attribution, on text in the tools' formats)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("stall_lines", ROOT / "scripts" / "stall_lines.py")
sl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sl)

KERNEL = "/w/x_kernel.cuh"
RUNTIME = "/w/xl_runtime.cuh"

# ncu --page source --csv --print-source sass (Nsight Compute 2025.3), columns cut to a few
SOURCE_PAGE = '''"Kernel Name","xl_run_deterministic",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","Address Space","stall_long_sb","stall_wait","stall_long_sb (Not Issued)"
"0x7fa3b2e00000","      LDC R1, c[0x0][0x28]","0","0","32","-","0","0","0"
"0x7fa3b2e00010","      LDG.E R4, desc[UR26][R2.64]","3","2","1,024","Global","1","2","1"
"0x7fa3b2e00020","      @!P0 FMUL R5, R4, R4","7","5","2,048","-","6","1","5"
"0x7fa3b2e00030","      EXIT","0","0","0","-","0","0","0"
'''

DISASSEMBLY = f'''//--------------------- .text.xl_run_fast --------------------------
        /*0000*/                   NOP ;
//--------------------- .text.xl_run_deterministic --------------------------
xl_run_deterministic:
	//## File "{KERNEL}", line 3 inlined at "/w/x_gpu.cu", line 40
	//## File "/w/x_gpu.cu", line 40
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "{RUNTIME}", line 249 inlined at "{KERNEL}", line 7
	//## File "{KERNEL}", line 7 inlined at "/w/x_gpu.cu", line 40
	//## File "/w/x_gpu.cu", line 40
        /*0010*/                   LDG.E R4, desc[UR26][R2.64] ;
        /*0020*/              @!P0 FMUL R5, R4, R4 ;  /* 0x0000000404057220 */
	//## File "/w/x_gpu.cu", line 41
        /*0030*/                   EXIT ;
//--------------------- SYMBOLS --------------------------
'''

KERNEL_SOURCE = "\n".join([
    "line 1",
    "line 2",
    "    XL_LINE_MARK(0);  // stages/a.xl:10 in s",
    "line 4",
    "line 5",
    "line 6",
    "line 7",
    "    XL_LINE_MARK(1);  // stages/a.xl:12 in s",
    "line 9",
])


def test_source_page_rows_in_program_order_with_their_counts():
    rows = sl.parse_source_csv(SOURCE_PAGE)
    assert [sl.opcode(r["sass"]) for r in rows] == ["LDC", "LDG", "FMUL", "EXIT"]
    assert rows[1]["counts"] == {"Warp Stall Sampling (All Samples)": 3.0, "Warp Stall Sampling (Not-issued Samples)": 2.0,
                                 "Instructions Executed": 1024.0, "stall_long_sb": 1.0, "stall_wait": 2.0,
                                 "stall_long_sb (Not Issued)": 1.0}
    assert rows[3]["counts"] == {}


def test_disassembly_of_one_function_with_inlined_places():
    listing = sl.parse_disassembly(DISASSEMBLY)
    assert [op for op, _ in listing] == ["LDC", "LDG", "FMUL", "EXIT"]
    assert listing[0][1] == [f"{KERNEL}:3", "/w/x_gpu.cu:40"]
    assert listing[1][1] == [f"{RUNTIME}:249", f"{KERNEL}:7", "/w/x_gpu.cu:40"]
    assert listing[2][1] == listing[1][1]  # no new line table entry: the previous instruction's places
    assert listing[3][1] == ["/w/x_gpu.cu:41"]


def test_a_kernel_line_belongs_to_the_next_mark():
    sites = sl.xl_sites(KERNEL_SOURCE)
    assert [sites[k] for k in (1, 3, 4, 7, 8, 9)] == ["stages/a.xl:10", "stages/a.xl:10", "stages/a.xl:12",
                                                     "stages/a.xl:12", "stages/a.xl:12", "(after the last mark)"]


def test_samples_attributed_to_xl_lines_and_runtime_places():
    rows = [{"index": i, **r} for i, r in enumerate(sl.parse_source_csv(SOURCE_PAGE)) if r["counts"]]
    by_line, by_inner, by_op = sl.attribute(rows, sl.parse_disassembly(DISASSEMBLY), sl.xl_sites(KERNEL_SOURCE), KERNEL)
    assert by_line["stages/a.xl:10"]["Instructions Executed"] == 32
    assert by_line["stages/a.xl:12"][sl.SAMPLES] == 10
    assert by_line["stages/a.xl:12"]["stall_long_sb"] == 7
    assert by_inner["stages/a.xl:12 <- xl_runtime.cuh:249"][sl.SAMPLES] == 10
    assert dict(by_op["stages/a.xl:12"]) == {"LDG.E": 1024.0, "FMUL": 2048.0}


def test_another_cubin_is_refused():
    rows = [{"index": 1, "sass": "FADD R1, R2, R3", "counts": {"Instructions Executed": 1.0}}]
    with pytest.raises(SystemExit, match="not the same cubin"):
        sl.attribute(rows, sl.parse_disassembly(DISASSEMBLY), sl.xl_sites(KERNEL_SOURCE), KERNEL)


# A generated kernel's phase-2 parts (kernel.cuh.j2): a collective stage's code after its
# `collective NAME` mark, its Stage_ wrapper after `collective stage NAME`, the driver
# run_collective; per-request stages, xl_emit and run_stage belong to none.
PHASE2_SOURCE = "\n".join([
    "// stages/a.xl:3: stage s",              # 1 a per-request stage's code
    "XL_STAGE XlErr stage_s() {",
    "// stages/kv.xl:9: collective kv",       # 3 the collective stage's code
    "XL_DEVICE XlErr stage_kv() {",
    "}",
    "XL_DEVICE void xl_emit(XlSink sink) {",  # 6
    "// stages/a.xl:3: stage s",              # 7 a per-request stage's wrapper
    "struct Stage_s {",
    "// stages/kv.xl:9: collective stage kv",  # 9 the collective stage's wrapper
    "struct Stage_kv {",
    "template <typename S>",                  # 11 run_stage
    "XL_DEVICE bool run_stage() {",
    "template <typename S>",                  # 13
    "XL_DEVICE bool run_collective(Request* reqs) {",
    "    return true;",
    "XL_DEVICE int retire_check() {",         # 16
])


def test_phase2_parts_of_the_kernel():
    regions = sl.phase2_regions(PHASE2_SOURCE)
    assert regions == {3: "kv (its code)", 4: "kv (its code)", 5: "kv (its code)", 9: "kv (its wrapper)",
                       10: "kv (its wrapper)", 14: "run_collective (the driver)", 15: "run_collective (the driver)"}
    # the LDC's kernel line is 3 (kv's code); the LDG's and FMUL's is 7, a per-request stage's wrapper:
    # not phase 2. Moved to line 4, they are kv's too.
    rows = [{"index": i, **r} for i, r in enumerate(sl.parse_source_csv(SOURCE_PAGE)) if r["counts"]]
    by_part = sl.phase2_attribute(rows, sl.parse_disassembly(DISASSEMBLY), regions, KERNEL)
    assert {k: dict(v) for k, v in by_part.items()} == {"kv (its code)": {"Instructions Executed": 32.0}}
    moved = sl.parse_disassembly(DISASSEMBLY.replace(f'"{KERNEL}", line 7', f'"{KERNEL}", line 4'))
    by_part = sl.phase2_attribute(rows, moved, regions, KERNEL)
    assert set(by_part) == {"kv (its code)"} and by_part["kv (its code)"]["stall_long_sb"] == 7
    assert by_part["kv (its code)"]["Instructions Executed"] == 32 + 1024 + 2048
    assert sl.phase2_line(by_part["kv (its code)"]).split(":")[0].split() == ["10", "samples,", "10", "not", "at", "a",
                                                                               "barrier"]
