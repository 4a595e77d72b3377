"""Code generation: generated/ is current, generated CUDA compiles warning-free,
builds write only what changed, and the diff tooling agrees on every example."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen import runtime
from xlgen.backends.build import build_pipeline, load, render
from xlgen.frontend.checker import load_program
from xlgen.cli import main
from xlgen.core.resources import runtime_dir
from xlgen.tools.check.testing import BackendMismatch, assert_backends_agree

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = "stages/xl_spec.xl"
PROGRAMS = sorted(p for p in (ROOT / "tests" / "programs").glob("*.xl"))


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # generated files name their sources relative to here


def test_generated_dir_is_what_xlgen_build_emits():
    program, _ = load_program(BUNDLED)
    files = render(program)
    assert sorted(files) == sorted(p.name for p in (ROOT / "generated").iterdir() if p.is_file())
    stale = [name for name, text in files.items() if (ROOT / "generated" / name).read_text() != text]
    assert not stale, f"generated/ is stale ({', '.join(stale)}): run `xlgen build {BUNDLED} -o generated/`"


def test_build_writes_only_what_changed(tmp_path):
    first = build_pipeline(BUNDLED, tmp_path)
    assert set(first.values()) == {"created"}
    second = build_pipeline(BUNDLED, tmp_path)
    assert set(second.values()) == {"unchanged"}
    target = tmp_path / "xl_spec_sim.py"
    target.write_text(target.read_text() + "# edited\n")
    third = build_pipeline(BUNDLED, tmp_path)
    assert third[str(target)] == "updated"


def test_generated_code_names_its_source_and_marks_stage_lines():
    files = render(load_program(BUNDLED)[0])
    for name, text in files.items():
        assert f"from {BUNDLED}" in text.splitlines()[0], name
    kernel = files["xl_spec_kernel.cuh"]
    for stage in ("prefill", "decode", "spec_verify", "commit"):
        assert f": stage {stage}\n" in kernel
    assert "// stages/verify.xl:" in kernel
    # Device decorations come only through the runtime's macros (XL_DEVICE, XL_HD), which
    # the CPU build maps away: a raw __device__ here would break the host compiler.
    assert "__device__" not in kernel and "XL_DEVICE" in kernel


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_generated_cuda_compiles_warning_free_with_nvcc(tmp_path):
    source = ROOT / "generated" / "xl_spec_gpu.cu"
    proc = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "-Werror", "all-warnings",
         f"-I{runtime_dir()}", f"-I{ROOT / 'generated'}", str(source), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_every_example_program_compiles_for_the_gpu(path, tmp_path):
    compiled = load(path)
    proc = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "-Werror", "all-warnings",
         f"-I{runtime_dir()}", f"-I{compiled.dir}", str(compiled.dir / f"{compiled.name}_gpu.cu"),
         "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_every_example_program_agrees_across_backends(xl_diff, path):
    inputs = [{} for _ in range(5)]
    xl_diff(path, inputs=inputs, max_active=3, max_rounds=500, backends=["cpu"])


def test_bundled_pipeline_agrees_on_bundled_workloads():
    for workload in ("small", "mixed"):
        results = assert_backends_agree(BUNDLED, workload, backends=["cpu"])
        assert len(results["sim"].records) > 0


def test_a_divergence_fails_with_the_first_differing_record(monkeypatch):
    real_run = runtime.cpu.run

    def tampered(*args, **kwargs):
        result = real_run(*args, **kwargs)
        result.records[3, 5] ^= 1  # flip one bit of one traced value
        return result

    monkeypatch.setattr(runtime.cpu, "run", tampered)
    with pytest.raises(BackendMismatch) as info:
        assert_backends_agree(BUNDLED, "small", backends=["cpu"])
    message = str(info.value)
    assert "traces differ (sim vs cpu) at record 3" in message
    assert "source: stages/" in message


def test_cli_build_check_reports_stale_output(tmp_path):
    runner = CliRunner()
    out = tmp_path / "gen"
    assert runner.invoke(main, ["build", BUNDLED, "-o", str(out)]).exit_code == 0
    assert runner.invoke(main, ["build", BUNDLED, "-o", str(out), "--check"]).exit_code == 0
    (out / "xl_spec_sim.py").write_text("stale")
    result = runner.invoke(main, ["build", BUNDLED, "-o", str(out), "--check"])
    assert result.exit_code == 1


def test_cli_diff_and_sim_exit_codes():
    runner = CliRunner()
    result = runner.invoke(main, ["diff", BUNDLED, "-w", "small", "--backend", "cpu"])
    assert result.exit_code == 0, result.output
    assert "identical: sim == cpu" in result.output
    result = runner.invoke(main, ["sim", BUNDLED, "-w", "small", "--show", "n_out,total_accepted"])
    assert result.exit_code == 0, result.output
    assert "7 done, 0 failed" in result.output
    result = runner.invoke(main, ["sim", BUNDLED, "-w", "no_such_workload"])
    assert result.exit_code == 2 and "no such workload" in result.output
