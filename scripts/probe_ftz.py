"""Does CuPy's NVRTC path keep binary32 subnormals? (a diagnostic for the GPU machine)"""
import inspect
import re

import cupy
import numpy as np

SRC = r'''
extern "C" __global__ void probe(const float* x, float* out) {
    out[0] = __fsub_rn(x[0], x[1]);        // subnormal - 0
    out[1] = __fmul_rn(x[2], 0.25f);       // FLT_MIN / 4 -> subnormal
    out[2] = __fdiv_rn(x[0], 1.0f);
    out[3] = x[0] + x[1];
    out[4] = __fadd_rn(x[0], x[0]);
}
'''
x = cupy.asarray(np.array([1.4e-45, 0.0, 1.17549435e-38], dtype=np.float32))
for label, opts, backend in [("ftz=false", ("--fmad=false", "--ftz=false"), "nvrtc"),
                             ("no flags", (), "nvrtc"),
                             ("nvcc ftz=false", ("--fmad=false", "--ftz=false"), "nvcc")]:
    try:
        mod = cupy.RawModule(code=SRC, options=opts, backend=backend)
        out = cupy.zeros(5, dtype=np.float32)
        mod.get_function("probe")((1,), (1,), (x, out))
        print(label, out.get().tolist(), flush=True)
    except Exception as exc:
        print(label, "failed:", exc)
from xlgen.runtime.gpu import NVRTC_OPTIONS, CompiledModule, nvrtc_compile

cc = cupy.cuda.Device().compute_capability
mod = CompiledModule(nvrtc_compile(SRC, "probe.cu", NVRTC_OPTIONS + (f"-arch=sm_{cc}",)))
out = cupy.zeros(5, dtype=np.float32)
mod.get_function("probe")((1,), (1,), (x, out))
print("xlgen nvrtc", out.get().tolist(), flush=True)
import cupy.cuda.compiler as comp
src = inspect.getsource(comp)
for m in re.finditer(r".*(ftz|fast_math|fmad|denormal).*", src):
    print("cupy.cuda.compiler:", m.group(0).strip())
