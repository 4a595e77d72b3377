"""Lanes loops, reductions and tensors (docs/semantics.md §13.2): the simulator's numpy code
against the definition, and against the CPU build; binding tensors from files."""

import numpy as np
import pytest

from xlgen.backends.build import load_text
from xlgen.tools.check.diff import compare
from xlgen.runtime import cpu, sim
from xlgen.runtime.tensors import WeightsError, load_weights

PROGRAM = """pipeline lanes_test
tensor w: f32[3, 40]
request {
    x: f32[40]
    y: f32[3]
    z: i32[8]
    best: i32
    top: f32
    lo: i32 = 0
    n: i32 = 40
    rounds: i32
}
stage work when rounds == 0 {
    for i in 0..3 {
        let d = sum(j in 0..n: w[i, j] * x[j])
        y[i] = d
    }
    let b = argmin(j in (-1)..3: 0.0 * y[0])
    best = b
    let t = max(j in lo..n: x[j])
    top = t
    lanes for k in 0..8 {
        let v = k * 3 + lo
        if v % 2 == 0 {
            z[k] = 100 / (k - 5)
        } else {
            z[k] = v
        }
    }
    rounds = 1
}
trace work: y, best, top, z
done when rounds == 1
"""


def _defined_sum(values: np.ndarray) -> np.float32:
    """The order docs/semantics.md §13.2 writes down, one addition at a time."""
    lanes = [np.float32(-0.0)] * 32
    for k, v in enumerate(values.astype(np.float32)):
        lanes[k % 32] = np.float32(lanes[k % 32] + v)
    for step in (16, 8, 4, 2, 1):
        lanes = [np.float32(lanes[l] + lanes[l ^ step]) for l in range(32)]
    return lanes[0]


@pytest.fixture(scope="module")
def compiled():
    return load_text(PROGRAM, name="lanes_test.xl")


@pytest.fixture(autouse=True, params=["python-loop", "numpy"])
def simulator_path(request, monkeypatch):
    """The simulator runs short ranges as a Python loop and long ones as numpy arrays
    (runtime/vec.py use_scalar): every test here runs both ways."""
    from xlgen.semantics import vec

    monkeypatch.setattr(vec, "SCALAR_MAX", 1 << 30 if request.param == "python-loop" else -1)


def _launch(seed: int):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((3, 40)) * rng.choice([1e-3, 1.0, 1e4], (3, 40))).astype(np.float32)
    xs = [(rng.standard_normal(40) * 1e3).astype(np.float32) for _ in range(3)]
    return {"w": w}, [{"x": [float(v) for v in x]} for x in xs], w, xs


def test_sum_follows_the_written_order_and_backends_agree(compiled):
    params, inputs, w, xs = _launch(1)
    a = sim.run(compiled.sim_module(), params, inputs, sim.LaunchConfig(max_active=2))
    b = cpu.run(compiled, params, inputs, sim.LaunchConfig(max_active=2))
    assert compare(compiled.program, a, b) is None
    for r, x in zip(a.requests, xs):
        for i in range(3):
            want = _defined_sum(w[i] * x)
            assert np.float32(r["y"][i]).view(np.uint32) == want.view(np.uint32)
        assert r["best"] == -1  # equal elements: the lowest index, which is -1 here
        assert r["top"] == np.max(x)


def test_lanes_loop_iterations_with_branches(compiled):
    params, inputs, _, _ = _launch(2)
    for run in (lambda: sim.run(compiled.sim_module(), params, inputs[:1]),
                lambda: cpu.run(compiled, params, inputs[:1])):
        result = run()
        assert len(result.errors()) == 0
        # v = 3k: even v divides (truncating toward zero), odd v is stored
        assert result.requests[0]["z"].tolist() == [-20, 3, -33, 9, -100, 15, 100, 21]


def test_failing_iteration_stops_alone_and_the_lowest_reports(compiled):
    params, inputs, _, _ = _launch(3)
    inputs = [dict(inputs[0], lo=1)]  # v = 3k + 1: even for odd k, k = 5 still fails
    a = sim.run(compiled.sim_module(), params, inputs)
    b = cpu.run(compiled, params, inputs)
    assert compare(compiled.program, a, b) is None
    (err,) = a.errors().tolist()
    assert err[4] == 1 and err[5] == 25  # DIV_ZERO at `z[k] = 100 / (k - 5)`, line 25
    assert a.requests[0]["z"].tolist() == [1, 100 // -4, 7, 100 // -2, 13, 0, 19, 100 // 2]


def test_tensor_binding_errors_name_tensor_and_shapes(compiled, tmp_path):
    module = compiled.sim_module()
    with pytest.raises(WeightsError, match=r"tensor 'w' \(f32\[3, 40\]\) is not bound"):
        sim.run(module, {}, [{}])
    with pytest.raises(WeightsError, match=r"expected f32\[3, 40\], found float32\[40, 3\]"):
        sim.run(module, {"w": np.zeros((40, 3), np.float32)}, [{}])
    with pytest.raises(WeightsError, match=r"found float64\[3, 40\]"):
        sim.run(module, {"w": np.zeros((3, 40))}, [{}])


def test_weights_files_npz_and_safetensors(tmp_path):
    from safetensors.numpy import save_file

    w = np.arange(120, dtype=np.float32).reshape(3, 40)
    np.savez(tmp_path / "m.npz", w=w, other=np.zeros(2))
    save_file({"w": w}, str(tmp_path / "m.safetensors"))
    for name in ("m.npz", "m.safetensors"):
        got = load_weights(tmp_path / name)
        assert got["w"].tobytes() == w.tobytes()
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(WeightsError, match="bad.safetensors: not a readable"):
        load_weights(tmp_path / "bad.safetensors")
    (tmp_path / "m.txt").write_text("")
    with pytest.raises(WeightsError, match="must be a .safetensors or .npz"):
        load_weights(tmp_path / "m.txt")


def test_gemv_example_matches_a_numpy_model_of_the_order(tmp_path):
    from pathlib import Path

    from xlgen.backends.build import load

    compiled = load(Path(__file__).parent.parent / "examples/gemv/gemv.xl")
    rng = np.random.default_rng(5)
    w = rng.standard_normal((128, 512)).astype(np.float32)
    x = rng.standard_normal(512).astype(np.float32)
    r = sim.run(compiled.sim_module(), {"w": w}, [{"x": [float(v) for v in x]}])
    y = r.requests[0]["y"]
    assert all(np.float32(y[i]).view(np.uint32) == _defined_sum(w[i] * x).view(np.uint32) for i in range(0, 128, 17))


def test_cli_weights_option(tmp_path):
    from click.testing import CliRunner

    from xlgen.cli import main

    src = tmp_path / "t.xl"
    src.write_text(PROGRAM)
    w = np.ones((3, 40), np.float32)
    np.savez(tmp_path / "ok.npz", w=w)
    np.savez(tmp_path / "bad.npz", w=w.T.copy())
    runner = CliRunner()
    ok = runner.invoke(main, ["diff", str(src), "--weights", str(tmp_path / "ok.npz"), "--backend", "cpu"])
    assert ok.exit_code == 0, ok.output
    assert "identical: sim == cpu" in ok.output
    bad = runner.invoke(main, ["sim", str(src), "--weights", str(tmp_path / "bad.npz")])
    assert bad.exit_code == 2 and "expected f32[3, 40], found float32[40, 3]" in bad.output
    missing = runner.invoke(main, ["sim", str(src)])
    assert missing.exit_code == 2 and "tensor 'w' (f32[3, 40]) is not bound" in missing.output
