"""Measure the exact math functions (docs/semantics.md §16.1) and check that every backend agrees.

The functions are defined once as a sequence of binary32 operations and implemented in
xl_runtime.cuh (C++/CUDA) and xlgen/semantics/xlmath.py (Python floats and numpy arrays).

  python scripts/math_ulp.py                      # all 2^32 inputs of every function, C++ (OpenMP)
  python scripts/math_ulp.py --functions exp,log  # some of them
  python scripts/math_ulp.py --sample 1000000     # a random sample (plus the special inputs) instead
  python scripts/math_ulp.py --python 1000000     # Python scalar and numpy vs the C++ bits, N inputs each
  python scripts/math_ulp.py --gpu                # on a GPU machine: the GPU's bits vs the CPU build's,
                                                  # all 2^32 inputs (needs nvcc; scripts/math_ulp_gpu.cu)

Error is measured against binary64 libm rounded once to binary32, which is the correctly rounded
result except in astronomically rare double-rounding cases. "max ulps" is the distance in
representable binary32 steps from that result (0: correctly rounded); "max error" is
|result - exact| / ulp(exact) with the binary64 value as exact.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xlgen.semantics import xlmath  # noqa: E402
from xlgen.runtime.cpu import CXX_FLAGS, compiler  # noqa: E402

FUNCTIONS = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt"]  # the order of XLM_* in math_ulp.cpp
SOURCE = Path(__file__).with_name("math_ulp.cpp")
RUNTIME = ROOT / "xlgen" / "runtime"


class Result(ctypes.Structure):
    _fields_ = [("inputs", ctypes.c_uint64), ("not_rounded", ctypes.c_uint64), ("nan_mismatch", ctypes.c_uint64),
                ("max_dist", ctypes.c_int64), ("max_dist_input", ctypes.c_uint32), ("max_err_input", ctypes.c_uint32),
                ("max_err", ctypes.c_double), ("fingerprint", ctypes.c_uint64)]


def build(openmp: bool = True, out_dir: Path | None = None) -> ctypes.CDLL:
    """Compile math_ulp.cpp with the CPU build's flags (plus OpenMP) once per content."""
    flags = [*CXX_FLAGS, "-fopenmp"] if openmp else [*CXX_FLAGS, "-Wno-unknown-pragmas"]
    text = SOURCE.read_text() + (RUNTIME / "xl_runtime.cuh").read_text() + " ".join(flags)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    out_dir = out_dir or Path(tempfile.gettempdir()) / "xlgen_math_ulp"
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / f"math_ulp_{digest}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = [compiler(), *flags, f"-I{RUNTIME}", str(SOURCE), "-o", str(tmp), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"compiling {SOURCE} failed:\n{proc.stderr[-4000:]}")
        os.replace(tmp, lib)
    so = ctypes.CDLL(str(lib))
    so.xlm_eval.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    so.xlm_sweep.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(Result)]
    so.xlm_fingerprint_term.restype = ctypes.c_uint64
    return so


def cpp_bits(so, name: str, inputs: np.ndarray) -> np.ndarray:
    """The CPU build's result bits (NaN canonical) for binary32 input bits."""
    inputs = np.ascontiguousarray(inputs, dtype=np.uint32)
    out = np.empty_like(inputs)
    so.xlm_eval(FUNCTIONS.index(name), inputs.ctypes.data, out.ctypes.data, len(inputs))
    return out


def special_inputs() -> np.ndarray:
    """Inputs every check includes: zeros, infinities, NaNs, subnormals, the ends of binades,
    the thresholds and range-reduction boundaries of every function, and their neighbours."""
    f = np.float32
    points = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, 0.5, 10.0, -10.0, 9.0109133, 0.625, -0.625,
              88.72283172607422, 88.72283935546875, -103.97207641601562, -103.97208404541016, -87.33654, 1.4142135,
              0.70710677, 0.34657359, -0.34657359, 17.0, -17.0, 44.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38,
              3.4028235e38, -3.4028235e38]
    points += [k * 0.6931471805599453 for k in range(-151, 130)]  # exp's reduction boundaries (k ln 2)
    points += [(k + 0.5) * 0.6931471805599453 for k in range(-151, 130)]
    bits = np.array([f(p) for p in points], dtype=np.float32).view(np.uint32)
    bits = np.concatenate([bits, np.uint32(1) << np.arange(23, 31, dtype=np.uint32),
                           np.arange(0x00800000, 0x7F800001, 0x00800000, dtype=np.uint32)])  # every power of two
    near = (bits[:, None].astype(np.int64) + np.arange(-3, 4)[None, :]).ravel()
    near = near[(near >= 0) & (near <= 0x7FFFFFFF)].astype(np.uint32)
    near = np.concatenate([near, near | np.uint32(0x80000000)])
    small = np.arange(0, 64, dtype=np.uint32)  # the smallest subnormals
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0xFFFFFFFF], dtype=np.uint32)
    return np.unique(np.concatenate([near, small, small | np.uint32(0x80000000), nans]))


def sample_inputs(n: int, seed: int = 1) -> np.ndarray:
    """Special inputs, then uniformly random bit patterns, then values spread over [-110, 110]."""
    rng = np.random.default_rng(seed)
    half = max(0, n - len(special_inputs())) // 2
    uniform = rng.integers(0, 1 << 32, size=half, dtype=np.uint64).astype(np.uint32)
    moderate = rng.uniform(-110.0, 110.0, size=half).astype(np.float32).view(np.uint32)
    return np.concatenate([special_inputs(), uniform, moderate])


def sweep(so, name: str, lo: int = 0, hi: int = 1 << 32, chunks: int = 64) -> Result:
    total = Result(max_dist=-1, max_err=-1.0)
    step = -(-(hi - lo) // chunks)
    for start in range(lo, hi, step):
        r = Result()
        so.xlm_sweep(FUNCTIONS.index(name), start, min(hi, start + step), ctypes.byref(r))
        total.inputs += r.inputs
        total.not_rounded += r.not_rounded
        total.nan_mismatch += r.nan_mismatch
        total.fingerprint = (total.fingerprint + r.fingerprint) & 0xFFFFFFFFFFFFFFFF
        if r.max_dist > total.max_dist:
            total.max_dist, total.max_dist_input = r.max_dist, r.max_dist_input
        if r.max_err > total.max_err:
            total.max_err, total.max_err_input = r.max_err, r.max_err_input
    return total


def sample_sweep(so, name: str, inputs: np.ndarray) -> Result:
    """The same measures on given inputs (Python side, from the C++ bits and a binary64 reference)."""
    total = Result(max_dist=0, max_err=0.0)
    y = cpp_bits(so, name, inputs)
    with np.errstate(all="ignore"):
        x = inputs.view(np.float32).astype(np.float64)
        ref = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt,
               "rsqrt": lambda v: 1.0 / np.sqrt(v),
               "sigmoid": lambda v: np.where(v >= 0, 1.0 / (1.0 + np.exp(-v)), np.exp(v) / (1.0 + np.exp(v)))}[name](x)
        cr = ref.astype(np.float32)
    crb = np.where(np.isnan(cr), np.uint32(0x7FC00000), cr.view(np.uint32))
    ynan, rnan = y == 0x7FC00000, crb == 0x7FC00000
    total.inputs = len(inputs)
    total.nan_mismatch = int(np.sum(ynan != rnan))
    total.not_rounded = int(np.sum(y != crb))

    def ordv(b):
        b = b.astype(np.int64)
        return np.where(b & 0x80000000, -(b & 0x7FFFFFFF), b)

    ok = ~ynan & ~rnan
    dist = np.abs(ordv(y) - ordv(crb)) * ok
    k = int(np.argmax(dist))
    total.max_dist, total.max_dist_input = int(dist[k]), int(inputs[k])
    with np.errstate(all="ignore"):
        yf = y.view(np.float32).astype(np.float64)
        m, e = np.frexp(np.abs(ref))
        ulp = np.where(np.abs(ref) < 2.0**-126, 2.0**-149, np.ldexp(1.0, e - 24))
        err = np.where(ok & np.isfinite(yf) & np.isfinite(ref) & (np.abs(ref) < 2.0**128),
                       np.abs(yf - ref) / ulp, 0.0)
    k = int(np.argmax(err))
    total.max_err, total.max_err_input = float(err[k]), int(inputs[k])
    return total


def bits_hex(u: int) -> str:
    x = np.array([u], dtype=np.uint32).view(np.float32)[0]
    return f"0x{u:08X} ({float(x).hex()})"


def report(name: str, r: Result, seconds: float, inputs_text: str) -> str:
    return (f"| {name} | {inputs_text} | {r.max_dist} | {r.max_err:.3f} | {bits_hex(r.max_err_input)} | "
            f"{100.0 * (r.inputs - r.not_rounded) / max(1, r.inputs):.4f}% | {r.nan_mismatch} | "
            f"{seconds:.0f} s |")


def check_python(so, names: list[str], n: int) -> bool:
    """Python scalar (floats) and vectorised (numpy float32) == the C++ bits."""
    ok = True
    inputs = sample_inputs(n, seed=2)
    for name in names:
        want = cpp_bits(so, name, inputs)
        f = getattr(xlmath, name)
        t0 = time.time()
        got_vec = xlmath.f32_bits_array(f(inputs.view(np.float32)))
        t1 = time.time()
        with np.errstate(all="ignore"):
            floats = inputs.view(np.float32).astype(np.float64).tolist()
        got_scalar = np.array([xlmath.bits(f(v)) for v in floats], dtype=np.uint32)
        t2 = time.time()
        bad_vec = np.flatnonzero(got_vec != want)
        bad_scalar = np.flatnonzero(got_scalar != want)
        print(f"{name}: {len(inputs)} inputs; numpy {t1 - t0:.2f} s ({len(bad_vec)} differ from C++), "
              f"scalar {t2 - t1:.1f} s = {1e6 * (t2 - t1) / len(inputs):.1f} us each ({len(bad_scalar)} differ)")
        for bad, what in ((bad_vec, "numpy"), (bad_scalar, "scalar")):
            for k in bad[:5]:
                print(f"  {what} {name}({bits_hex(int(inputs[k]))}): C++ 0x{int(want[k]):08X}, "
                      f"Python 0x{int((got_vec if what == 'numpy' else got_scalar)[k]):08X}")
            ok &= len(bad) == 0
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", default=",".join(FUNCTIONS), help="comma-separated (default: all)")
    ap.add_argument("--sample", type=int, default=0, metavar="N", help="N inputs instead of all 2^32")
    ap.add_argument("--python", type=int, default=0, metavar="N", help="check Python == C++ on N inputs per function")
    ap.add_argument("--gpu", action="store_true", help="check the GPU's bits against the CPU build's (all inputs)")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.functions.split(",") if s.strip()]
    unknown = [s for s in names if s not in FUNCTIONS]
    if unknown:
        ap.error(f"unknown function(s) {', '.join(unknown)}; choose from {', '.join(FUNCTIONS)}")
    if args.gpu:
        return gpu_check(names)
    so = build()
    if args.python:
        return 0 if check_python(so, names, args.python) else 1
    print("| function | inputs | max ulps from correctly rounded | max error (ulp) | at input | "
          "correctly rounded | NaN mismatches | time |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        t0 = time.time()
        if args.sample:
            r, what = sample_sweep(so, name, sample_inputs(args.sample)), f"{args.sample} sampled"
        else:
            r, what = sweep(so, name), "all 2^32"
        print(report(name, r, time.time() - t0, what), flush=True)
        if r.nan_mismatch:
            print(f"  NaN mismatch in {name}", file=sys.stderr)
    return 0


def gpu_check(names: list[str]) -> int:
    """Build scripts/math_ulp_gpu.cu with nvcc (the GPU build's float options) and run it."""
    exe = Path(tempfile.gettempdir()) / "xlgen_math_ulp_gpu"
    cmd = ["nvcc", "-std=c++17", "-O2", "-arch=native", "--fmad=false", "--ftz=false", "--prec-div=true",
           "--prec-sqrt=true", f"-I{RUNTIME}", "-Xcompiler", "-fopenmp,-ffp-contract=off,-fno-fast-math",
           str(Path(__file__).with_name("math_ulp_gpu.cu")), str(SOURCE), "-o", str(exe), "-lgomp"]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return subprocess.run([str(exe), *[str(FUNCTIONS.index(n)) for n in names]]).returncode


if __name__ == "__main__":
    sys.exit(main())
