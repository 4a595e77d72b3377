"""`xlgen doctor`: what xlgen found on this machine, and how to fix what is missing."""

from __future__ import annotations
import sys
import click
from .group import _friendly, main


@main.command(epilog="""\b
Examples:
  xlgen doctor                 # before a first run, or when a GPU command says the GPU is unavailable
  CXX=clang++ xlgen doctor     # which compiler the CPU build would use
""")
@_friendly
def doctor():
    """Say what xlgen finds here and what is missing, with the command that fixes each missing piece.

    Checks Python, the xlgen install (version, where, its data files: grammar, templates,
    runtime, bundled pipelines and workloads), the C++ compiler the CPU build uses ($CXX, else
    g++, c++, clang++), the NVIDIA GPU and driver (nvidia-smi, and the CUDA version it
    supports), CuPy (its package, its CUDA version, the devices it sees), NVRTC, the compile
    cache directory ($XLGEN_CACHE, else $XDG_CACHE_HOME/xlgen, else ~/.cache/xlgen), and the
    optional Ray and PyTorch. Exit code 0 when everything the simulator and the CPU build need
    is there (a machine without a GPU passes), 1 otherwise.
    """
    from ..tools.doctor import diagnose

    report = diagnose()
    click.echo(report.text())
    sys.exit(0 if report.cpu_ready else 1)
