"""A team that keeps its request in shared memory from one round to the next copies in only what
phase 2 may have written (xl_refresh_request): the request fields its arbiters and collective
stages assign (ir.fields_written), in spans (emit_cpp.field_spans). If a field phase 2 writes
were left out, the team would run the next round on its stale copy and its trace would differ
from the simulator's (the GPU test below, with phase 2 writing fields on both sides of a large
array it never writes, in some rounds only)."""

from __future__ import annotations

import pytest

from xlgen.backends.build import load_text
from xlgen.backends.emit_cpp import SPAN_GAP, field_spans
from xlgen.backends.layout import slots
from xlgen.core import ir
from xlgen.runtime import sim
from xlgen.tools.check.diff import compare, compare_results

PROGRAM = """pipeline refresh
const N: i32 = 256
request {
    n: i32
    seen: i32
    x: i32
    big: f32[N]
    ys: i32[8]
    tail: f32[N]
}
stage step {
    n += 1
    lanes for i in 0..N {
        big[i] = big[i] + (x + ys[i % 8]) as f32
        tail[i] = (n * 2) as f32
    }
    seen = x * 1000 + ys[n % 8]
}
# (Its writes do not depend on the schedule, so fast mode's final state is the simulator's:
# `before` is at least 0 and `total` at least 1 whoever takes part.)
collective mix when n % 3 != 1 {
    let before = scan(n + req_id)
    let total = sum(1)
    x = n * 7 + req_id + min(total, 1)
    for k in 0..8 {
        if (k + n) % 2 == 0 {
            ys[k] = ys[k] + n + k + min(before, 0)
        }
    }
}
trace step: n, seen, x, ys, big
trace mix: x, ys
done when n >= 7
"""


def test_phase2_writes_are_the_fields_its_stages_assign():
    program = load_text(PROGRAM, "refresh.xl").program
    assert ir.fields_written(program.phase2_stages) == {"x", "ys"}
    assert ir.fields_written(program.per_request_stages) == {"n", "seen", "big", "tail"}


def test_spans_cover_the_written_fields_and_join_near_ones():
    program = load_text(PROGRAM, "refresh.xl").program
    layout = {s.name: s for s in slots(program.request_fields)}
    spans = field_spans(program.request_fields, {"x", "ys"})
    # x and ys lie a 256-word array apart: two spans, each exactly its field
    assert layout["big"].count > SPAN_GAP
    assert [(s["lo"], s["hi"]) for s in spans] == [
        (layout["x"].offset, layout["x"].offset + 1),
        (layout["ys"].offset, layout["ys"].offset + layout["ys"].count),
    ]
    # n and x lie a word apart: one span from n to x, the word between included
    joined = field_spans(program.request_fields, {"n", "x"})
    assert [(s["lo"], s["hi"]) for s in joined] == [(layout["n"].offset, layout["x"].offset + 1)]
    assert joined[0]["fields"] == "n .. x (2 fields)"
    assert field_spans(program.request_fields, set()) == []


gpu = pytest.importorskip("xlgen.runtime.gpu")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")
@pytest.mark.parametrize("mode,team_warps,team_blocks", [("deterministic", 1, 1), ("deterministic", 4, 1),
                                                         ("deterministic", 4, 2), ("fast", 1, 1)])
def test_a_kept_request_sees_what_phase2_wrote(mode, team_warps, team_blocks):
    compiled = load_text(PROGRAM, "refresh.xl")
    inputs = [{} for _ in range(6)]
    config = sim.LaunchConfig(max_active=6, max_rounds=50)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0 and len(want.errors()) == 0
    got = gpu.run(compiled, {}, inputs, config, mode=mode, team_warps=team_warps, team_blocks=team_blocks)
    assert gpu.request_mode(gpu.request_bytes(compiled), team_warps, team_blocks) == 1  # the request in shared memory
    if mode == "fast":  # (its records carry each request's own iteration: the final state)
        assert compare_results(compiled.program, want, got, None) is None
    else:
        assert compare(compiled.program, want, got) is None
