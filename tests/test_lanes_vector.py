"""Lanes loops holding reductions (docs/semantics.md §13.2) in the simulator's numpy code: all
iterations at once, each reduction over all (iteration, element) pairs (semantics/vec.py
Elements). Against the definition (the one-range reductions), the simulator's Python loop over
the iterations, and the CPU build."""

import numpy as np
import pytest

from xlgen.backends.build import load_text
from xlgen.runtime import cpu, sim
from xlgen.semantics import vec
from xlgen.tools.check.diff import compare

SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 1e-45, -1e-45, 2.0],
                    dtype=np.float32)


def _ragged(rng, iterations: int, dtype):
    """Elements for `iterations` iterations of random (some empty, some long) lengths."""
    lengths = rng.choice([0, 1, 5, 31, 32, 33, 64, 100], iterations)
    starts = rng.integers(-5, 5, iterations)
    outer = vec.Lanes(0, iterations)
    elements = vec.Elements(outer, starts.astype(np.int32), (starts + lengths).astype(np.int32))
    if dtype is np.float32:
        values = rng.standard_normal(elements.n).astype(np.float32) * rng.choice([1e-3, 1.0, 1e30], elements.n)
        special = rng.random(elements.n) < 0.2
        values[special] = rng.choice(SPECIALS, int(special.sum()))
        values = values.astype(np.float32)
    else:
        values = rng.choice([0, 1, 7, -3, 2**31 - 1, -2**31, 2**32 - 1], elements.n).astype(np.int64).astype(dtype)
    return elements, values, starts, lengths


@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_elements_reduce_each_iteration_as_the_one_range_reduction(op, dtype):
    rng = np.random.default_rng(7)
    for _ in range(20):
        elements, values, starts, lengths = _ragged(rng, 40, dtype)
        got = elements.reduce(values, dtype, op)
        for k, (start, n) in enumerate(zip(starts, lengths)):
            mine = values[elements.first[k]: elements.first[k] + n]
            if op == "sum":
                want = vec.sum_values(mine, dtype)
            else:
                want = vec.best_values(mine, np.arange(start, start + n), dtype, op)
            want = np.asarray(want, dtype=np.int32 if op.startswith("arg") else dtype)
            assert got[k].tobytes() == want.tobytes(), (op, k, mine, got[k], want)


def test_elements_take_the_lowest_failing_element_of_each_iteration():
    outer = vec.Lanes(10, 14)
    outer.push(np.array([True, True, False, True]))  # iteration 12 does not run the reduction
    elements = vec.Elements(outer, np.int32(0), np.array([3, 4, 5, 2], dtype=np.int32))
    assert elements.iteration_of(np.arange(elements.n)).tolist() == [0, 0, 0, 1, 1, 1, 1, 3, 3]
    assert elements.index.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert elements.gather(outer.index).tolist() == [10, 10, 10, 11, 11, 11, 11, 13, 13]
    elements.check(elements.index >= 2, 1, 5)  # INDEX at j = 2, 3
    elements.check(elements.index == 3, 2, 6)  # j = 3 failed already: its first error stands
    elements.check(elements.index == 1, 2, 7)
    elements.reduce(np.ones(elements.n, np.float32), np.float32, "sum")
    assert outer.code.tolist() == [2, 2, 0, 2] and outer.err["line"].tolist() == [7, 7, 0, 7]


# ---- programs: the simulator's numpy code and its Python loop against the CPU build --------

F32_PROGRAM = """pipeline vec_f32
const D: i32 = 16
tensor w: f32[3, 16, 16]
request {
    h: f32[64]
    cnt: i32 = 4
    layer: i32 = 0
    y: f32[64]
    att: f32[256]
    lo: i32 = 0
    rmax: f32[16]
    rsum: f32[16]
    rmin: f32[16]
    rarg: i32[16]
    rargmin: i32[16]
    norm: f32[16]
    finished: bool
}
stage work when !finished {
    # matrix-vector products, one per vector of D
    lanes for e in 0..cnt * D {
        let t = e / D
        let i = e % D
        let s = sum(j in 0..D: w[layer, i, j] * h[t * D + j])
        y[e] = s
    }
    # causal attention rows: ragged, empty where n <= 0, INDEX past the last row's end
    lanes for row in 0..16 {
        let n = lo + row / 2 + 1
        let m = max(s in 0..n: att[row * 16 + s])
        rmax[row] = m
        let z = sum(s in 0..n: exp(att[row * 16 + s] - m))
        rsum[row] = z
        let a = argmax(s in 0..n: att[row * 16 + s])
        let b = min(s in 0..n: att[row * 16 + s])
        let c = argmin(s in 0..n: att[row * 16 + s])
        rarg[row] = a
        rmin[row] = b
        rargmin[row] = c
        norm[row] = z > 0.0 ? m / z : -0.0
    }
    finished = true
}
trace work: y, rmax, rsum, rmin, rarg, rargmin, norm
done when finished
"""

INT_PROGRAM = """pipeline vec_int
request {
    a: i32[48]
    u: u32[48]
    k: i32 = 0
    si: i32[40]
    mi: i32[40]
    ni: i32[40]
    ai: i32[40]
    bi: i32[40]
    su: u32[40]
    mu: u32[40]
    nu: u32[40]
    au: i32[40]
    bu: i32[40]
    before: i32[40]
    after: i32[40]
    finished: bool
}
stage ints when !finished {
    lanes for i in 0..40 {
        let n = (i * 7) % 13 - 2
        let s = sum(j in 0..n: a[j] * 1000003)
        let m = max(j in 0..n: a[j + i % 5])
        let lo = min(j in (-3)..n: j < 0 ? -7 : a[j])
        let am = argmax(j in 0..n: a[j] / 4)
        let an = argmin(j in (i % 3)..n: a[j] & 3)
        si[i] = s
        mi[i] = m
        ni[i] = lo
        ai[i] = am
        bi[i] = an
        let us = sum(j in 0..n: u[j] * 2654435761u)
        let um = max(j in 0..n: u[j] >> 3u)
        let un = min(j in 0..n + 40: u[j % 48])
        let uam = argmax(j in 0..n: u[j] % 5u)
        let uan = argmin(j in 0..n: u[j])
        su[i] = us
        mu[i] = um
        nu[i] = un
        au[i] = uam
        bu[i] = uan
    }
    finished = true
}
stage failing when finished {
    lanes for i in 0..40 {
        before[i] = i
        # INDEX past a's end from i = 41 - k on
        let s = sum(j in 0..8: a[i + j + k])
        # division by zero at j == i % 5 + k - 8: in no iteration when k is 0, 1 or 20
        let d = sum(j in 0..8: 100 / (j - i % 5 - k + 8))
        after[i] = s + d
    }
}
trace ints: si, mi, ni, ai, bi, su, mu, nu, au, bu
trace failing: before, after
done when after[0] != 0 || before[39] == 39
"""

CONTROL_PROGRAM = """pipeline vec_control
request {
    x: f32[40]
    a: i32[40]
    k: i32 = 0
    out: f32[40]
    cnt: i32[40]
    shift: u32[40]
    loops: i32[40]
    finished: bool
}
stage work when !finished {
    lanes for i in 0..40 {
        let total = 0.0
        if i % 3 == 0 {
            # only these iterations; INDEX at j = 0 in iteration 39 when k >= 10
            let s = sum(j in 0..i + 1: x[j] / x[i - j + k / 10])
            total = s
        } elif a[i] > k {
            let m = max(j in 0..40 - i: x[i + j])
            let c = argmin(j in 0..40 - i: x[i + j])
            total = m + (c as f32)
        } else {
            # masked operands: 100 / (j - i) only where j != i
            let q = sum(j in 0..40: j != i && 100 / (j - i) > k ? 1 : 0)
            cnt[i] = q
        }
        for r in 0..3 {
            let t = sum(j in r..r + i % 7: a[j] * r)
            loops[i] += t
        }
        # SHIFT in the elements whose amount reaches 32
        let sh = sum(j in 0..4: 1u << (((i + j) / 2 + k) as u32))
        shift[i] = sh
        out[i] = total
    }
    finished = true
}
trace work: out, cnt, loops, shift
done when finished
"""

# `break` and `continue` in loops in an iteration: each iteration leaves a loop (or a pass)
# at its own time (Lanes.loop_enter/loop_next/leave), also from nested loops, under `if`
# arms, next to a reduction and an error (division by zero where i % 7 == 0 and k == 2)
BREAK_PROGRAM = """pipeline vec_break
request {
    x: i32[40]
    y: i32[40]
    finished: bool
}
stage work when !finished {
    lanes for i in 0..40 {
        for k in 0..4 {
            if k == i % 3 {
                break
            }
            let s = sum(j in 0..k + 1: j * i)
            x[i] += s
        }
        for k in 0..6 {
            if (i + k) % 4 == 1 {
                continue
            } elif k > i % 5 + 1 {
                break
            }
            for m in 0..5 {
                if m > k {
                    break
                }
                if m == 1 {
                    continue
                }
                y[i] += m + k
            }
            if k == 2 {
                y[i] += 10 / (i % 7)
            }
        }
    }
    finished = true
}
trace work: x, y
done when finished
"""


def _f32_inputs(rng, n: int):
    out = []
    for _ in range(n):
        att = (rng.standard_normal(256) * 4).astype(np.float32)
        special = rng.random(256) < 0.15
        att[special] = rng.choice(SPECIALS, int(special.sum()))
        att[rng.random(256) < 0.2] = 1.5  # ties: the lowest index wins
        out.append({"h": [float(v) for v in rng.standard_normal(64).astype(np.float32)],
                    "att": [float(v) for v in att], "cnt": int(rng.choice([1, 4, 4, 5, 0])),
                    "layer": int(rng.integers(0, 3)), "lo": int(rng.choice([0, -3, -20, 2, 2, 10]))})
    return out


def _int_inputs(rng, n: int):
    words = [0, 1, 3, -1, 7, 2**31 - 1, -2**31, 12345, -98765]
    return [{"a": [int(v) for v in rng.choice(words, 48)],
             "u": [int(v) & 0xFFFFFFFF for v in rng.choice(words, 48)],
             "k": int(rng.choice([0, 1, 12, 20]))} for _ in range(n)]


def _control_inputs(rng, n: int):
    out = []
    for _ in range(n):
        x = (rng.standard_normal(40) * 3).astype(np.float32)
        x[rng.random(40) < 0.15] = rng.choice(SPECIALS, 1)[0]
        out.append({"x": [float(v) for v in x], "a": [int(v) for v in rng.integers(-5, 5, 40)],
                    "k": int(rng.choice([0, 1, 3, 28]))})
    return out


CASES = {
    "f32": (F32_PROGRAM, _f32_inputs, {"w": lambda rng: rng.standard_normal((3, 16, 16)).astype(np.float32)}),
    "int": (INT_PROGRAM, _int_inputs, {}),
    "control": (CONTROL_PROGRAM, _control_inputs, {}),
    "break": (BREAK_PROGRAM, lambda rng, n: [{} for _ in range(n)], {}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    source, inputs, tensors = CASES[request.param]
    compiled = load_text(source, name=f"{request.param}.xl")
    return compiled, inputs, tensors


def _run_sim(compiled, params, inputs, config, scalar_max: int, monkeypatch):
    monkeypatch.setattr(vec, "SCALAR_MAX", scalar_max)
    return sim.run(compiled.sim_module(), params, inputs, config)


def test_vector_path_agrees_with_the_python_loop_and_the_cpu_build(case, monkeypatch):
    compiled, make_inputs, tensors = case
    config = sim.LaunchConfig(max_active=3)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        params = {name: make(rng) for name, make in tensors.items()}
        inputs = make_inputs(rng, 6)
        vector = _run_sim(compiled, params, inputs, config, -1, monkeypatch)
        python_loop = _run_sim(compiled, params, inputs, config, 1 << 30, monkeypatch)
        assert compare(compiled.program, vector, python_loop) is None, seed
        assert compare(compiled.program, vector, cpu.run(compiled, params, inputs, config)) is None, seed


def test_failing_iterations_stop_alone_and_the_lowest_reports(monkeypatch):
    compiled = load_text(INT_PROGRAM, name="int.xl")
    a = [3] * 48
    inputs = [{"a": a, "k": 12}, {"a": a, "k": 20}]
    monkeypatch.setattr(vec, "SCALAR_MAX", -1)
    result = sim.run(compiled.sim_module(), {}, inputs)
    lines = INT_PROGRAM.splitlines()
    let_s, let_d = (1 + next(k for k, t in enumerate(lines) if t.strip().startswith(w)) for w in ("let s = sum(j in 0..8", "let d"))
    # k = 12: INDEX from i = 29 on, DIV_ZERO at j == i % 5 + 4 where i % 5 < 4: iteration 0 reports its `let d`
    # k = 20: INDEX (code 2) at `let s` from i = 21 on; no division by zero
    errors = {int(e[0]): (int(e[4]), int(e[5])) for e in result.errors().tolist()}
    assert errors == {0: (1, let_d), 1: (2, let_s)}
    first, second = result.requests
    assert first["before"].tolist() == list(range(40)) and second["before"].tolist() == list(range(40))
    def after(i: int, k: int) -> int:  # 8 * a[...] + the truncating divisions
        return 24 + sum(int(100 / (j - i % 5 - k + 8)) for j in range(8))

    assert first["after"].tolist() == [after(i, 12) if i % 5 == 4 and i < 29 else 0 for i in range(40)]
    assert second["after"].tolist() == [after(i, 20) if i < 21 else 0 for i in range(40)]


def test_pieces_give_the_whole_ranges_bits_and_errors(case, monkeypatch):
    """Lanes loops and reductions run in pieces of vec.CHUNK iterations (bounded memory, and
    --timeout can stop them between pieces): with pieces of 32 these programs' loops and sums take
    several, with the same results and the same first errors as one piece."""
    compiled, make_inputs, tensors = case
    config = sim.LaunchConfig(max_active=3)
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        params = {name: make(rng) for name, make in tensors.items()}
        inputs = make_inputs(rng, 6)
        whole = _run_sim(compiled, params, inputs, config, -1, monkeypatch)
        monkeypatch.setattr(vec, "CHUNK", 32)
        pieces = _run_sim(compiled, params, inputs, config, -1, monkeypatch)
        monkeypatch.setattr(vec, "CHUNK", 1 << 20)
        assert compare(compiled.program, whole, pieces) is None, seed
