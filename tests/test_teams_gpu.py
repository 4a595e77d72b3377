"""Teams of warps agree with the simulator (issue 26; skipped without a GPU).

A team's ordinary code runs redundantly on all its threads and one thread writes the trace
records and runs the retire check, while a lanes loop lets every thread write on its own. The
programs below put a single-thread or redundant read of the request right before another
warp's write: a trace record before the next stage's lanes loop (the reported race), a guard
and a `let` reading what the stage's lanes loop then overwrites, a lanes loop right after an
ordinary store, a pool row written by a lanes loop after the trace record that reads the
request, and the retire check reading what the last stage's lanes loop wrote. With no team
barrier at a lanes loop's entry the records differ from the simulator's for teams of 4+.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xlgen.backends.build import load_text
from xlgen.runtime import sim
from xlgen.tools.check.diff import compare

gpu = pytest.importorskip("xlgen.runtime.gpu")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')"),
]

# The program of the report, verbatim.
REPORTED = """pipeline race
request {
    n: i32
    a: f32[16] = 16777217.0
    f: u32 = 3735928560u
}
stage s3 {
    n += 1
}
stage s4 {
    lanes for i in 0..16 {
        a[i] += ((f as f32) * 1.5)
        let r = max(j in 0..32: req_id)
    }
}
trace s3: n, a
done when n >= 2
"""

# Every other read-before-another-warp's-write a stage can contain, over 512 elements so that
# every warp of a 16-warp team has iterations.
READS_BEFORE_WRITES = """pipeline team_reads
const N: i32 = 512
pool rows: f32[8, N] owned by owner
shared {
    owner: i32[8] = -1
}
request {
    n: i32
    a: f32[N]
    b: f32[N]
    seen: f32
    first: f32
}
arbiter own when req_id < 8 && owner[req_id] < 0 {
    owner[req_id] = req_id
}
stage fill when a[N - 1] < 2000.0 {
    let head = a[N - 1]
    lanes for i in 0..N {
        a[i] = a[i] + 1.0 + (i as f32)
    }
    first = head
}
stage after_store {
    n += 1
    lanes for i in 0..N {
        b[i] = (n as f32) + a[i]
    }
}
stage to_pool when req_id < 8 && owner[req_id] == req_id {
    lanes for i in 0..N {
        rows[req_id, i] = b[i] * 2.0
    }
    let s = sum(i in 0..N: rows[req_id, i])
    seen = s
}
stage last {
    lanes for i in 0..N {
        a[i] = b[i] - 1.0
    }
}
trace fill: first, a
trace after_store: n, b
trace to_pool: seen, b
trace last: a
done when n >= 6
"""

# Warps per block, and blocks per team (a cluster on as many SMs).
TEAM_SHAPES = [(1, 1), (4, 1), (8, 1), (16, 1), (4, 2), (8, 4), (16, 8)]


# A spread loop after a loop in every block alike that read what it writes (its entry barrier stays), and
# one after reads of other fields only (it goes: tests/test_team_touch.py).
WRITES_AFTER_READS = (Path(__file__).parent / "programs" / "team_touch.xl").read_text()


# A spread loop's stores go into every block's copy of the request (xl_store_team): a field of one
# byte (a bool) by st.shared::cluster.u8, and 65 stores an iteration into one element, which must land
# in order (docs/benchmarks.md, seventeenth session: the mbarrier exchange tried there had to announce
# such a thread's bytes early). The loop after them reads what the other blocks' iterations stored.
SPREAD_STORES = """pipeline spread_stores
const N: i32 = 256
const K: i32 = 64
request {
    n: i32
    a: f32[N] = 1.0
    flag: bool[N]
    acc: f32[N]
    c: f32[N]
}
stage s {
    lanes for i in 0..N {
        let t = sum(j in 0..N: a[j] * ((i + j + n) % 7) as f32)
        flag[i] = (i + n) % 3 == 0 || t > 400.0
        acc[i] = t * 0.125
        for k in 0..K {
            acc[i] = acc[i] * 0.5 + (k as f32) + ((i + k + n) % 3) as f32
        }
    }
    lanes for i in 0..N {
        let total = sum(j in 0..N: acc[j] * (flag[j] ? 1.0 : 0.25))
        c[i] = total + (flag[N - 1 - i] ? 0.5 : 0.0) + acc[N - 1 - i]
    }
    lanes for i in 0..N {
        a[i] = c[i] * 0.001
    }
    n += 1
}
trace s: n, flag, acc, c
done when n >= 3
"""


# Layers: a loop whose body ends with a lanes loop, entered after one, so that its first lanes loop
# has no entry barrier (emit_cpp.stmt_For; tests/test_team_touch.py), reading what the previous
# layer's last loop wrote in every block.
LAYERS = """pipeline layers
const N: i32 = 256
request {
    n: i32
    a: f32[N] = 1.0
    b: f32[N]
}
stage s {
    lanes for i in 0..N {
        a[i] = a[i] + (n + i % 5) as f32
    }
    for l in 0..3 {
        lanes for i in 0..N {
            let t = sum(j in 0..N: a[j] * ((i + j + l) % 5) as f32)
            b[i] = t * 0.001
        }
        lanes for i in 0..N {
            let u = sum(j in 0..N: b[(j + i) % N] * 0.5)
            a[i] = u * 0.01 + b[N - 1 - i]
        }
    }
    n += 1
}
trace s: n, a, b
done when n >= 3
"""


@pytest.mark.parametrize("team_warps,team_blocks", TEAM_SHAPES)
@pytest.mark.parametrize("source", [REPORTED, READS_BEFORE_WRITES, WRITES_AFTER_READS, SPREAD_STORES, LAYERS],
                         ids=["reported", "reads_before_writes", "writes_after_reads", "spread_stores", "layers"])
def test_teams_agree_with_the_simulator(source, team_warps, team_blocks):
    compiled = load_text(source, "race.xl")
    inputs = [{} for _ in range(12)]
    config = sim.LaunchConfig(max_active=12, max_rounds=50)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0
    for _ in range(3):  # a race shows on some launches only
        got = gpu.run(compiled, {}, inputs, config, mode="deterministic", team_warps=team_warps,
                      team_blocks=team_blocks)
        assert compare(compiled.program, want, got) is None
        assert got.extra["team_blocks"] == team_blocks


# A cluster team (several blocks) runs a lanes loop spread over all its blocks (iterations holding
# reductions, at least one per warp; each stores into every block's copy of the request) or in
# every block alike (few iterations, or by thread: each block into its own copy). This program
# switches between them: a spread loop, a loop in every block alike reading what other blocks'
# warps wrote, a spread loop right after it (constant bounds: no entry barrier but the cluster's
# after a block's), a few-iteration loop; failures in the spread loop (an index past the end) and
# in the few-iteration one (a division by zero), at iterations that land in different blocks.
CLUSTER_MODES = """pipeline cluster_modes
const N: i32 = 64
request {
    n: i32
    a: f32[N]
    b: f32[N] = 1.0
    c: f32[N]
    d: i32[4]
}
stage s {
    lanes for i in 0..N {
        let t = sum(j in 0..N: b[j] * (i + j + n) as f32)
        a[i] = t
    }
    lanes for i in 0..N {
        b[i] = a[i] * 0.5 + a[N - 1 - i]
    }
    lanes for i in 0..N {
        let m = max(j in 0..N: b[j] - a[i])
        c[i] = m + a[i + (n == 2 ? req_id % 5 : 0) * 13]
    }
    lanes for k in 0..4 {
        d[k] = 60 / (n * 4 + k - 3 * req_id)
    }
    n += 1
}
trace s: n, a, b, c, d
done when n >= 4
"""


@pytest.mark.parametrize("team_warps,team_blocks", [(4, 1), (4, 2), (8, 2), (2, 4), (16, 4)])
def test_a_cluster_team_spreads_loops_or_runs_them_in_every_block(team_warps, team_blocks):
    compiled = load_text(CLUSTER_MODES, "cluster_modes.xl")
    inputs = [{} for _ in range(12)]
    config = sim.LaunchConfig(max_active=12, max_rounds=50)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0 and 0 < len(want.errors()) < 12
    got = gpu.run(compiled, {}, inputs, config, mode="deterministic", team_warps=team_warps, team_blocks=team_blocks)
    assert compare(compiled.program, want, got) is None


# A loop spread over a cluster team because running it in every block alike would take more than
# XL_SPREAD_TURNS turns of a block (xl_team_loop): iterations that run a loop of their own (attention's
# scores; looping_iterations.xl), short iterations by thread and rows by warp (spread_turns.xl). The
# shapes below, 64-512 threads a block, see rounds on both sides; each program fails in round 2 at
# iterations in different blocks (4 and 5 requests).
@pytest.mark.parametrize("team_warps,team_blocks", [(4, 1), (2, 4), (4, 2), (8, 2), (16, 4)])
@pytest.mark.parametrize("program,failing", [("looping_iterations.xl", 4), ("spread_turns.xl", 5)])
def test_a_cluster_team_spreads_loops_by_their_work(program, failing, team_warps, team_blocks):
    compiled = load_text((Path(__file__).parent / "programs" / program).read_text(), program)
    inputs = [{} for _ in range(12)]
    config = sim.LaunchConfig(max_active=12, max_rounds=50)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0 and len(want.errors()) == failing
    got = gpu.run(compiled, {}, inputs, config, mode="deterministic", team_warps=team_warps, team_blocks=team_blocks)
    assert compare(compiled.program, want, got) is None


# Phase 2 on a team of its own (XL_PHASE2_TEAM, the default for cluster teams): team 0 takes no
# request and runs the collective stage alone, the other teams take the requests, which change
# teams as the active list changes (5 at a time of 12, retiring after 3-6 rounds). The same
# records with it and without, for cluster teams and a team of one block.
PHASE2_TEAM = """pipeline phase2_team
const N: i32 = 64
shared {
    total: i32
    slot: i32[64] = -1
}
request {
    n: i32
    a: f32[N]
    b: f32[N]
    got: i32
    place: i32
}
stage s {
    lanes for i in 0..N {
        let t = sum(j in 0..N: a[j] * (i + j + n + place) as f32)
        b[i] = t * 0.001 + 1.0
    }
    lanes for i in 0..N {
        a[i] = b[N - 1 - i]
    }
    n += 1
}
collective c {
    let at = scan(n + req_id % 3)
    let all = sum(n)
    got = all + total
    place = at
    total += n
    slot[req_id % 64] = at
}
trace s: n, a, place
trace c: got, place
done when n >= 3 + req_id % 4
"""


@pytest.mark.parametrize("team_warps,team_blocks", [(4, 1), (4, 2), (16, 4)])
@pytest.mark.parametrize("own", ["0", "1"])
def test_phase2_on_a_team_of_its_own(own, team_warps, team_blocks, monkeypatch):
    monkeypatch.setenv("XLGEN_PHASE2_TEAM", own)
    _phase2_team_program_agrees(team_warps, team_blocks, phase2_team=own == "1")


def _phase2_team_program_agrees(team_warps: int, team_blocks: int, phase2_team: bool) -> None:
    """PHASE2_TEAM's 12 requests, 5 at a time: the GPU's records, requests and shared state = the simulator's."""
    compiled = load_text(PHASE2_TEAM, "phase2_team.xl")
    inputs = [{} for _ in range(12)]
    config = sim.LaunchConfig(max_active=5, max_rounds=50)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0 and len(want.errors()) == 0
    got = gpu.run(compiled, {}, inputs, config, mode="deterministic", team_warps=team_warps, team_blocks=team_blocks)
    assert got.extra["phase2_team"] == phase2_team
    assert compare(compiled.program, want, got) is None  # (the records, the requests' and shared state)


# Both collective drivers: run_collective, and run_collective_few over at most 32 slots (by default
# with teams of one warp only; -DXL_FEW_COLLECTIVES=0 or 1 chooses), on a warp, a block and a cluster
# team, whose phase-2 team lends the few driver its shared memory (XlColl::few): the same records
# and state as the simulator's.
@pytest.mark.parametrize("team_warps,team_blocks", [(1, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("few", ["0", "1"])
def test_both_collective_drivers(few, team_warps, team_blocks, monkeypatch):
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", f"-DXL_FEW_COLLECTIVES={few}")
    _phase2_team_program_agrees(team_warps, team_blocks, phase2_team=team_blocks > 1)
