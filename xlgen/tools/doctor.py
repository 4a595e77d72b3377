"""`xlgen doctor`: what this machine has for xlgen, and for each missing piece the command that fixes it.

Every probe of the system (a program on PATH, a subprocess, an import, the environment) goes
through a `Probes` object, so the tests can take a piece away (no GPU, no compiler, no CuPy)
and check what the doctor concludes from what is left.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

OK, MISSING, WARN, OPTIONAL = "ok", "missing", "warning", "optional"


@dataclass
class Probes:
    """How the doctor looks at the machine (tests replace a piece)."""
    which: object = shutil.which
    run: object = None  # run(argv) -> (returncode, stdout); None: subprocess with a timeout
    import_module: object = importlib.import_module
    environ: dict = field(default_factory=lambda: os.environ)

    def output(self, argv: list[str]) -> tuple[int, str]:
        if self.run is not None:
            return self.run(argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            return 127, str(exc)
        return proc.returncode, proc.stdout + proc.stderr


@dataclass
class Finding:
    status: str  # ok, missing, warning, optional
    what: str
    found: str
    fix: str | None = None
    needed_for_cpu: bool = False


@dataclass
class Report:
    findings: list[Finding]

    @property
    def cpu_ready(self) -> bool:
        return all(f.status != MISSING for f in self.findings if f.needed_for_cpu)

    @property
    def gpu_ready(self) -> bool:
        return all(f.status == OK for f in self.findings if f.what in ("NVIDIA GPU", "CuPy", "NVRTC"))

    def text(self) -> str:
        width = max(len(f.what) for f in self.findings)
        lines = []
        for f in self.findings:
            lines.append(f"{f.status:<8} {f.what:<{width}}  {f.found}")
            if f.fix:
                lines.extend(f"{'':<8} {'':<{width}}  fix: {line}" for line in f.fix.splitlines())
        if self.cpu_ready:
            verdict = "the simulator and the CPU build are ready (xlgen sim, diff --backend cpu, demo --no-gpu)"
        else:
            verdict = "the CPU build is NOT ready: apply the fixes marked 'missing' above"
        gpu = ("the GPU backends are ready (xlgen run, bench, diff --backend gpu)" if self.gpu_ready
               else "the GPU backends are not available here (see the GPU lines above)")
        return "\n".join(lines + ["", f"summary: {verdict}; {gpu}."])


def diagnose(probes: Probes | None = None) -> Report:
    probes = probes or Probes()
    install = _install_command(probes)
    findings = [_python(), _xlgen(), _data_files(), _compiler(probes)]
    gpu, driver_cuda = _gpu(probes)
    findings.append(gpu)
    findings.extend(_cupy(probes, install, driver_cuda))
    findings.append(_cache(probes))
    findings.extend(_optional(probes, install))
    return Report(findings)


# ---- the probes ------------------------------------------------------------------------------


def _python() -> Finding:
    ok = sys.version_info >= (3, 11)
    return Finding(OK if ok else MISSING, "Python", f"{sys.version.split()[0]} ({sys.executable})",
                   None if ok else "xlgen needs Python 3.11 or newer", needed_for_cpu=True)


def _xlgen() -> Finding:
    from .. import __version__
    from ..core.resources import _REPO

    where = Path(__file__).resolve().parent.parent
    how = "a checkout (editable)" if (_REPO / "pyproject.toml").is_file() else "installed"
    return Finding(OK, "xlgen", f"{__version__} at {where} ({how})", needed_for_cpu=True)


def _data_files() -> Finding:
    """The grammar, templates, runtime, bundled pipelines, workloads and model pair the package
    reads at run time: a partial install shows here."""
    from ..core.resources import bundled_pipelines, data_dir, runtime_dir

    wanted = {"grammar": data_dir("grammar") / "xl.lark", "runtime": runtime_dir() / "xl_runtime.cuh",
              "prelude": runtime_dir() / "prelude.xl", "templates": data_dir("templates") / "cpu.cpp.j2",
              "workloads": data_dir("workloads") / "small.json",
              "models": data_dir("models") / "bytes_pair" / "pair.safetensors"}
    missing = [f"{name} ({path})" for name, path in wanted.items() if not path.is_file()]
    pipelines = bundled_pipelines()
    if not pipelines:
        missing.append(f"bundled pipelines ({data_dir('stages')})")
    if missing:
        return Finding(MISSING, "data files", "missing: " + ", ".join(missing),
                       "reinstall xlgen (pip install --force-reinstall xlgen); from a checkout: pip install -e .",
                       needed_for_cpu=True)
    names = ", ".join(pipelines)
    return Finding(OK, "data files", f"grammar, templates, runtime, workloads, models; bundled pipelines: {names} "
                                     f"({data_dir('stages')})", needed_for_cpu=True)


def _compiler(probes: Probes) -> Finding:
    """The C++ compiler the CPU build uses: $CXX, else g++, c++, clang++ (xlgen.runtime.cpu)."""
    for name in (probes.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and probes.which(name):
            rc, out = probes.output([name, "--version"])
            version = out.strip().splitlines()[0] if rc == 0 and out.strip() else f"({name} --version failed)"
            source = " ($CXX)" if name == probes.environ.get("CXX") else ""
            return Finding(OK if rc == 0 else WARN, "C++ compiler", f"{name}{source}: {version}",
                           None if rc == 0 else f"check that `{name} --version` runs, or set CXX to another "
                                                "compiler", needed_for_cpu=True)
    cxx = probes.environ.get("CXX")
    note = f" ($CXX={cxx} is not on PATH)" if cxx else ""
    return Finding(MISSING, "C++ compiler", f"none found: g++, c++, clang++{note}",
                   "install one: sudo apt-get install g++ (Debian/Ubuntu), sudo dnf install gcc-c++ (Fedora), "
                   "xcode-select --install (macOS); or set CXX=/path/to/compiler", needed_for_cpu=True)


def _gpu(probes: Probes) -> tuple[Finding, int | None]:
    """The NVIDIA driver and GPUs, from nvidia-smi; the CUDA major version the driver supports."""
    if not probes.which("nvidia-smi"):
        return Finding(MISSING, "NVIDIA GPU", "nvidia-smi not found: no NVIDIA driver on this machine",
                       "the GPU backends need an NVIDIA GPU and its driver (https://www.nvidia.com/drivers); "
                       "without one, sim, diff --backend cpu and demo --no-gpu run on the CPU"), None
    rc, out = probes.output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    gpus = [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []
    if not gpus:
        return Finding(MISSING, "NVIDIA GPU", f"nvidia-smi found no GPU ({out.strip()[:200] or f'exit {rc}'})",
                       "check the driver: nvidia-smi should list the GPU"), None
    rc2, banner = probes.output(["nvidia-smi"])
    found = re.search(r"CUDA Version:\s*([0-9]+)(?:\.([0-9]+))?", banner) if rc2 == 0 else None
    cuda = f"; the driver supports CUDA {found.group(1)}.{found.group(2) or 0}" if found else ""
    names = "; ".join(f"{g.split(',')[0].strip()} (driver {g.split(',')[-1].strip()})" for g in gpus)
    return Finding(OK, "NVIDIA GPU", f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {names}{cuda}"), \
        (int(found.group(1)) if found else None)


def _extra_for(driver_cuda: int | None) -> list[str]:
    if driver_cuda is None:
        return ["gpu-cuda13", "gpu-cuda12"]
    return ["gpu-cuda13"] if driver_cuda >= 13 else ["gpu-cuda12"]


def _cupy_fix(install: str, driver_cuda: int | None) -> str:
    extras = _extra_for(driver_cuda)
    if len(extras) == 1:
        return f"{install.format(extra=extras[0])}   # CuPy for the driver's CUDA {driver_cuda}"
    return (f"{install.format(extra='gpu-cuda13')}   # a CUDA 13 driver (nvidia-smi: 'CUDA Version: 13.x')\n"
            f"{install.format(extra='gpu-cuda12')}   # a CUDA 12 driver")


def _cupy(probes: Probes, install: str, driver_cuda: int | None) -> list[Finding]:
    """CuPy (its package, version and CUDA), a GPU it can use, and NVRTC (which compiles the kernels)."""
    try:
        cupy = probes.import_module("cupy")
    except Exception as exc:  # not installed, or installed for a CUDA this machine lacks
        missing = isinstance(exc, ModuleNotFoundError)
        found = "not installed" if missing else f"does not import: {type(exc).__name__}: {str(exc)[:200]}"
        fix = _cupy_fix(install, driver_cuda)
        if not missing:
            fix = "pip uninstall cupy-cuda12x cupy-cuda13x, then\n" + fix
        return [Finding(MISSING, "CuPy", found, fix),
                Finding(MISSING, "NVRTC", "not checked (it comes with CuPy)", None)]
    out = []
    try:
        runtime = cupy.cuda.runtime.runtimeGetVersion()
        cuda = f"CUDA {runtime // 1000}.{runtime % 1000 // 10}"
        cupy_cuda = runtime // 1000
    except Exception as exc:
        cuda, cupy_cuda = f"CUDA version unknown ({type(exc).__name__})", None
    package = _cupy_package()
    status, fix = OK, None
    if driver_cuda is not None and cupy_cuda is not None and cupy_cuda > driver_cuda:
        status = WARN
        fix = (f"CuPy is built for CUDA {cupy_cuda}, the driver supports {driver_cuda}: "
               f"pip uninstall {package or 'cupy'}, then {install.format(extra=f'gpu-cuda{driver_cuda}')}")
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        devices, status = 0, MISSING if status == OK else status
        fix = fix or f"CuPy cannot reach a GPU ({type(exc).__name__}: {str(exc)[:160]}); check the driver"
    out.append(Finding(status, "CuPy", f"{cupy.__version__} ({package or 'package unknown'}), {cuda}, "
                                       f"{devices} device{'s' if devices != 1 else ''}", fix))
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
        out.append(Finding(OK, "NVRTC", f"{major}.{minor}"))
    except Exception as exc:
        out.append(Finding(MISSING, "NVRTC", f"not usable: {type(exc).__name__}: {str(exc)[:200]}",
                           f"NVRTC comes with the CUDA toolkit or the nvidia-cuda-nvrtc wheel: "
                           f"{install.format(extra=f'gpu-cuda{cupy_cuda or 13}')} (and the CUDA libraries CuPy "
                           "names in its error)"))
    return out


def _cupy_package() -> str | None:
    from importlib import metadata

    for name in ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return None


def _cache(probes: Probes) -> Finding:
    from ..core.resources import cache_root

    root = cache_root(probes.environ)
    if probes.environ.get("XLGEN_CACHE"):
        how = "$XLGEN_CACHE"
    elif probes.environ.get("XDG_CACHE_HOME"):
        how = "$XDG_CACHE_HOME/xlgen; $XLGEN_CACHE moves it"
    else:
        how = "the default; $XLGEN_CACHE or $XDG_CACHE_HOME moves it"
    probe = root if root.is_dir() else next((p for p in root.parents if p.exists()), None)
    writable = probe is not None and probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
    if writable:
        return Finding(OK, "compile cache", f"{root} ({how})", needed_for_cpu=True)
    return Finding(MISSING, "compile cache", f"{root} is not writable ({how})",
                   "export XLGEN_CACHE=/a/writable/directory", needed_for_cpu=True)


def _optional(probes: Probes, install: str) -> list[Finding]:
    import importlib.util

    out = []
    for module, what, extra, use in (("ray", "Ray", "sweep", "xlgen sweep, run|bench --gpus N"),
                                     ("torch", "PyTorch", "bench", "scripts/ baselines, models/ training")):
        present = importlib.util.find_spec(module) is not None
        out.append(Finding(OK if present else OPTIONAL, what, f"{'installed' if present else 'not installed'} ({use})",
                           None if present else install.format(extra=extra)))
    return out


def _install_command(probes: Probes) -> str:
    """`pip install "xlgen[EXTRA]"`, or the editable form in a checkout."""
    from ..core.resources import _REPO

    if (_REPO / "pyproject.toml").is_file():
        return f'pip install -e "{_REPO}[{{extra}}]"'
    return 'pip install "xlgen[{extra}]"'
