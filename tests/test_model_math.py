"""examples/model_math/ops.xl (RMSNorm, a SiLU MLP, softmax in the language): the simulator and
the CPU build agree bit for bit, and both are close to the same math in float64 numpy."""

from pathlib import Path

import numpy as np

from xlgen.backends.build import load
from xlgen.tools.check.diff import compare
from xlgen.runtime import cpu, sim

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "model_math" / "ops.xl"


def test_model_math_is_exact_across_backends_and_close_to_float64():
    compiled = load(EXAMPLE)
    rng = np.random.default_rng(11)
    params = {"g": (1 + 0.1 * rng.standard_normal(64)).astype(np.float32),
              "w_up": (rng.standard_normal((256, 64)) / 8).astype(np.float32),
              "w_down": (rng.standard_normal((64, 256)) / 16).astype(np.float32)}
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    inputs = [{"x": [float(v) for v in x]} for x in xs]
    a = sim.run(compiled.sim_module(), params, inputs)
    b = cpu.run(compiled, params, inputs)
    assert compare(compiled.program, a, b) is None
    g, up, down = (params[k].astype(np.float64) for k in ("g", "w_up", "w_down"))
    for r, x in zip(a.requests, xs):
        x = x.astype(np.float64)
        xn = x / np.sqrt(np.mean(x * x) + 1e-5) * g
        u = up @ xn
        y = x + down @ (u / (1 + np.exp(-u)))
        p = np.exp(y - y.max())
        p /= p.sum()
        assert np.allclose(r["y"], y, rtol=1e-4, atol=1e-5)
        assert np.allclose(r["probs"], p, rtol=1e-4, atol=1e-7)
        assert abs(float(np.sum(r["probs"].astype(np.float64))) - 1) < 1e-5
