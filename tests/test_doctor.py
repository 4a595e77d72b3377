"""`xlgen doctor`: what it finds, what it concludes, and the fixes it prints.

The machine's probes (programs on PATH, their output, imports, the environment) are replaced
where a test takes a piece away or adds a GPU; the doctor's own conclusions are never faked.
"""

from __future__ import annotations

import re
import types

import pytest
from click.testing import CliRunner

from xlgen import __version__
from xlgen.cli import main
from xlgen.tools.doctor import MISSING, OK, WARN, Probes, diagnose


def _no_cupy(name):
    if name == "cupy":
        raise ModuleNotFoundError("No module named 'cupy'")
    raise AssertionError(f"unexpected import {name}")


def _probes(path=("g++",), outputs=None, import_module=_no_cupy, environ=None):
    """A machine with the programs in `path`; `outputs` maps argv[0] (or the whole argv joined) to (rc, text)."""
    outputs = outputs or {}

    def run(argv):
        key = " ".join(argv)
        if key in outputs:
            return outputs[key]
        if argv[0] in outputs:
            return outputs[argv[0]]
        return 0, f"{argv[0]} (fake) 1.0\n"

    return Probes(which=lambda name: f"/usr/bin/{name}" if name in path else None, run=run,
                  import_module=import_module, environ=dict(environ or {"XLGEN_CACHE": "/tmp/xlgen-doctor-test"}))


def _finding(report, what):
    return next(f for f in report.findings if f.what == what)


def test_a_machine_without_a_gpu_is_ready_for_the_cpu_build():
    report = diagnose(_probes())
    assert report.cpu_ready and not report.gpu_ready
    assert _finding(report, "C++ compiler").status == OK
    assert "g++ (fake) 1.0" in _finding(report, "C++ compiler").found
    gpu = _finding(report, "NVIDIA GPU")
    assert gpu.status == MISSING and "nvidia-smi not found" in gpu.found
    cupy = _finding(report, "CuPy")
    assert cupy.status == MISSING and cupy.found == "not installed"
    assert "[gpu-cuda13]" in cupy.fix and "[gpu-cuda12]" in cupy.fix  # no driver to say which: both lines
    text = report.text()
    assert "summary: the simulator and the CPU build are ready" in text
    assert "the GPU backends are not available here" in text
    assert "fix: " in text


def test_no_compiler_is_missing_for_the_cpu_build_and_says_how_to_get_one():
    report = diagnose(_probes(path=()))
    compiler = _finding(report, "C++ compiler")
    assert compiler.status == MISSING and "apt-get install g++" in compiler.fix and "CXX" in compiler.fix
    assert not report.cpu_ready
    assert "the CPU build is NOT ready" in report.text()


def test_cxx_names_the_compiler_the_cpu_build_uses():
    report = diagnose(_probes(path=("g++", "clang++"), environ={"CXX": "clang++", "XLGEN_CACHE": "/tmp/x"}))
    assert _finding(report, "C++ compiler").found.startswith("clang++ ($CXX)")
    report = diagnose(_probes(path=("g++",), environ={"CXX": "icpx", "XLGEN_CACHE": "/tmp/x"}))
    assert _finding(report, "C++ compiler").found.startswith("g++")  # $CXX not on PATH: the fallback, as cpu.py


NVIDIA_SMI = {
    "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader": (0, "NVIDIA H100 80GB HBM3, 580.95\n"),
    "nvidia-smi": (0, "| NVIDIA-SMI 580.95   Driver Version: 580.95   CUDA Version: 13.0 |\n"),
}


def test_the_driver_picks_the_cupy_extra():
    report = diagnose(_probes(path=("g++", "nvidia-smi"), outputs=NVIDIA_SMI))
    gpu = _finding(report, "NVIDIA GPU")
    assert gpu.status == OK and "NVIDIA H100 80GB HBM3 (driver 580.95)" in gpu.found and "CUDA 13.0" in gpu.found
    cupy = _finding(report, "CuPy")
    assert "[gpu-cuda13]" in cupy.fix and "[gpu-cuda12]" not in cupy.fix
    cuda12 = dict(NVIDIA_SMI, **{"nvidia-smi": (0, "Driver Version: 550.1   CUDA Version: 12.4")})
    assert "[gpu-cuda12]" in _finding(diagnose(_probes(path=("g++", "nvidia-smi"), outputs=cuda12)), "CuPy").fix


def _fake_cupy(runtime_version=13000, devices=1, nvrtc=(13, 0)):
    def nvrtc_version():
        if nvrtc is None:
            raise RuntimeError("libnvrtc.so.13: cannot open shared object file")
        return nvrtc

    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: runtime_version, getDeviceCount=lambda: devices)
    cuda = types.SimpleNamespace(runtime=runtime, nvrtc=types.SimpleNamespace(getVersion=nvrtc_version))
    module = types.SimpleNamespace(__version__="13.6.0", cuda=cuda)
    return lambda name: module


def test_a_working_gpu_stack():
    report = diagnose(_probes(path=("g++", "nvidia-smi"), outputs=NVIDIA_SMI, import_module=_fake_cupy()))
    assert report.cpu_ready and report.gpu_ready
    assert "13.6.0" in _finding(report, "CuPy").found and "CUDA 13.0" in _finding(report, "CuPy").found
    assert _finding(report, "NVRTC").found == "13.0"
    assert "the GPU backends are ready" in report.text()


def test_cupy_for_a_newer_cuda_than_the_driver_is_a_warning_with_the_fix():
    cuda12 = dict(NVIDIA_SMI, **{"nvidia-smi": (0, "CUDA Version: 12.8")})
    report = diagnose(_probes(path=("g++", "nvidia-smi"), outputs=cuda12, import_module=_fake_cupy(13000)))
    cupy = _finding(report, "CuPy")
    assert cupy.status == WARN and "built for CUDA 13, the driver supports 12" in cupy.fix
    assert "[gpu-cuda12]" in cupy.fix and not report.gpu_ready


def test_nvrtc_missing_is_reported():
    report = diagnose(_probes(path=("g++", "nvidia-smi"), outputs=NVIDIA_SMI, import_module=_fake_cupy(nvrtc=None)))
    nvrtc = _finding(report, "NVRTC")
    assert nvrtc.status == MISSING and "libnvrtc.so.13" in nvrtc.found and nvrtc.fix
    assert report.cpu_ready and not report.gpu_ready


def test_an_unwritable_cache_is_missing(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    report = diagnose(_probes(environ={"XLGEN_CACHE": str(locked / "cache")}))
    cache = _finding(report, "compile cache")
    import os

    if os.access(locked, os.W_OK):  # root writes anywhere: nothing to refuse
        pytest.skip("running as root")
    assert cache.status == MISSING and "XLGEN_CACHE" in cache.fix and not report.cpu_ready


def test_the_cache_line_says_where_and_why(tmp_path):
    report = diagnose(_probes(environ={"XDG_CACHE_HOME": str(tmp_path)}))
    cache = _finding(report, "compile cache")
    assert cache.status == OK and cache.found.startswith(f"{tmp_path}/xlgen ($XDG_CACHE_HOME/xlgen")


def test_the_command_on_this_machine():
    """The real probes: the CPU build is what CI has, so the exit code is 0 with or without a GPU."""
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    for what in ("Python", "xlgen", "data files", "C++ compiler", "NVIDIA GPU", "CuPy", "NVRTC", "compile cache"):
        assert f" {what} " in result.output, what
    assert re.search(rf"^ok +xlgen +{re.escape(__version__)} at ", result.output, re.M), result.output
    assert "bundled pipelines: byte_spec, xl_spec" in result.output
    assert "summary: the simulator and the CPU build are ready" in result.output


def test_doctor_help_has_examples():
    result = CliRunner().invoke(main, ["doctor", "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output and "xlgen doctor" in result.output
