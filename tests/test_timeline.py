"""The kernel timeline's host side on the CPU (`--timeline`, `xlgen profile`): raw buffers written
here exactly as runtime/xl_timeline.cuh writes them (one slice per team, 8 words per event,
a header per team, events past the slice counted and dropped) become a Chrome trace that is
valid, nested and monotonic; the checker catches traces that are not; the profile's numbers
are the events' sums; the chart is drawn. Without --timeline the kernel's source is the one
`xlgen build` writes (no timeline code in it). The GPU side: tests/test_timeline_gpu.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen.backends.build import load, render, render_gpu_timeline
from xlgen.cli import main
from xlgen.core.resources import runtime_dir
from xlgen.frontend.checker import load_program
from xlgen.runtime import gpu
from xlgen.tools.measure import timeline as tl

ROOT = Path(__file__).resolve().parent.parent
BASE_NS = 1_750_000_000_123_456_789  # a %globaltimer value: above 2^32, so both words matter
MASK = 0xFFFFFFFF


@pytest.fixture(scope="module")
def program():
    return load_program(ROOT / "stages" / "xl_spec.xl")[0]


class Writer:
    """A team's thread 0 in the timeline build: xl_tl_open, then xl_tl_event."""

    def __init__(self, buffers, team: int, smid: int, block: int, warp: int):
        self.b, self.team, self.n = buffers, team, 0
        buffers.headers[team] = [0, smid, block, warp]

    def event(self, kind, stage, rnd, req, start, end):
        if self.n < self.b.capacity:
            s, e = BASE_NS + start, BASE_NS + end
            self.b.events[self.team, self.n] = [kind, stage & MASK, rnd & MASK, req & MASK,
                                                s & MASK, s >> 32, e & MASK, e >> 32]
        self.n += 1
        self.b.headers[self.team, 0] = self.n


def buffers(teams: int, capacity: int, mode="deterministic", team_warps=1):
    return gpu.TimelineBuffers(np.zeros((teams, capacity, gpu.TIMELINE_WORDS), np.uint32),
                               np.zeros((teams, gpu.TIMELINE_HEADER_WORDS), np.uint32), capacity, mode, team_warps,
                               2, 64)


def deterministic_run(program, rounds=3, capacity=256, stage_ns=(300, 700, 1100, 200, 100)):
    """What xl_run_deterministic writes for 2 blocks of 2 warps (teams 0 and 2 in block 0 on SM
    4, teams 1 and 3 in block 1 on SM 9; team = warp * blocks + block), one request per team
    per round, requests 10 + team; block 0 runs phase 2 (its three collective stages, the retire
    checks, admission) between everyone's arrival and the release."""
    b = buffers(4, capacity)
    per_request = [s.index for s in program.per_request_stages]
    phase2 = [s.index for s in program.phase2_stages]
    writers = [Writer(b, t, 4 if t % 2 == 0 else 9, t % 2, t // 2) for t in range(4)]
    clock = [0, 5, 10, 15]
    for t, w in enumerate(writers):  # the first admission (block 0), then the first barrier
        if t % 2 == 0:
            w.event(tl.ADMIT, tl.NONE, -1, -1, 0, 400)
        w.event(tl.BARRIER, tl.NONE, -1, -1, 400, 1000)
        clock[t] = 1000
    for r in range(rounds):
        arrive = []
        for t, w in enumerate(writers):
            start = clock[t] + 20 * t
            now = start + 50  # the copy in
            for k, index in enumerate(per_request):
                w.event(tl.STAGE, index, r, 10 + t, now, now + stage_ns[k] * (1 + t))
                now += stage_ns[k] * (1 + t)
            now += 80  # the decision and the copy back
            w.event(tl.REQUEST, 2, r, 10 + t, start, now)
            arrive.append(now)
        arrived = max(arrive) + 30
        now = arrived
        parts = []
        for index in phase2:
            parts.append((tl.PHASE2_STAGE, index, now, now + 900))
            now += 900
        parts += [(tl.RETIRE, tl.NONE, now, now + 150), (tl.ADMIT, tl.NONE, now + 150, now + 600)]
        released = now + 640
        for t, w in enumerate(writers):
            if t % 2 == 0:
                for kind, stage, s, e in parts:
                    w.event(kind, stage, r, -1, s, e)
                w.event(tl.BARRIER, tl.NONE, r, -1, arrive[t], arrived)
                w.event(tl.PHASE2, tl.NONE, r, -1, arrived, released)
            else:
                w.event(tl.BARRIER, tl.NONE, r, -1, arrive[t], released + 25)
            clock[t] = released + 40
    return b


def test_event_kinds_and_layout_are_the_kernels():
    header = (runtime_dir() / "xl_timeline.cuh").read_text()
    body = re.search(r"enum \{([^}]*)\}", header).group(1)
    enum = {name: int(value) for name, value in re.findall(r"XL_TL_(\w+) = (\d+)", body)}
    assert enum == {name: kind for kind, name in tl.KIND_NAMES.items()}
    assert f"XL_TL_WORDS = {gpu.TIMELINE_WORDS};" in header
    assert f"XL_TL_HEADER_WORDS = {gpu.TIMELINE_HEADER_WORDS};" in header


def test_a_deterministic_run_becomes_a_valid_nested_monotonic_trace(program):
    b = deterministic_run(program)
    trace = tl.to_trace(b, program, {"pipeline": "xl_spec"})
    assert tl.check_trace(trace) == []
    assert tl.check_trace(json.loads(json.dumps(trace, allow_nan=False))) == []
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == int(b.headers[:, 0].sum())
    # one process per SM, one thread per team, named
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {(4, 0): "block 0 warp 0", (9, 1): "block 1 warp 0", (4, 2): "block 0 warp 1",
                     (9, 3): "block 1 warp 1"}
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} == {"SM 4", "SM 9"}
    # times from the earliest event, at ns precision; 64-bit clocks read back whole
    assert min(e["ts"] for e in xs) == 0
    decode = [e for e in xs if e["name"] == "decode" and e["tid"] == 1 and e["args"]["round"] == 0][0]
    assert decode["dur"] == 1.4 and decode["cat"] == "stage" and decode["args"]["request"] == 11
    request = [e for e in xs if e["name"] == "request" and e["tid"] == 1 and e["args"]["round"] == 0][0]
    assert request["ts"] <= decode["ts"] and decode["ts"] + decode["dur"] <= request["ts"] + request["dur"]
    assert request["args"] == {"request": 11, "round": 0, "keep": 2}
    kv = [e for e in xs if e["name"] == "kv_manage"]
    assert {e["cat"] for e in kv} == {"collective"} and {e["tid"] for e in kv} == {0, 2}
    first_barrier = [e for e in xs if e["name"] == "barrier wait" and "round" not in e["args"]]  # before round 0
    assert len(first_barrier) == 4
    other = trace["otherData"]
    assert other["dropped"] == 0 and other["rounds"] == 3 and other["start_ns"] == BASE_NS
    assert other["pipeline"] == "xl_spec" and other["schema"] == tl.SCHEMA


def test_fast_mode_nests_stages_and_the_epoch_wait_in_the_request_and_epochs_on_block_0(program):
    """Fast mode: a worker's request holds its stages and its wait for an epoch; block 0's
    warp 0 records each epoch's phase 2, with its stages inside."""
    b = buffers(2, 64, mode="fast")
    server, w = Writer(b, 0, 3, 0, 0), Writer(b, 1, 5, 1, 0)
    kv_manage = next(s.index for s in program.phase2_stages if s.name == "kv_manage")
    now = 0
    for it in range(2):  # two iterations of request 7, the second waits for epoch 0
        for s in program.per_request_stages:
            w.event(tl.STAGE, s.index, it, 7, now, now + 100)
            now += 100
        if it == 1:
            w.event(tl.LOCK, tl.NONE, it, 7, now, now + 900)
            server.event(tl.PHASE2_STAGE, kv_manage, 0, -1, now + 100, now + 700)
            server.event(tl.PHASE2, tl.NONE, 0, -1, now + 100, now + 850)
            now += 900
    w.event(tl.REQUEST, tl.NONE, 2, 7, 0, now + 10)
    trace = tl.to_trace(b, program)
    assert tl.check_trace(trace) == []
    prof = tl.profile(trace)
    rows = {(r.parent, r.what): r for r in prof.rows}
    assert rows[(None, "request")].events == 1
    assert rows[("request", "epoch wait")].total_us == 0.9 and rows[("request", "decode (stage)")].events == 2
    assert rows[(None, "phase 2")].total_us == 0.75 and rows[("phase 2", "kv_manage (collective)")].total_us == 0.6


def test_a_cluster_team_is_named_by_its_blocks(program):
    """A team of several blocks (a cluster): its first block's thread 0 records; the trace names the
    team by its blocks."""
    b = gpu.TimelineBuffers(np.zeros((2, 4, gpu.TIMELINE_WORDS), np.uint32),
                            np.zeros((2, gpu.TIMELINE_HEADER_WORDS), np.uint32), 4, "deterministic", 16, 16, 512, 8)
    for team in range(2):
        Writer(b, team, 8 * team, 8 * team, 0).event(tl.BARRIER, tl.NONE, -1, -1, 0, 100)
    names = {e["args"]["name"] for e in tl.to_trace(b, program)["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"blocks 0-7 (team of 16 warps x 8 blocks)", "blocks 8-15 (team of 16 warps x 8 blocks)"}
    b.phase2_team = True  # team 0 served phase 2 alone (XL_PHASE2_TEAM): the trace says so
    trace = tl.to_trace(b, program)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"blocks 0-7 (team of 16 warps x 8 blocks), phase 2's own (no requests)",
                     "blocks 8-15 (team of 16 warps x 8 blocks)"}
    assert trace["otherData"]["phase2_team"] is True
    # its waits are a row of their own in the profile, not the requests' teams' barrier wait
    rows = {(r.parent, r.what): r for r in tl.profile(trace).rows}
    assert rows[(None, "barrier wait (phase 2's own team)")].total_us == 0.1
    assert rows[(None, "barrier wait")].total_us == 0.1 and rows[(None, "barrier wait")].events == 1


def test_a_full_slice_drops_the_rest_and_says_so(program, tmp_path):
    b = deterministic_run(program, capacity=9)  # fewer than a team writes
    trace = tl.to_trace(b, program)
    assert tl.check_trace(trace) == []  # what was kept is still nested and monotonic
    other = trace["otherData"]
    tried = b.headers[:, 0].astype(int)
    assert other["dropped"] == int((tried - 9).clip(0).sum()) == b.dropped > 0
    assert other["dropped_by_team"] == {t: int(tried[t] - 9) for t in range(4)}
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X") == 4 * 9
    # never read past a team's slice: the next team's events are its own
    assert all(e["args"].get("request", 10 + e["tid"]) == 10 + e["tid"] for e in trace["traceEvents"]
               if e["ph"] == "X")
    line = tl.summary_line(trace, tmp_path / "t.json", tmp_path / "t.png")
    assert "events dropped: 4 teams filled their 9 slots" in line
    assert "dropped (a team's buffer was full)" in tl.profile(trace).table()


def _trace_of(events):
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "SM 0"}},
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "w"}}]
    return {"traceEvents": meta + [dict({"cat": "stage", "ph": "X", "pid": 0, "tid": 0, "args": {}}, **e)
                                   for e in events]}


@pytest.mark.parametrize("events, problem", [
    ([{"name": "a", "ts": 0, "dur": 5}, {"name": "b", "ts": 3, "dur": 5}], "overlaps a"),
    ([{"name": "a", "ts": 4, "dur": 1}, {"name": "b", "ts": 1, "dur": 1}], "not monotonic"),
    ([{"name": "a", "ts": 0, "dur": -1}], "negative duration"),
    ([{"name": "a", "ts": -2, "dur": 1}], "starts before the kernel"),
    ([{"name": "a", "ts": float("nan"), "dur": 1}], "'ts' must be a number"),
    ([{"name": "a", "ts": 0, "dur": 1, "args": {"request": 3}}], "not inside its request's event"),
    ([{"name": "a", "ts": 0, "dur": 1, "pid": 1, "args": {"request": 3}, "cat": "barrier"}],
     "no process_name"),
    ([{"name": "a", "ts": 0, "dur": 1, "tid": 1, "args": {}, "cat": "barrier"}], "no thread_name"),
    ([{"name": "a", "ts": 0, "dur": 1, "ph": "B"}], "not a complete"),
])
def test_the_checker_finds_what_is_wrong(events, problem):
    problems = tl.check_trace(_trace_of(events))
    assert any(problem in p for p in problems), problems


def test_the_checker_accepts_zero_length_parts_at_their_parents_end():
    request = {"name": "request", "cat": "request", "ts": 0, "dur": 2, "args": {"request": 1}}
    stages = [{"name": n, "ts": 2, "dur": 0, "args": {"request": 1}} for n in ("a", "b")]
    after = {"name": "barrier wait", "cat": "barrier", "ts": 2, "dur": 3}
    assert tl.check_trace(_trace_of([request] + stages + [after])) == []
    assert tl.check_trace([]) and tl.check_trace({"traceEvents": 3})


def test_the_profile_sums_the_events(program):
    b = deterministic_run(program, rounds=2)
    trace = tl.to_trace(b, program)
    prof = tl.profile(trace)
    rows = {(r.parent, r.what): r for r in prof.rows}
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    span = max(e["ts"] + e["dur"] for e in xs)
    assert prof.span_us == pytest.approx(span) and prof.threads == 4 and prof.sms == 2 and prof.rounds == 2
    # stage s of team t lasts stage_ns[s] * (1 + t): 8 request-rounds, each team twice
    assert rows[("request", "decode (stage)")].events == 8
    assert rows[("request", "decode (stage)")].total_us == pytest.approx(2 * 0.7 * (1 + 2 + 3 + 4))
    assert rows[(None, "request")].events == 8
    stages_us = 2 * (0.3 + 0.7 + 1.1 + 0.2 + 0.1) * 10
    assert rows[("request", "(outside its parts)")].total_us == pytest.approx(8 * 0.13)  # copy in 50 + decision 80 ns
    assert rows[(None, "request")].total_us == pytest.approx(stages_us + 8 * 0.13)
    assert rows[("phase 2", "kv_manage (collective)")].events == 4 and rows[("phase 2", "kv_manage (collective)")].mean_us == 0.9
    assert rows[("phase 2", "admit")].events == 4  # inside phase 2; the first admission is a top-level event
    assert rows[(None, "admit")].events == 2
    top = [r for r in prof.rows if r.parent is None]
    assert sum(r.total_us for r in top) == pytest.approx(prof.team_us)  # with idle, the teams' whole time
    assert rows[(None, "idle")].total_us > 0
    table = prof.table()
    assert "kv_manage (collective)" in table and "barrier wait" in table and "idle" in table
    assert "4 teams on 2 SMs" in table


def test_the_chart_and_the_json_are_written(program, tmp_path):
    trace = tl.to_trace(deterministic_run(program), program, {"pipeline": "xl_spec"})
    chart = tl.write(trace, tmp_path / "t.json")
    assert chart == tmp_path / "t.png" and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tl.read(tmp_path / "t.json") == json.loads(json.dumps(trace))
    assert tl.png_path("x.trace") == Path("x.trace.png")


def test_xlgen_profile_prints_the_table_and_refuses_what_is_no_timeline(program, tmp_path):
    trace = tl.to_trace(deterministic_run(program), program)
    (tmp_path / "t.json").write_text(json.dumps(trace))
    out = CliRunner().invoke(main, ["profile", str(tmp_path / "t.json")])
    assert out.exit_code == 0, out.output
    assert "request" in out.output and "spec_verify (stage)" in out.output and "% team time" in out.output
    zoom = CliRunner().invoke(main, ["profile", str(tmp_path / "t.json"), "--plot", str(tmp_path / "z.png"),
                                     "--window", "10:30"])
    assert zoom.exit_code == 0 and (tmp_path / "z.png").read_bytes()[:4] == b"\x89PNG"
    for window in ("30:10", "a:b", "5"):
        assert CliRunner().invoke(main, ["profile", str(tmp_path / "t.json"), "--plot", str(tmp_path / "z.png"),
                                         "--window", window]).exit_code == 2
    assert CliRunner().invoke(main, ["profile", str(tmp_path / "t.json"), "--window", "1:2"]).exit_code == 2
    (tmp_path / "bad.json").write_text(json.dumps(_trace_of([{"name": "a", "ts": 0, "dur": -1}])))
    bad = CliRunner().invoke(main, ["profile", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "not a valid timeline: event 2 (a): negative duration" in bad.output
    (tmp_path / "no.json").write_text("{")
    assert CliRunner().invoke(main, ["profile", str(tmp_path / "no.json")]).exit_code == 2
    assert CliRunner().invoke(main, ["profile", str(tmp_path / "absent.json")]).exit_code == 2


def test_the_kernel_without_timeline_has_no_timeline_code(program):
    """--timeline is a build of its own: NAME_gpu.cu (what `xlgen build` writes, generated/
    guarded by test_build) carries none of it, so the kernel without it is unchanged."""
    plain = render(program)["xl_spec_gpu.cu"]
    assert plain == (ROOT / "generated" / "xl_spec_gpu.cu").read_text()
    timed = render_gpu_timeline(program)
    for marker in ("xl_timeline.cuh", "XlTimeline", "xl_tl_"):
        assert marker not in plain and marker in timed
    compiled = load(ROOT / "stages" / "xl_spec.xl")
    assert "xl_tl_" not in gpu.single_source(compiled) and "xl_tl_event" in gpu.single_source(compiled, True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("team", ["1", "8"])
def test_the_timeline_build_compiles_warning_free_with_nvcc(tmp_path, team):
    compiled = load(ROOT / "stages" / "xl_spec.xl")
    source = tmp_path / "k.cu"
    source.write_text(gpu.single_source(compiled, timeline=True))
    proc = subprocess.run(
        ["nvcc", "-c", "-std=c++17", "-arch=sm_90", "--fmad=false", "--ftz=false", "--prec-div=true",
         "--prec-sqrt=true", "-Werror", "all-warnings", f"-DXL_TEAM_WARPS={team}",
         f"-DXL_REQUEST_IN_SHARED={1 if team == '1' else 0}", str(source), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_capacity_is_sized_from_the_launch(program):
    one = gpu.timeline_capacity(program, teams=528, requests=32, max_active=32, mode="deterministic")
    # a share of one request: it and its stages, its barrier, and block 0's phase 2 and its parts
    stages, phase2 = len(program.per_request_stages), len(program.phase2_stages)
    assert (stages, phase2) == (5, 3)  # xl_spec: prefill, decode, spec_verify, commit, kv_plan; 3 KV stages
    assert one == (1 * (stages + 3) + 4 + phase2) * gpu.TIMELINE_ROUNDS
    many = gpu.timeline_capacity(program, teams=4, requests=100_000, max_active=4096, mode="deterministic")
    assert many * 4 * gpu.TIMELINE_WORDS * 4 <= gpu.TIMELINE_MAX_BYTES
    assert gpu.timeline_capacity(program, teams=4, requests=1, max_active=1, mode="fast") >= gpu.TIMELINE_MIN_EVENTS
