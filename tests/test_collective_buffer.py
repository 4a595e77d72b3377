"""The collective stages' buffer (XlColl, xl_runtime.cuh): the host allocates it with
runtime/gpu.py's collective_words, the kernel carves it with xl_coll_words. The two are written
twice, in Python and in C++; a host buffer shorter than the kernel's layout would be memory the
GPU overwrites silently, so the CPU compiler checks that they agree (fast mode's epochs after it
too: xl_epoch_words)."""

import subprocess
from types import SimpleNamespace

import pytest

from xlgen.backends.build import load
from xlgen.core.resources import runtime_dir
from xlgen.runtime import gpu
from xlgen.runtime.cpu import compiler

PROGRAM = """#include "xl_spec_kernel.cuh"
#include <cstdio>
#include <initializer_list>
int main() {
    std::printf("%d\\n", (int)xl_spec::XL_SHARED_WORDS);
    for (int slots : {1, 7, 1024})
        for (unsigned overflow : {0u, 64u, 4096u})
            for (int n : {1, 33, 1000})
                std::printf("%d %u %d %llu %llu\\n", slots, overflow, n, (unsigned long long)xl_spec::xl_coll_words(slots, overflow),
                            (unsigned long long)xl_spec::xl_epoch_words(slots, n));
}
"""


def test_host_sizes_the_collective_buffer_as_the_kernel_lays_it_out(tmp_path):
    compiled = load("stages/xl_spec.xl")
    assert any(s.is_collective for s in compiled.program.stages)
    src, exe = tmp_path / "words.cpp", tmp_path / "words"
    src.write_text(PROGRAM)
    try:
        cxx = compiler()
    except Exception as e:  # noqa: BLE001 - no compiler: the CPU build's tests skip too
        pytest.skip(str(e))
    built = subprocess.run([cxx, "-std=c++17", f"-I{runtime_dir()}", f"-I{compiled.dir}", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    shared_words = int(lines[0])
    rows = [tuple(int(x) for x in line.split()) for line in lines[1:] if line]
    assert len(rows) == 27
    for slots, overflow, n, kernel_words, epoch_words in rows:
        config = SimpleNamespace(max_active=slots)
        assert gpu.collective_words(compiled.program, shared_words, config, slots, "deterministic", overflow) \
            == kernel_words, (slots, overflow)
        # fast mode: a slot per warp of the grid, then the epochs of n requests
        assert gpu.collective_words(compiled.program, shared_words, config, n, "fast", overflow, slots) \
            == kernel_words + epoch_words, (slots, overflow, n)
