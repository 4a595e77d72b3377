"""-DXL_PROFILE_LINES (scripts/line_profile.py, docs/gpu.md "Where a request's time goes, by line"):
the marks the C++ emitter puts after each lanes loop and reduction of a per-request stage and at
the stage's end, what they name, and that without the option they compile to nothing."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from xlgen.backends.build import load
from xlgen.core.resources import runtime_dir

ROOT = Path(__file__).resolve().parents[1]


def line_profile():
    spec = importlib.util.spec_from_file_location("line_profile", ROOT / "scripts" / "line_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_of(compiled) -> str:
    return (compiled.dir / f"{compiled.name}_kernel.cuh").read_text()


def test_marks_name_each_lanes_loop_reduction_and_stage_end():
    compiled = load(ROOT / "stages" / "byte_spec.xl")
    sites = line_profile().site_lines(kernel_of(compiled))
    assert sorted(sites) == list(range(len(sites)))  # numbered from 0, each once
    # the shared forward pass, once per stage that uses it: the target's scores loop, the draft's
    pass_text = (ROOT / "stages" / "byte_pass.xl").read_text().splitlines()
    line = 1 + next(k for k, x in enumerate(pass_text) if "lanes for e in 0..cnt * H * ctx {" in x)
    scores = [w for w in sites.values() if w.startswith(f"stages/byte_pass.xl:{line} ")]
    assert scores == [f"stages/byte_pass.xl:{line} in draft_forward", f"stages/byte_pass.xl:{line} in spec_verify"]
    assert "stages/byte_target.xl:15 in spec_verify (the stage's end)" in sites.values()
    # every per-request stage starts its clock; phase-2 stages (arbiters, collectives) have none
    code = kernel_of(compiled)
    per_request = [s for s in compiled.program.stages if not s.in_phase2]
    assert code.count("XL_LINE_START();") == len(per_request)
    assert len([w for w in sites.values() if w.endswith("(the stage's end)")]) == len(per_request)


def test_marks_are_nothing_unless_asked_for():
    runtime = (runtime_dir() / "xl_runtime.cuh").read_text()
    off = runtime[runtime.index("#if XL_ON_GPU && defined(XL_PROFILE_LINES)"):]
    off = off[off.index("#else"):off.index("#endif")]
    assert re.search(r"#define XL_LINE_START\(\) do \{ \} while \(0\)", off)
    assert re.search(r"#define XL_LINE_MARK\(site\) do \{ \} while \(0\)", off)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("team,blocks", [(1, 1), (8, 1), (8, 4)])
def test_the_profile_build_compiles_warning_free_with_nvcc(tmp_path, team, blocks):
    compiled = load(ROOT / "examples" / "gemv" / "gemv.xl")
    cluster = [f"-DXL_TEAM_BLOCKS={blocks}", "-DXL_REQUEST_IN_SHARED=1"] if blocks > 1 else []
    proc = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--fmad=false", "--ftz=false", "--prec-div=true",
         "--prec-sqrt=true", "-Werror", "all-warnings", "-DXL_PROFILE_LINES", f"-DXL_TEAM_WARPS={team}", *cluster,
         f"-I{runtime_dir()}", f"-I{compiled.dir}", str(compiled.dir / f"{compiled.name}_gpu.cu"),
         "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
