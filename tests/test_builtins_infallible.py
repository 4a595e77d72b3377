"""Builtins that never raise (ir.INFALLIBLE_BUILTINS): the emitters put no error test after their
calls, so each must take no error path in any backend. Checked here: the C++ runtime's function
leaves its error record unnamed (it cannot write it), the simulator's raises on no input, and the
prelude's other builtins are not in the set."""

import math
import re

import numpy as np

from xlgen.core import ir
from xlgen.core.resources import runtime_dir
from xlgen.semantics import builtins

RUNTIME = (runtime_dir() / "xl_runtime.cuh").read_text()
PRELUDE = (runtime_dir() / "prelude.xl").read_text()


def test_the_runtime_cannot_record_an_error_for_them():
    for name in sorted(ir.INFALLIBLE_BUILTINS):
        assert re.search(rf"XL_HD \w+ xl_b_{name}\(XlErr&, int32_t, int32_t, [^)]*\) \{{", RUNTIME), name
    # ... where the others can (their record named)
    for name in ("target_token", "draft_token"):
        assert re.search(rf"XL_HD \w+ xl_b_{name}\(XlErr& e, ", RUNTIME), name


def test_every_other_builtin_of_the_prelude_may_raise():
    declared = set(re.findall(r"^builtin (?:warp )?fn (\w+)\(", PRELUDE, re.M))
    assert ir.INFALLIBLE_BUILTINS < declared
    assert declared - ir.INFALLIBLE_BUILTINS == {"verify_prefix", "target_token", "draft_token"}


def test_the_simulator_raises_on_no_input():
    special = [0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 88.7, -103.9, 3.4028234663852886e38, -3.4028234663852886e38,
               math.inf, -math.inf, math.nan]
    rng = np.random.default_rng(3)
    values = special + [float(v) for v in rng.standard_normal(200).astype(np.float32) * 50]
    for name in sorted(ir.INFALLIBLE_BUILTINS - {"hash_u32"}):
        f = getattr(builtins, f"b_{name}")
        for v in values:
            f(float(np.float32(v)))  # (no exception: NaN or inf where undefined)
    for v in [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]:
        builtins.b_hash_u32(v)


def test_no_error_test_follows_their_calls():
    from xlgen.backends.build import load_text

    code = next(text for name, text in load_text("""pipeline calm
request {
    x: f32
    h: u32
    y: f32
    done_: bool
}
stage s when !done_ {
    let a = exp(x) + rsqrt(x) + tanh(x) + sigmoid(x) + log(x)
    y = a
    h = hash_u32(h)
    done_ = true
}
done when done_
""", "calm.xl").files.items() if name.endswith("_kernel.cuh"))
    stage = code[code.index("stage_s("):]
    stage = stage[:stage.index("\n}\n")]
    assert "xl_b_exp(err, " in stage and "xl_b_hash_u32(err, " in stage
    assert "xl_failed(err)" not in stage
