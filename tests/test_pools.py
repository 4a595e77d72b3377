"""Pools (docs/semantics.md §13.3): launch-wide storage, paged, each page reachable only by
the request that owns it. The simulator (both lane-parallel paths) against the definition and
against the CPU build, bit for bit, final pool contents included."""

import numpy as np
import pytest

from xlgen.backends.build import load, load_text
from xlgen.runtime import cpu, sim
from xlgen.semantics.ops import ERR_DIV_ZERO, ERR_INDEX, ERR_NOT_OWNER
from xlgen.tools.check.diff import compare

from test_lanes import _defined_sum  # §13.2's sum, one addition at a time
from pathlib import Path

PROGRAM = Path(__file__).parent / "programs" / "pool_pages.xl"
D, PAGES = 40, 3
LINES = {marker: number for number, marker in enumerate(PROGRAM.read_text().split("\n"), 1)}


def line_of(text: str) -> int:
    return next(number for marker, number in LINES.items() if text in marker)


@pytest.fixture(scope="module")
def compiled():
    return load(PROGRAM)


@pytest.fixture(autouse=True, params=["python-loop", "numpy"])
def simulator_path(request, monkeypatch):
    """Short ranges run as a Python loop, long ones as numpy arrays: every test runs both."""
    from xlgen.semantics import vec

    monkeypatch.setattr(vec, "SCALAR_MAX", 1 << 30 if request.param == "python-loop" else -1)


def _x(r: int) -> list[float]:
    return [float(np.float32((r + 1) * 0.1) * ((j * 3) % 7 - 2)) for j in range(D)]


def _both(compiled, inputs, max_active):
    config = sim.LaunchConfig(max_active=max_active, max_rounds=200)
    a = sim.run(compiled.sim_module(), {}, inputs, config)
    b = cpu.run(compiled, {}, inputs, config)
    assert compare(compiled.program, a, b) is None
    for name in a.pools:  # compare() checks pools; say so independently once more
        assert a.pools[name].tobytes() == b.pools[name].tobytes()
    return a


def test_pages_granted_freed_and_regranted_keep_stale_contents(compiled):
    inputs = [{"x": _x(r), "steps": 1 + r % 3} for r in range(7)]
    result = _both(compiled, inputs, max_active=5)
    assert len(result.errors()) == 0
    reqs = result.requests
    assert (reqs["page"] == -2).all() and sorted(set(reqs["granted"])) == [0, 1, 2]
    # Replay each page's owners in grant order (the round of their first `fill` record):
    # a new owner finds what the last one left (`first`), then adds x * s for s = 1..steps.
    first_round = {int(rec[0]): int(rec[1]) for rec in result.records[::-1] if rec[2] == 0}
    assert result.pools["uses"].tolist() == [int((reqs["granted"] == p).sum()) for p in range(PAGES)]
    for page in range(PAGES):
        owners = sorted((r for r in range(len(inputs)) if reqs["granted"][r] == page), key=first_round.get)
        row = np.zeros(D, dtype=np.float32)
        for r in owners:
            assert np.float32(reqs["first"][r]).tobytes() == row[0].tobytes()
            x = np.array(inputs[r]["x"], dtype=np.float32)
            for s in range(1, inputs[r]["steps"] + 1):
                row = (row + x * np.float32(s)).astype(np.float32)
        assert result.pools["kv"][page].tobytes() == row.tobytes()
    assert any(reqs["first"] != 0.0)  # some page was re-granted with something in it


def test_pools_start_at_zero_at_every_launch(compiled):
    inputs = [{"x": _x(1), "steps": 1}]
    one = _both(compiled, inputs, max_active=1)
    two = _both(compiled, inputs, max_active=1)
    assert one.requests["first"][0] == 0.0 and two.requests["first"][0] == 0.0
    assert one.pools["kv"].tobytes() == two.pools["kv"].tobytes()
    assert not one.pools["kv"][1:].any() and one.pools["kv"].dtype == np.float32
    assert one.pools["uses"].dtype == np.uint32 and one.pools["kv"].shape == (PAGES, D)


def _error(result, req: int):
    (err,) = [rec for rec in result.errors().tolist() if rec[0] == req]
    return err[4], err[5]


def test_errors_in_order_value_then_indices_then_owner(compiled):
    # Request i is granted page i in round 0, fills it in round 1, then probes.
    inputs = [
        {"x": _x(0), "mode": 1, "probe": 1, "probe_dim": 1},  # a page of request 1: NOT_OWNER
        {"x": _x(1), "mode": 1, "probe": 0, "probe_dim": 99},  # INDEX (dimension 1) before the owner
        {"x": _x(2), "mode": 2, "probe": 0, "divisor": 0},  # DIV_ZERO: the value before the indices
    ]
    result = _both(compiled, inputs, max_active=3)
    read, write = line_of("probed = kv[probe, probe_dim]"), line_of("uses[probe] = 7u")
    assert _error(result, 0) == (ERR_NOT_OWNER, read)
    assert _error(result, 1) == (ERR_INDEX, read)
    assert _error(result, 2) == (ERR_DIV_ZERO, write)
    assert result.requests["probed"].tolist() == [0.0, 0.0, 0.0]  # a failing statement has no effect
    assert result.pools["uses"].tolist() == [1, 1, 1]


def test_owner_reads_its_page_and_others_are_refused(compiled):
    inputs = [
        {"x": _x(0), "steps": 1, "mode": 1, "probe": 0, "probe_dim": 5},  # its own page: fine
        {"x": _x(1), "mode": 2, "probe": 0, "divisor": 1},  # request 0's page: NOT_OWNER
    ]
    result = _both(compiled, inputs, max_active=2)
    assert _error(result, 1) == (ERR_NOT_OWNER, line_of("uses[probe] = 7u"))
    assert result.requests["probed"][0] == result.pools["kv"][0, 5] == np.float32(inputs[0]["x"][5])
    assert result.pools["uses"].tolist() == [1, 1, 0]


def test_lanes_loop_iterations_fail_alone_on_pages_not_owned(compiled):
    # Request 1 owns page 1; iterations k = 0 and 2 fail, the lowest (0) reports, k = 1 writes.
    inputs = [{"x": _x(0)}, {"x": _x(1), "mode": 3}]
    result = _both(compiled, inputs, max_active=2)
    assert _error(result, 1) == (ERR_NOT_OWNER, line_of("scores[k, 1] = 1.5"))
    assert result.pools["scores"][1, 1] == 1.5
    assert result.pools["scores"][0, 1] != 1.5 and result.pools["scores"][2, 1] == 0.0


def test_reduction_over_pool_rows_adds_in_the_defined_order(compiled):
    inputs = [{"x": _x(4), "steps": 1}]
    result = _both(compiled, inputs, max_active=1)
    x = np.array(inputs[0]["x"], dtype=np.float32)
    row = result.pools["kv"][0]
    assert row.tobytes() == x.tobytes()  # one step: kv[0, j] = 0 + x[j] * 1
    scores = [_defined_sum(row * np.roll(x, -j)) for j in range(D)]
    assert result.pools["scores"][0].tobytes() == np.array(scores, dtype=np.float32).tobytes()
    assert np.float32(result.requests["dot"][0]).tobytes() == _defined_sum(np.array(scores)).tobytes()


def test_diff_reports_a_pool_difference(compiled):
    inputs = [{"x": _x(0), "steps": 1}]
    a = sim.run(compiled.sim_module(), {}, inputs)
    b = sim.run(compiled.sim_module(), {}, inputs)
    b.pools["kv"][2, 7] = 1.0
    divergence = compare(compiled.program, a, b)
    assert divergence is not None and "pool 'kv'[2, 7]" in divergence.render()
    a.pools["kv"][0, 0] = b.pools["kv"][0, 0] = np.float32("nan")  # NaN bits may differ: canonical
    b.pools["kv"][2, 7] = 0.0
    b.pools["kv"].view(np.uint32)[0, 0] = 0xFFC00001
    assert compare(compiled.program, a, b) is None


INT_POOL = """pipeline int_pool
pool counts: i32[4, 3] owned by owner
pool bits: u32[2] owned by owner
shared {
    owner: i32[4] = -1
}
request {
    n: i32
}
stage count when owner[req_id] == req_id {
    counts[req_id, n] = counts[req_id, n] - 7 * (n + 1)
    bits[req_id % 2] = 0xFFFF_FFF0u + n as u32
    n += 1
}
arbiter claim when owner[req_id] != req_id {
    owner[req_id] = req_id
}
done when n == 3
"""


def test_integer_pools():
    compiled = load_text(INT_POOL, name="int_pool.xl")
    inputs = [{} for _ in range(3)]
    result = _both(compiled, inputs, max_active=3)
    # request r owns page r: request 2's write of bits[0] (request 0's) fails, after its counts write
    assert [e[:1] + e[4:5] for e in result.errors().tolist()] == [[2, ERR_NOT_OWNER]]
    assert result.pools["counts"].tolist() == [[-7, -14, -21], [-7, -14, -21], [-7, 0, 0], [0, 0, 0]]
    assert result.pools["bits"].tolist() == [0xFFFFFFF2, 0xFFFFFFF2]
