"""Collective stages (docs/semantics.md §13.1) on every backend.

Each test runs a small pipeline on the simulator and on each backend (the CPU build,
and the GPU where there is one), which must agree bit for bit, and checks the
simulator's result against values worked out here by hand from the semantics.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from test_semantics_backends import run_on as run_in_both
from xlgen.backends.build import load_text
from xlgen.core import ir
from xlgen.tools.check.diff import compare_results
from xlgen.tools.check.fuzzgen import backends
from xlgen.runtime import sim
from xlgen.semantics.ops import ERR_CONFLICT, ERR_INDEX, collective, total_order_key
from xlgen.runtime.sim import KIND_ERROR, REC_HEADER

BACKENDS = [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in backends()]


def run_on(backend, src, inputs, max_active=None):
    return run_in_both(backend, src, inputs, max_rounds=8, max_active=max_active)


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


COLLECTIVES_SRC = """pipeline coll
request {
    v: i32
    u: u32
    x: f32
    on: bool = true
    r_scan: i32
    r_sum: i32
    r_uscan: u32
    r_count: i32
    r_min: i32
    r_max: u32
    r_fmin: f32
    r_fmax: f32
    r_argmin: i32
    r_argmax: i32
    r_fargmin: i32
    done_: bool
}
collective all when on {
    let a = scan(v)
    let b = sum(v)
    let c = scan(u)
    let d = count(v > 0)
    let e = min_of(v)
    let f = max_of(u)
    let g = min_of(x)
    let h = max_of(x)
    let i = argmin(v)
    let j = argmax(u)
    let k = argmin(x)
    r_scan = a
    r_sum = b
    r_uscan = c
    r_count = d
    r_min = e
    r_max = f
    r_fmin = g
    r_fmax = h
    r_argmin = i
    r_argmax = j
    r_fargmin = k
    done_ = true
}
done when done_
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 5, 300])
def test_every_collective(backend, n):
    """Results worked out from the definitions; 300 requests span several GPU chunks."""
    vs = [((i * 7919) % 23) - 11 for i in range(n)]
    vs[0] = 2147483647  # sums wrap
    us = [(i * 2654435761) & 0xFFFFFFFF for i in range(n)]
    xs = [f32(((i * 37) % 11) - 5.5) for i in range(n)]
    if n > 2:
        xs[1], xs[2] = -0.0, 0.0  # totalOrder: -0.0 < 0.0
    inputs = [{"v": v, "u": u, "x": x} for v, u, x in zip(vs, us, xs)]
    if n > 3:
        inputs[3]["on"] = False  # not a participant
    _, result = run_on(backend, COLLECTIVES_SRC, inputs)
    part = [i for i in range(n) if inputs[i].get("on", True)]
    wrap = lambda x: ((x + 2**31) % 2**32) - 2**31  # noqa: E731
    state = result.requests
    total = 0
    for i in part:
        assert state["r_scan"][i] == wrap(total), i
        total += vs[i]
    utotal = 0
    for i in part:
        assert state["r_uscan"][i] == utotal % 2**32
        utotal += us[i]
    pv = [vs[i] for i in part]
    pu = [us[i] for i in part]
    px = [xs[i] for i in part]
    for i in part:
        assert state["r_sum"][i] == wrap(sum(pv))
        assert state["r_count"][i] == sum(1 for v in pv if v > 0)
        assert state["r_min"][i] == min(pv) and state["r_max"][i] == max(pu)
        assert state["r_argmin"][i] == part[pv.index(min(pv))]  # index(): the first, i.e. lowest id
        assert state["r_argmax"][i] == part[pu.index(max(pu))]
        fmin = min(px)
        if fmin == 0.0 and n > 2:
            assert math.copysign(1.0, state["r_fmin"][i]) == -1.0  # -0.0 is less than 0.0
        assert state["r_fmin"][i] == fmin and state["r_fmax"][i] == max(px)
    if n > 3:
        assert state["r_scan"][3] == 0 and state["r_sum"][3] == 0  # took no part: nothing assigned


def test_total_order_of_floats():
    """min_of/max_of order f32 by IEEE totalOrder, NaN greatest; argmin ties go to the lowest id."""
    values = [0.0, -0.0, math.inf, math.nan, -math.inf, 1.0]
    ordered = sorted(range(len(values)), key=lambda i: total_order_key(values[i], "f"))
    assert ordered == [4, 1, 0, 5, 2, 3]
    assert collective("argmin", "i", [(3, 5), (7, 4), (9, 4)]) == [7, 7, 7]
    assert collective("argmax", "i", [(3, 5), (7, 5), (9, 4)]) == [3, 3, 3]
    assert collective("scan", "u", [(0, 0xFFFFFFFF), (1, 2), (2, 1)]) == [0, 0xFFFFFFFF, 1]


WRITES_SRC = """pipeline writes
shared {
    slot: i32[8] = -1
    total: i32 = 100
    utotal: u32
    seen: i32[8]
    flag: i32 = 7
}
request {
    want: i32
    dup: bool
    before: i32
    after: i32
    done_: bool
}
collective take when !done_ {
    let first = scan(want)
    for k in 0..8 {
        if k >= want {
            break
        }
        slot[first + k] = req_id
    }
    if dup {
        flag = req_id
    }
    total -= want
    utotal += 1u
    seen[req_id % 8] += 1
    before = slot[0]
    slot[0] = slot[0]
    after = slot[0]
    done_ = true
}
done when done_
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_writes_conflicts_and_sums(backend):
    """Writes take effect at the stage's end (reads see the state before it); two writers
    of one element both fail with CONFLICT and the element keeps its value; sums add up."""
    inputs = [{"want": 2}, {"want": 1, "dup": True}, {"want": 3}, {"want": 0, "dup": True}]
    compiled, result = run_on(backend, WRITES_SRC, inputs)
    sh, state = result.shared, result.requests
    # every request writes slot[0] (`slot[0] = slot[0]`): all four conflict
    for req in range(4):
        recs = result.per_request(req)
        err = recs[recs[:, 2] == KIND_ERROR]
        assert len(err) == 1 and int(err[0][REC_HEADER]) == ERR_CONFLICT, recs.tolist()
        assert int(err[0][REC_HEADER + 1]) == compiled.program.stage("take").loc.line
    assert int(sh["slot"][0][0]) == -1  # conflicted: the value from before the stage
    # the other claimed elements are written: offsets 0, 2, 3, 6 from the scan
    assert [int(x) for x in sh["slot"][0]] == [-1, 0, 1, 2, 2, 2, -1, -1]
    assert int(sh["flag"][0]) == 7  # requests 1 and 3 both wrote it
    assert int(sh["total"][0]) == 100 - 6 and int(sh["utotal"][0]) == 4
    assert [int(x) for x in sh["seen"][0]] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert list(state["before"]) == [-1] * 4 and list(state["after"]) == [-1] * 4  # snapshot reads


ERRORS_SRC = """pipeline errs
shared {
    got: i32[4]
    hits: i32
}
request {
    bad: i32
    s1: i32
    s2: i32
    done_: bool
}
collective c {
    let a = count(true)
    hits += 1
    let i = got[bad]
    let b = count(true)
    s1 = a
    s2 = b + i
    done_ = true
}
trace c: s1, s2
done when done_
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_active", [1, 4])
def test_a_failed_request_leaves_later_collectives(backend, max_active):
    """Request 1 fails (INDEX) between two collectives: it is counted in the first, not the
    second, and its completed shared writes stay."""
    inputs = [{}, {"bad": 9}, {}, {}]
    compiled, result = run_on(backend, ERRORS_SRC, inputs, max_active=max_active)
    recs = result.per_request(1)
    assert int(recs[-1][2]) == KIND_ERROR and int(recs[-1][REC_HEADER]) == ERR_INDEX
    state = result.requests
    batch = min(max_active, 4)
    for req in (0, 2, 3):
        assert state["s1"][req] == batch and state["s2"][req] == (batch - 1 if batch > 1 else 1)
    assert int(result.shared["hits"][0]) == 4


# Collectives side by side: one pass combines a run of them (ir.collective_groups), except
# where a contribution may fail (d's division) or reads an earlier result of the run (e reads d).
GROUPED_SRC = """pipeline grouped
request {
    div: i32 = 1
    r: i32[5]
    done_: bool
}
collective c {
    let a = count(true)
    let b = sum(10)
    let d = sum(10 / div)
    let e = scan(d)
    let f = max_of(a)
    r[0] = a
    r[1] = b
    r[2] = d
    r[3] = e
    r[4] = f
    done_ = true
}
trace c: r
done when done_
"""


def test_collectives_side_by_side_are_grouped_where_nothing_can_tell():
    program = load_text(GROUPED_SRC, "grouped.xl").program
    _, groups = ir.collective_groups(program.stages[0].body)
    assert [[c.name for c in g] for g in groups] == [["a", "b"], ["d"], ["e", "f"]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_active", [1, 4])
def test_a_request_failing_in_a_groups_neighbour_still_counts_before_it(backend, max_active):
    """Request 1 divides by zero in d's contribution: it took part in a and b (their group),
    not in d or the group after it."""
    inputs = [{}, {"div": 0}, {}, {}]
    _, result = run_on(backend, GROUPED_SRC, inputs, max_active=max_active)
    recs = result.per_request(1)
    assert int(recs[-1][2]) == KIND_ERROR
    batch = min(max_active, 4)
    rows = {req: [int(x) for x in result.requests["r"][req]] for req in (0, 2, 3)}
    for k, req in enumerate((0, 2, 3)):
        others = batch - 1 if batch > 1 else 1  # the survivors of the batch request 1 was in
        at = k if batch > 1 else 0
        assert rows[req] == [batch, 10 * batch, 10 * others, 10 * others * at, batch], req


CLAIM_THEN_SUM_SRC = """pipeline claimsum
shared {
    x: u32
}
request {
    done_: bool
}
collective claim {
    let me = scan(1)
    if me == 0 {
        x = 0x80000005u
    }
}
collective add {
    x += 1u
    done_ = true
}
trace add: done_
done when done_
"""


def test_only_a_stage_that_writes_shared_state_settles():
    """run_collective settles the shadow's writes (xl_settle_all) only for a stage that may write
    shared state: a claim or a sum, at any depth (Stage_<name>::writes_shared)."""
    claimsum = load_text(CLAIM_THEN_SUM_SRC, "claimsum.xl")
    assert {s.name: ir.writes_shared(s.body) for s in claimsum.program.stages} == {"claim": True, "add": True}
    coll = load_text(COLLECTIVES_SRC, "coll.xl")
    assert not ir.writes_shared(coll.program.stages[0].body)
    assert "static constexpr bool writes_shared = false;" in coll.files["coll_kernel.cuh"]
    assert claimsum.files["claimsum_kernel.cuh"].count("static constexpr bool writes_shared = true;") == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_active", [1, 5])
def test_a_word_claimed_in_one_stage_then_summed_in_the_next(backend, max_active):
    """One stage claims a shared word (a nonzero value), the next sums into it: the sum starts
    from the claimed value, once. (The GPU's shadow once kept a claim's value after the stage and
    the next stage's sum added it again.)"""
    compiled, result = run_on(backend, CLAIM_THEN_SUM_SRC, [{} for _ in range(5)], max_active=max_active)
    # every round claims it again, then each of the round's requests adds 1
    assert int(result.shared["x"][0]) == 0x80000005 + min(5, max_active)


CONFLICT_THEN_ARBITER_SRC = """pipeline clash
shared {
    cells: i32[1024]
    turns: i32
}
request {
    key: i32
    took: i32
    done_: bool
}
collective claim {
    cells[key % 1024] = key
}
arbiter turn {
    turns += 1
    took = turns
    done_ = true
}
trace turn: took
done when done_
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_arbiter_after_a_collective_stage_skips_its_conflicted_requests(backend, monkeypatch):
    """300 requests at once, phase 2 forced over the grid on the GPU (every block a chunk): the
    requests whose claims conflict stop in the collective stage and take no arbiter turn; the
    others take their turns in id order. (Block 0 once took the turns before the other blocks
    had marked their failed requests: fuzz seed 303.)"""
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", "-DXL_GRID_PHASE2_MIN=0")
    inputs = [{"key": i if i % 3 else 1000} for i in range(300)]  # every third request: key 1000, one cell
    _, result = run_on(backend, CONFLICT_THEN_ARBITER_SRC, inputs, max_active=300)
    recs = result.records
    failed = sorted(recs[recs[:, 2] == KIND_ERROR][:, 0].tolist())
    assert failed == list(range(0, 300, 3))
    took = [int(result.requests["took"][i]) for i in range(300) if i not in set(failed)]
    assert took == list(range(1, len(took) + 1))


def test_fast_mode_epochs_take_the_waiting_requests_together():
    """Fast mode (run_interleaved): a collective stage's participants are the requests of one
    epoch, those waiting at that moment. With one worker each epoch has one request; with three,
    the schedule decides, and s1 (count(true)) is the size of the request's epoch in every one."""
    compiled = load_text(ERRORS_SRC.replace("let i = got[bad]", "let i = got[bad % 4]"), name="coll.xl")
    module = compiled.sim_module()
    inputs = [{}, {"bad": 9}, {}]
    alone = sim.run_interleaved(module, {}, inputs, sim.LaunchConfig(max_active=3), workers=1, seed=1)
    assert list(alone.requests["s1"]) == [1, 1, 1] and list(alone.requests["s2"]) == [1, 1, 1]
    assert int(alone.shared["hits"][0]) == 3
    sizes = set()
    for seed in range(20):
        result = sim.run_interleaved(module, {}, inputs, sim.LaunchConfig(max_active=3), seed=seed)
        s1 = [int(x) for x in result.requests["s1"]]
        assert all(s1.count(k) % k == 0 for k in s1), s1  # epochs of k requests, each seen by its k members
        assert [int(x) for x in result.requests["s2"]] == s1 and int(result.shared["hits"][0]) == 3
        sizes.update(s1)
    assert sizes == {1, 2, 3}  # the schedules differ: alone, in pairs, all three together
    deterministic = sim.run(module, {}, inputs, sim.LaunchConfig(max_active=3))
    assert compare_results(compiled.program, alone, deterministic, ["done_"]) is None
    assert list(deterministic.requests["s1"]) == [3, 3, 3]


EPOCHS_SRC = """pipeline epochs
shared {
    ticks: i32
}
request {
    key: i32
    left: i32
    seen: i32
    size: i32
    rank: i32
    total: i32
    least: i32
}
stage step {
    left -= 1
}
collective meet {
    let size_ = count(true)
    let rank_ = scan(1)
    let total_ = sum(key)
    let least_ = argmin(key)
    seen = ticks
    size = size_
    rank = rank_
    total = total_
    least = least_
    ticks += 1
}
trace meet: seen, size, rank, total, least
done when left <= 0
"""


def _epochs_inputs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"key": int(k), "left": int(left)} for k, left in zip(rng.integers(-40, 40, n), rng.integers(1, 7, n))]


def _check_epochs(result, inputs) -> int:
    """Each epoch is named by `ticks` as it started (every epoch adds its size, so no two
    share it): its members saw the epoch's size, ranks 0, 1, ... in id order, the sum of their
    keys and the id of the least key (ties: the lowest id); every request met once per
    iteration. Returns the number of epochs."""
    table = result.record_table
    meets = table[(table["kind"] == 0)]
    assert len(meets) == sum(r["left"] for r in inputs)
    epochs: dict[int, list] = {}
    for rec in meets:
        epochs.setdefault(int(np.int32(rec["words"][0])), []).append(rec)
    for seen, members in epochs.items():
        members.sort(key=lambda rec: int(rec["req_id"]))
        ids = [int(rec["req_id"]) for rec in members]
        keys = [inputs[i]["key"] for i in ids]
        want = (len(ids), sum(keys), ids[keys.index(min(keys))])
        for rank, rec in enumerate(members):
            w = [int(x) for x in rec["words"][1:5].view(np.int32)]
            assert (w[0], w[2], w[3]) == want and w[1] == rank, (seen, ids[rank], w, want)
    assert sorted(epochs) == list(np.cumsum([0] + [len(epochs[k]) for k in sorted(epochs)])[:-1])
    assert int(result.shared["ticks"][0]) == len(meets)
    return len(epochs)


def test_the_epoch_check_holds_for_the_simulators_schedules():
    """_check_epochs against fast mode's semantics (run_interleaved), and its failure when one
    member of an epoch is told another size."""
    compiled = load_text(EPOCHS_SRC, name="epochs.xl")
    inputs = _epochs_inputs(40, seed=3)
    counts = [_check_epochs(sim.run_interleaved(compiled.sim_module(), {}, inputs,
                                                sim.LaunchConfig(max_active=40, max_rounds=64), workers=w, seed=w),
                            inputs) for w in (1, 7, 40)]
    assert counts[0] == sum(r["left"] for r in inputs) and counts[2] < counts[1] < counts[0]
    bad = sim.run_interleaved(compiled.sim_module(), {}, inputs, sim.LaunchConfig(max_active=40, max_rounds=64),
                              workers=7, seed=7)
    bad.records[np.flatnonzero(bad.records[:, 2] == 0)[5], REC_HEADER + 1] += 1
    with pytest.raises(AssertionError):
        _check_epochs(bad, inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("options", ["", "-DXL_FAST_SERVERS=4 -DXL_GRID_PHASE2_MIN=0", "-DXL_FAST_SERVERS=0"])
def test_fast_mode_epochs_over_several_serving_blocks(options, monkeypatch):
    """Fast mode on the GPU, 700 requests of 1-6 iterations: the epochs served by block 0 alone
    (the default), by 4 blocks with every epoch spread over them, or by as many as give each 32
    slots when every worker waits (XL_FAST_SERVERS=0), each server a chunk of an epoch's slots:
    every epoch's collectives are combined over the servers as one block's would be."""
    from xlgen.runtime import gpu

    if not gpu.available():
        pytest.skip("needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", options)  # (the default too, whatever the caller's environment)
    compiled = load_text(EPOCHS_SRC, name="epochs.xl")
    inputs = _epochs_inputs(700, seed=5)
    got = gpu.run(compiled, {}, inputs, sim.LaunchConfig(max_active=700, max_rounds=64), mode="fast")
    assert _check_epochs(got, inputs) > 1
    assert got.extra["timing"].grid > 4


def test_a_timeout_inside_a_collective_stage_names_it():
    """The simulator's hang report (--timeout, Ctrl-C) finds a request stopped in a collective stage."""
    src = """pipeline slow
request {
    n: u32
}
collective spin {
    let before = scan(1)
    for i in 0..1048576 {
        for j in 0..1048576 {
            n = n * 3u + (i as u32) + (j as u32) + (before as u32)
        }
    }
}
done when true
"""
    compiled = load_text(src, name="slow.xl")
    with pytest.raises(sim.SimHang) as stopped:
        sim.run_stoppable(compiled.sim_module(), {}, [{}, {}], sim.LaunchConfig(max_active=2), 0.3)
    line = compiled.program.stage("spin").loc.line
    running = [row for row in stopped.value.report.splitlines() if "(running)" in row]
    assert len(running) == 1 and "spin" in running[0] and f"slow.xl:{line}" in running[0], stopped.value.report


def test_a_timeout_in_an_imported_stage_names_its_file(tmp_path):
    """The hang report's source column is the stopped stage's own file, not the main file's name."""
    (tmp_path / "spin.xl").write_text("request {\n    n: u32\n}\n\nstage spin {\n    for i in 0..1048576 {\n"
                                      "        for j in 0..1048576 {\n            n = n * 3u + (i as u32) + (j as u32)\n"
                                      "        }\n    }\n}\n")
    (tmp_path / "main.xl").write_text('pipeline slow\nimport "spin.xl"\n\ndone when true\n')
    from xlgen.backends.build import load

    compiled = load(tmp_path / "main.xl")
    with pytest.raises(sim.SimHang) as stopped:
        sim.run_stoppable(compiled.sim_module(), {}, [{}], sim.LaunchConfig(max_active=1), 0.3)
    running = [row for row in stopped.value.report.splitlines() if "(running)" in row]
    line = compiled.program.stage("spin").loc.line  # (no statement of it can fail: the stage's line)
    assert len(running) == 1 and f"{tmp_path / 'spin.xl'}:{line}" in running[0], stopped.value.report
