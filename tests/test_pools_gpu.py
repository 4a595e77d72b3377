"""Pools on the GPU (docs/semantics.md §13.3; skipped without a GPU): deterministic mode
reproduces the simulator bit for bit, final pool contents included, with a team of one warp
and of four; fast mode, where each request's pages are fixed, reaches the simulator's
final request state and pool contents."""

from __future__ import annotations

import pytest

from xlgen.backends.build import load, load_text
from xlgen.runtime import sim
from xlgen.semantics.ops import ERR_NOT_OWNER
from xlgen.tools.check.diff import compare, compare_pools, compare_results

from test_pools import INT_POOL, PROGRAM, _x

gpu = pytest.importorskip("xlgen.runtime.gpu")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')"),
]

LAUNCHES = {  # the launches of tests/test_pools.py: re-grants, errors in order, lanes loops
    "regrant": ([{"x": _x(r), "steps": 1 + r % 3} for r in range(7)], 5),
    "errors": ([{"x": _x(0), "mode": 1, "probe": 1, "probe_dim": 1},
                {"x": _x(1), "mode": 1, "probe": 0, "probe_dim": 99},
                {"x": _x(2), "mode": 2, "probe": 0, "divisor": 0}], 3),
    "lanes": ([{"x": _x(0)}, {"x": _x(1), "mode": 3}], 2),
    "many": ([{"x": _x(r), "steps": 1 + r % 4, "mode": 3 if r % 11 == 10 else 0} for r in range(40)], 16),
}


@pytest.fixture(scope="module")
def compiled():
    return load(PROGRAM)


@pytest.mark.parametrize("team_warps,team_blocks", [(1, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_deterministic_mode_equals_the_simulator(compiled, launch, team_warps, team_blocks):
    inputs, max_active = LAUNCHES[launch]
    config = sim.LaunchConfig(max_active=max_active, max_rounds=400)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    got = gpu.run(compiled, {}, inputs, config, mode="deterministic", team_warps=team_warps, team_blocks=team_blocks)
    assert compare(compiled.program, want, got) is None
    assert got.pools["kv"].tobytes() == want.pools["kv"].tobytes() and got.pools["kv"].any()


# Fixed pages (request r owns page r), so fast mode's result does not depend on the schedule.
FIXED_PAGES = """pipeline fixed_pages
const D: i32 = 48
pool rows: f32[64, D] owned by owner
pool totals: f32[64, 2] owned by owner
shared {
    owner: i32[64] = -1
}
request {
    n: i32
    x: f32[D]
    seen: f32
}
stage work when owner[req_id] == req_id && n < 5 {
    lanes for j in 0..D {
        rows[req_id, j] = rows[req_id, j] * 0.5 + x[j] * (n + 1) as f32
    }
    lanes for i in 0..2 {
        let s = sum(j in 0..D: rows[req_id, j] * x[(j + i) % D])
        totals[req_id, i] = s
    }
    seen = totals[req_id, 0] + totals[req_id, 1]
    if req_id % 8 == 7 && n == 3 {
        rows[req_id - 1, 0] = seen
    }
    n += 1
}
arbiter claim when owner[req_id] != req_id {
    owner[req_id] = req_id
}
done when n == 5
"""


@pytest.mark.parametrize("mode", ["deterministic", "fast"])
def test_fixed_pages_in_both_modes(mode):
    compiled = load_text(FIXED_PAGES, name="fixed_pages.xl")
    inputs = [{"x": [float((r * 13 + j) % 9 - 4) * 0.25 for j in range(48)]} for r in range(64)]
    config = sim.LaunchConfig(max_active=24, max_rounds=100)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    # requests 7, 15, ... write a row of another request's page at n == 3: NOT_OWNER
    assert [(int(e[0]), int(e[4])) for e in want.errors()] == [(r, ERR_NOT_OWNER) for r in range(7, 64, 8)]
    got = gpu.run(compiled, {}, inputs, config, mode=mode)
    if mode == "deterministic":
        assert compare(compiled.program, want, got) is None
    else:
        assert compare_results(compiled.program, want, got) is None
        assert compare_pools(want, got) is None


@pytest.mark.parametrize("team_warps,team_blocks", [(1, 1), (4, 1), (4, 2)])
def test_integer_pools(team_warps, team_blocks):
    compiled = load_text(INT_POOL, name="int_pool.xl")
    config = sim.LaunchConfig(max_active=3)
    want = sim.run(compiled.sim_module(), {}, [{}] * 3, config)
    got = gpu.run(compiled, {}, [{}] * 3, config, team_warps=team_warps, team_blocks=team_blocks)
    assert compare(compiled.program, want, got) is None
