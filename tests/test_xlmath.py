"""exp, log, tanh, rsqrt: the simulator's numpy code (xlgen/semantics/xlmath.py) gives the bits
of the C++ (xl_runtime.cuh, compiled as the CPU build compiles it) on a million inputs,
and the results are close to the true function (docs/semantics.md §16.1 gives the exhaustive
maximum errors, from scripts/math_ulp.py)."""

import math
import subprocess

import numpy as np
import pytest

from xlgen.core.resources import runtime_dir
from xlgen.semantics import xlmath
from xlgen.runtime.cpu import CXX_FLAGS, compiler

FUNCTIONS = ("exp", "log", "tanh", "rsqrt")

HARNESS = r"""
#include <cstdio>
#include <vector>
#include "xl_runtime.cuh"
int main(int argc, char** argv) {
    FILE* in = fopen(argv[2], "rb");
    std::vector<uint32_t> v;
    uint32_t u;
    while (fread(&u, 4, 1, in) == 1) v.push_back(u);
    fclose(in);
    const char f = argv[1][0];
    for (auto& w : v) {
        const float x = xl_bits_float(w);
        const float y = f == 'e' ? xl_exp(x) : f == 'l' ? xl_log(x) : f == 't' ? xl_tanh(x) : xl_rsqrt(x);
        w = xl_float_bits(y);
    }
    FILE* out = fopen(argv[3], "wb");
    fwrite(v.data(), 4, v.size(), out);
    fclose(out);
    return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("xlmath")
    (d / "h.cpp").write_text(HARNESS)
    flags = [f for f in CXX_FLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run([compiler(), *flags, f"-I{runtime_dir()}", str(d / "h.cpp"), "-o", str(d / "h")], check=True)
    return d


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(16)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, 0.5, 1e-45, -1e-45, 1.17549435e-38,
                         88.72283, 88.72284, 89.0, -87.3, -103.97, -104.0, -104.1, 0.55, -0.55, 9.0, 9.01,
                         2.0 ** -12, 1.4142135, 1.4142137, 3.4028235e38], dtype=np.float32)
    bits = rng.integers(0, 1 << 32, 600_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ranges = [rng.uniform(-110, 100, 150_000), rng.uniform(-10, 10, 150_000), rng.uniform(0, 4, 100_000)]
    return np.concatenate([specials, bits] + [r.astype(np.float32) for r in ranges])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_numpy_and_cpp_give_the_same_bits(name, harness):
    x = _inputs()
    x.view(np.uint32).tofile(harness / "in.bin")
    subprocess.run([str(harness / "h"), name[0] if name != "rsqrt" else "r", str(harness / "in.bin"),
                    str(harness / "out.bin")], check=True)
    cpp = np.fromfile(harness / "out.bin", dtype=np.uint32)
    ours = getattr(xlmath, name)(x).view(np.uint32)
    nan = np.isnan(ours.view(np.float32))
    assert np.array_equal(np.isnan(cpp.view(np.float32)), nan)
    differ = np.flatnonzero((cpp != ours) & ~nan)
    assert differ.size == 0, f"{name}: {differ.size} inputs differ, e.g. x = {x[differ[:5]]!r}"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_scalar_calls_agree_with_arrays(name):
    x = _inputs()[:2000]
    arrays = getattr(xlmath, name)(x)
    for xi, yi in zip(x.tolist(), arrays.tolist()):
        got = getattr(xlmath, name)(xi)
        assert (got != got and yi != yi) or np.float32(got).view(np.uint32) == np.float32(yi).view(np.uint32)


@pytest.mark.parametrize("name, ref", [("exp", math.exp), ("log", math.log), ("tanh", math.tanh),
                                       ("rsqrt", lambda v: 1 / math.sqrt(v))])
def test_close_to_the_true_function(name, ref):
    rng = np.random.default_rng(3)
    x = {"exp": rng.uniform(-80, 80, 20000), "log": np.exp(rng.uniform(-80, 80, 20000)),
         "tanh": rng.uniform(-10, 10, 20000), "rsqrt": np.exp(rng.uniform(-80, 80, 20000))}[name].astype(np.float32)
    got = getattr(xlmath, name)(x).astype(np.float64)
    want = np.array([ref(float(v)) for v in x])
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    ulps = np.abs(got - want) / spacing
    assert ulps.max() <= 4, f"{name}: {ulps.max():.2f} ulp"
