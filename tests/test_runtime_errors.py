"""Runtime errors that say what failed (docs/semantics.md §12): every backend writes the same
error record -- code, line, subject, position, value, bound, word -- and the tools render it.

Each case runs a small pipeline on the simulator (its Python loop and, for long lanes ranges,
its numpy code) and on every other backend (the CPU build; the GPU where there is one): the
records must agree bit for bit, and the message `xlgen sim` prints is checked word for word
against the one written below.
"""

from __future__ import annotations

import numpy as np
import pytest

from xlgen.backends.build import load_text
from xlgen.core.subjects import subjects
from xlgen.runtime import sim
from xlgen.runtime.sim import KIND_ERROR, REC_HEADER
from xlgen.semantics import ops
from xlgen.tools.check.diff import compare, describe_record, error_fields
from xlgen.tools.check.fuzzgen import backends, run_backend

BACKENDS = [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in backends()]

ARRAYS = """pipeline arrays
const N: i32 = 8

tensor w: f32[3, 4]

shared {
    table: i32[4]
}

request {
    slots: i32[N]
    i: i32
    u: u32
    k: i32
    which: i32
    got: f32
    done_flag: bool
}

fn pick(a: i32[N], at: i32) -> i32 {
    return a[at]
}

stage touch when !done_flag {
    if which == 0 {
        slots[i] = 1
    } elif which == 1 {
        slots[u] = 2
    } elif which == 2 {
        got = w[i, k]
    } elif which == 3 {
        k = pick(slots, i)
    }
    done_flag = true
}

arbiter note when done_flag && which == 4 {
    table[i] = 1
    which = 5
}

trace touch: i

done when done_flag && which != 4 && slots[i % 16] >= 0
"""

# (inputs of one request, the message after "runtime error in ...")
ARRAY_CASES = [
    ({"which": 0, "i": 9}, "stage touch (line 26): index 9 out of range for 'slots' (length 8)"),
    ({"which": 0, "i": -1}, "stage touch (line 26): index -1 out of range for 'slots' (length 8)"),
    ({"which": 1, "u": 0xFFFFFFFF}, "stage touch (line 28): index 4294967295 out of range for 'slots' (length 8)"),
    ({"which": 2, "i": 1, "k": 4}, "stage touch (line 30): index 4 out of range for dimension 1 of tensor 'w' (length 4)"),
    ({"which": 2, "i": 3, "k": 9}, "stage touch (line 30): index 3 out of range for dimension 0 of tensor 'w' (length 3)"),
    ({"which": 3, "i": 8}, "stage touch (line 21): index 8 out of range for parameter 'a' of pick (length 8)"),
    ({"which": 4, "i": 6}, "stage note (line 38): index 6 out of range for 'table' (length 4)"),  # an arbiter
    ({"which": 9, "i": 12}, "'done when' (line 44): index 12 out of range for 'slots' (length 8)"),
]


def run_everywhere(backend: str, src: str, inputs: list[dict], params=None, max_rounds: int = 4):
    """Run on the simulator and on `backend`; they must agree bit for bit. The simulator's result."""
    compiled = load_text(src, name="errs.xl")
    cfg = sim.LaunchConfig(max_active=max(1, len(inputs)), max_rounds=max_rounds)
    expected = sim.run(compiled.sim_module(), params or {}, inputs, cfg)
    got = run_backend(backend, compiled, params or {}, inputs, cfg)
    divergence = compare(compiled.program, expected, got)
    assert divergence is None, f"{backend} differs from the simulator:\n{divergence.render()}"
    return compiled, expected


def error_messages(compiled, result) -> list[str]:
    return [describe_record(compiled.program, rec) for rec in result.records if int(rec[2]) == KIND_ERROR]


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_errors_name_the_array_the_dimension_the_index_and_the_length(backend):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    inputs = [case for case, _ in ARRAY_CASES]
    compiled, result = run_everywhere(backend, ARRAYS, inputs, {"w": w})
    got = error_messages(compiled, result)
    want = [f"request {r} round 0: runtime error in {text}" for r, (_, text) in enumerate(ARRAY_CASES)]
    assert got == want


POOLS = """pipeline pooled
pool kv: f32[2, 3, 5] owned by owner

shared {
    owner: i32[2] = -1
}

request {
    claim_page: i32
    page: i32
    row: i32
    col: i32
    claim: bool
    v: f32
    done_flag: bool
}

arbiter take when claim {
    owner[claim_page] = req_id
    claim = false
}

stage use when !claim && !done_flag {
    v = kv[page, row, col]
    kv[page, row, col] = 2.0
    done_flag = true
}

done when done_flag
"""

POOL_CASES = [
    ({"claim": True, "claim_page": 1, "page": 1, "row": 1, "col": 5},
     "stage use (line 24): index 5 out of range for dimension 2 of pool 'kv' (length 5)"),
    ({"claim": True, "claim_page": 1, "page": 1, "row": -3, "col": 0},
     "stage use (line 24): index -3 out of range for dimension 1 of pool 'kv' (length 3)"),
    ({"claim": True, "page": 2, "row": 0, "col": 0},
     "stage use (line 24): index 2 out of range for dimension 0 of pool 'kv' (length 2)"),
    ({"claim": False, "page": 0, "row": 0, "col": 0},
     "stage use (line 24): page 0 of pool 'kv' is owned by no request (owner -1), not by this one"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_errors_name_the_pool_the_dimension_and_the_owner(backend):
    for inputs, text in POOL_CASES:  # one request each: requests would share the pages
        compiled, result = run_everywhere(backend, POOLS, [inputs])
        assert error_messages(compiled, result) == [f"request 0 round {1 if inputs['claim'] else 0}: "
                                                    f"runtime error in {text}"]
    # request 0 holds page 0 (from round 0's arbiters), which request 1 reads in round 1
    compiled, result = run_everywhere(backend, POOLS, [{"claim": True}, {"claim": True, "claim_page": 1}])
    assert error_messages(compiled, result) == [
        "request 1 round 1: runtime error in stage use (line 24): page 0 of pool 'kv' is owned by request 0, "
        "not by this one"]


LANES = """pipeline laned
const N: i32 = 100

request {
    src: i32[N]
    out: i32[N]
    n: i32
    shift: i32
    stride: i32 = 1
    rshift: i32
    d: i32 = 3
    total: i32
    best: i32
    rows: i32[4]
    done_flag: bool
}

stage run when !done_flag {
    done_flag = true
    lanes for i in 0..n {
        out[i] = src[shift - i] / d
    }
    let s = sum(j in 0..n: src[j * stride])
    total = s
    let b = argmax(j in 0..n: src[j] % d)
    best = b
    lanes for r in 0..4 {
        let row = sum(j in 0..n: src[j + r * rshift])
        rows[r] = row
    }
}

done when done_flag
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [10, 70])  # the simulator's Python loop, then its numpy code
def test_lanes_loops_and_reductions_report_the_lowest_failing_iteration(backend, n):
    inputs = [
        {"n": n, "shift": 105},  # iterations 0..5 fail (src[105], src[104], ...): the lowest is 0
        {"n": n, "shift": 0, "d": 0, "src": [7] * 100},  # iteration 0 divides by zero, the rest index -i
        {"n": n, "shift": n - 1, "stride": 12 if n == 10 else 2},  # the loop passes; the sum does not
        {"n": n, "shift": n - 1, "rshift": 40},  # rows: iteration r reads src[j + 40 r]
    ]
    compiled, result = run_everywhere(backend, LANES, inputs)
    sum_index, rows_index = (108, 120) if n == 10 else (100, 100)
    assert [m.split("runtime error in stage run ")[1] for m in error_messages(compiled, result)] == [
        "(line 21): index 105 out of range for 'src' (length 100)",
        "(line 21): division by zero: 7 / 0",
        f"(line 23): index {sum_index} out of range for 'src' (length 100)",
        f"(line 28): index {rows_index} out of range for 'src' (length 100)",
    ]


BUILTINS = """pipeline builtins
request {
    which: i32
    vocab: i32
    n: i32
    a: i32[8]
    b: i32[6]
    t: i32
    done_flag: bool
}

stage call when !done_flag {
    done_flag = true
    if which == 0 {
        t = target_token(1u, 2, 3, vocab)
    } elif which == 1 {
        t = draft_token(1u, 2, 3, vocab, 0.5)
    } else {
        t = verify_prefix(a, b, n)
    }
}

done when done_flag
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_errors_name_the_builtin_the_argument_and_its_range(backend):
    inputs = [{"which": 0, "vocab": 1}, {"which": 1, "vocab": -5}, {"which": 2, "n": 7}, {"which": 2, "n": -1},
              {"which": 0, "vocab": 2}]
    compiled, result = run_everywhere(backend, BUILTINS, inputs)
    assert error_messages(compiled, result) == [
        "request 0 round 0: runtime error in stage call (line 15): argument 'vocab' of target_token is 1; "
        "it must be at least 2",
        "request 1 round 0: runtime error in stage call (line 17): argument 'vocab' of draft_token is -5; "
        "it must be at least 2",
        "request 2 round 0: runtime error in stage call (line 19): argument 'n' of verify_prefix is 7; "
        "it must be in 0..6 (the shorter array's length)",
        "request 3 round 0: runtime error in stage call (line 19): argument 'n' of verify_prefix is -1; "
        "it must be in 0..6 (the shorter array's length)",
    ]


ARITHMETIC = """pipeline arith
request {
    which: i32
    a: i32
    b: i32
    ua: u32
    ub: u32
    x: f32
    r: i32
    ur: u32
    done_flag: bool
}

stage go when !done_flag {
    done_flag = true
    if which == 0 {
        r = a / b
    } elif which == 1 {
        r = a % b
    } elif which == 2 {
        ur = ua / ub
    } elif which == 3 {
        r = a << b
    } elif which == 4 {
        ur = ua >> ub
    } elif which == 5 {
        r = x as i32
    } elif which == 6 {
        ur = x as u32
    }
}

done when done_flag
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_arithmetic_errors_give_the_operands(backend):
    inputs = [{"which": 0, "a": -7}, {"which": 1, "a": 7}, {"which": 2, "ua": 4000000000},
              {"which": 3, "a": 1, "b": 32}, {"which": 3, "a": 1, "b": -1}, {"which": 4, "ub": 4294967295},
              {"which": 5, "x": float("inf")}, {"which": 5, "x": float("nan")}, {"which": 6, "x": -1.0},
              {"which": 5, "x": 2147483648.0}]
    compiled, result = run_everywhere(backend, ARITHMETIC, inputs)
    messages = [m.split(": runtime error in stage go ")[1] for m in error_messages(compiled, result)]
    assert messages == [
        "(line 17): division by zero: -7 / 0",
        "(line 19): division by zero: 7 % 0",
        "(line 21): division by zero: 4000000000 / 0",
        "(line 23): shift amount 32 out of range 0..31 (<<)",
        "(line 23): shift amount -1 out of range 0..31 (<<)",
        "(line 25): shift amount 4294967295 out of range 0..31 (>>)",
        "(line 27): f32 value inf out of range for i32",
        "(line 27): f32 value nan out of range for i32",
        "(line 29): f32 value -1.0 out of range for u32",
        "(line 27): f32 value 2147483648.0 out of range for i32",
    ]


UNSIGNED = """pipeline unsigned
tensor w: f32[2, 3]
pool kv: i32[2, 4] owned by owner

shared {
    owner: i32[2]
}

request {
    which: i32
    u: u32
    n: i32
    b: i32[40]
    c: i32[30]
    got: f32
    g: i32
    done_flag: bool
}

stage go when !done_flag {
    done_flag = true
    if which == 0 {
        got = w[1, u]
    } elif which == 1 {
        g = kv[u, 0]
    } else {
        lanes for i in 0..n {
            b[i] = c[i as u32]
        }
    }
}

done when done_flag
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unsigned_index_is_reported_as_the_u32_it_is(backend):
    """Tensor and pool indices are not converted to int32_t before their check (fuzz seed 1300074)."""
    inputs = [{"which": 0, "u": 7}, {"which": 1, "u": 0x80000000}, {"which": 2, "n": 35}]
    compiled, result = run_everywhere(backend, UNSIGNED, inputs, {"w": np.zeros((2, 3), np.float32)})
    assert [m.split("runtime error in stage go ")[1] for m in error_messages(compiled, result)] == [
        "(line 23): index 7 out of range for dimension 1 of tensor 'w' (length 3)",
        "(line 25): index 2147483648 out of range for dimension 0 of pool 'kv' (length 2)",
        "(line 28): index 30 out of range for 'c' (length 30)",
    ]


def test_an_error_record_holds_its_parts_in_order():
    compiled, result = run_everywhere("cpu", ARRAYS, [{"which": 2, "i": 1, "k": -2}],
                                      {"w": np.zeros((3, 4), np.float32)})
    rec = result.errors()[0]
    tensor_id = next(k for k, s in enumerate(subjects(compiled.program), 1) if s.kind == "tensor")
    assert rec[REC_HEADER:REC_HEADER + 7].tolist() == [ops.ERR_INDEX, 30, tensor_id, 1, 0xFFFFFFFE, 4, ops.WORD_I]
    assert error_fields(compiled.program, rec[REC_HEADER:]) == {
        "code": ops.ERR_INDEX, "line": 30, "subject": {"kind": "tensor", "name": "w"}, "position": 1,
        "value": -2, "bound": 4, "word": ops.WORD_I}


def test_the_builtins_have_the_subject_ids_the_runtimes_name():
    """ops.SUBJECT_* (and XL_SUBJECT_* in xl_runtime.cuh) are the builtins' places among the subjects."""
    from xlgen.runtime.gpu import runtime_dir

    table = subjects(load_text(BUILTINS, name="b.xl").program)
    header = (runtime_dir() / "xl_runtime.cuh").read_text()
    for name in ("verify_prefix", "target_token", "draft_token"):
        number = getattr(ops, f"SUBJECT_{name.upper()}")
        assert table[number - 1].kind == "builtin" and table[number - 1].name == name
        assert f"XL_SUBJECT_{name.upper()} = {number}" in header


def test_diff_points_at_a_difference_in_what_failed():
    compiled, a = run_everywhere("cpu", ARRAYS, [{"which": 0, "i": 9}], {"w": np.zeros((3, 4), np.float32)})
    b = sim.RunResult(records=a.records.copy(), requests=a.requests, shared=a.shared, rounds=a.rounds, backend="other")
    b.records[0, REC_HEADER + 4] = 10  # the index
    divergence = compare(compiled.program, a, b)
    assert divergence is not None
    assert divergence.details[0] == "error value: sim=9 other=10"
    assert "index 10 out of range for 'slots' (length 8)" in divergence.render()
