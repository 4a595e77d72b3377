"""The kernel timeline (`xlgen run|bench --timeline FILE.json`, `xlgen profile FILE.json`).

The timeline build of the mega-kernel (runtime/xl_timeline.cuh) has each team (a warp, or a
block of W warps) write events into its own slice of a buffer: kind, stage, round, request,
and start and end on %globaltimer, the GPU's nanosecond clock shared by every SM. This module
turns those buffers into a Chrome trace (the Trace Event Format, which Perfetto and
chrome://tracing load: one process per SM, one thread per team, complete "X" events nested
request > stage and phase 2 > its stages), checks that a trace is valid, nested and
monotonic, summarises it as a table and draws it SM by time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Event kinds: the enum of xl_timeline.cuh (a test reads it from there).
REQUEST, STAGE, BARRIER, PHASE2, PHASE2_STAGE, RETIRE, ADMIT, LOCK = range(1, 9)
NONE = 0xFFFFFFFF
KIND_NAMES = {REQUEST: "REQUEST", STAGE: "STAGE", BARRIER: "BARRIER", PHASE2: "PHASE2",
              PHASE2_STAGE: "PHASE2_STAGE", RETIRE: "RETIRE", ADMIT: "ADMIT", LOCK: "LOCK"}
# Each kind's name and category in the trace (a stage's name is the stage's own).
_FIXED = {REQUEST: ("request", "request"), BARRIER: ("barrier wait", "barrier"), PHASE2: ("phase 2", "phase2"),
          RETIRE: ("retire checks", "phase2"), ADMIT: ("admit", "phase2"), LOCK: ("epoch wait", "barrier")}
SCHEMA = "xlgen.timeline/1"


class TimelineError(ValueError):
    """A file that is not a timeline xlgen can read (the message says why)."""


def _stage_name_and_category(program, index: int) -> tuple[str, str]:
    stages = program.stages if program is not None else ()
    if 0 <= index < len(stages):
        s = stages[index]
        return s.name, "collective" if s.is_collective else ("arbiter" if s.is_arbiter else "stage")
    return f"stage {index}", "stage"


def to_trace(buffers, program=None, meta: dict | None = None) -> dict:
    """The Chrome trace of what a timeline build wrote (runtime.gpu.TimelineBuffers).

    Times are µs from the earliest event's start, at ns precision (3 decimals). Each
    thread's events come sorted by start, a parent before the children that start with it.
    `otherData` says what was dropped when a team's slice was full."""
    headers = np.asarray(buffers.headers, dtype=np.uint32)
    events = np.asarray(buffers.events, dtype=np.uint32)
    teams = headers.shape[0]
    tried = headers[:, 0].astype(np.int64)
    kept = np.minimum(tried, buffers.capacity)
    rows = [(t, events[t, :kept[t]]) for t in range(teams) if kept[t] > 0]
    starts = [(r[:, 4].astype(np.uint64) | (r[:, 5].astype(np.uint64) << np.uint64(32))) for _t, r in rows]
    t0 = int(min(int(s.min()) for s in starts)) if starts else 0
    out = []
    smids = {}
    rounds = 0
    for (team, rec), start in zip(rows, starts):
        sm, block, warp = (int(x) for x in headers[team, 1:4])
        smids[team] = sm
        end = rec[:, 6].astype(np.uint64) | (rec[:, 7].astype(np.uint64) << np.uint64(32))
        begin_ns = start.astype(np.int64) - t0
        dur_ns = end.astype(np.int64) - start.astype(np.int64)
        # By start; at a tie the longer first, then the later written (a team writes an event when it
        # ends, so a parent after its parts): a parent always before its parts.
        order = np.lexsort((-np.arange(len(rec)), -dur_ns, begin_ns))
        for k in order:
            kind, stage, rnd, req = (int(x) for x in rec[k, :4])
            if kind in (STAGE, PHASE2_STAGE):
                name, cat = _stage_name_and_category(program, stage)
            else:
                name, cat = _FIXED.get(kind, (f"kind {kind}", "unknown"))
            args = {}
            if req != NONE:
                args["request"] = req
            if rnd != NONE:
                args["round"] = rnd if rnd < 0x80000000 else rnd - (1 << 32)
                rounds = max(rounds, args["round"] + 1)
            if kind == REQUEST and stage != NONE:
                args["keep"] = stage  # 0 retired or failed, 1 running, 2 takes a phase-2 turn, 3 retires after it
            out.append({"name": name, "cat": cat, "ph": "X", "ts": int(begin_ns[k]) / 1000,
                        "dur": int(dur_ns[k]) / 1000, "pid": sm, "tid": team, "args": args})
    meta_events = []
    for sm in sorted(set(smids.values())):
        meta_events.append({"name": "process_name", "ph": "M", "pid": sm, "tid": 0, "args": {"name": f"SM {sm}"}})
        meta_events.append({"name": "process_sort_index", "ph": "M", "pid": sm, "tid": 0,
                            "args": {"sort_index": sm}})
    for team, sm in sorted(smids.items()):
        block, warp = int(headers[team, 2]), int(headers[team, 3])
        blocks = buffers.team_blocks
        label = (f"block {block} warp {warp}" if buffers.team_warps == 1
                 else f"block {block} (team of {buffers.team_warps} warps)" if blocks == 1
                 else f"blocks {block}-{block + blocks - 1} (team of {buffers.team_warps} warps x {blocks} blocks)")
        if team == 0 and buffers.phase2_team:
            label += ", phase 2's own (no requests)"
        meta_events.append({"name": "thread_name", "ph": "M", "pid": sm, "tid": team, "args": {"name": label}})
        meta_events.append({"name": "thread_sort_index", "ph": "M", "pid": sm, "tid": team,
                            "args": {"sort_index": team}})
    dropped = {int(t): int(tried[t] - buffers.capacity) for t in range(teams) if tried[t] > buffers.capacity}
    other = {"schema": SCHEMA, "clock": "%globaltimer (ns), from the earliest event", "start_ns": t0,
             "mode": buffers.mode, "grid": buffers.grid, "threads": buffers.threads,
             "team_warps": buffers.team_warps, "teams": teams, "phase2_team": buffers.phase2_team,
             "capacity": buffers.capacity,
             "events": len(out), "dropped": sum(dropped.values()), "dropped_by_team": dropped, "rounds": rounds}
    other.update(meta or {})
    return {"traceEvents": meta_events + out, "displayTimeUnit": "ns", "otherData": other}


def _ns(x: float) -> int:
    return int(round(x * 1000))


def _spans(events) -> dict[tuple, list]:
    """Each thread's X events as (start ns, end ns, event), in file order."""
    threads: dict[tuple, list] = {}
    for e in events:
        if e.get("ph") == "X":
            threads.setdefault((e["pid"], e["tid"]), []).append((_ns(e["ts"]), _ns(e["ts"] + e["dur"]), e))
    return threads


def _close_finished(stack: list, start: int, end: int) -> None:
    """Pop the open events (start, end, ...) that the event [start, end] comes after; one it
    lies within stays (a zero-length event at an open event's end lies within it)."""
    while stack and start >= stack[-1][1] and end > stack[-1][1]:
        stack.pop()


# Events that hold others: a request (its stages) and phase 2 (its stages and parts).
def _holds_parts(e) -> bool:
    return e["cat"] == "request" or e["name"] == "phase 2"


def check_trace(trace) -> list[str]:
    """What is wrong with a trace, [] when nothing: valid Trace Event Format (complete events
    with a name, category, start, non-negative duration, process and thread, and the process
    and thread named); monotonic (each thread's events in order of start, none before the
    kernel's start); nested (two events of a thread are disjoint or one holds the other); and
    every stage of a request inside that request's event (unless events were dropped)."""
    problems: list[str] = []
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not a trace: a JSON object with a 'traceEvents' list expected"]
    events = trace["traceEvents"]
    named_pids, named_tids = set(), set()
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") not in ("X", "M"):
            problems.append(f"event {i}: not a complete ('X') or metadata ('M') event")
            continue
        if not all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) for k in ("pid", "tid")):
            problems.append(f"event {i}: pid and tid must be integers")
            continue
        if e["ph"] == "M":
            if e.get("name") == "process_name":
                named_pids.add(e["pid"])
            elif e.get("name") == "thread_name":
                named_tids.add((e["pid"], e["tid"]))
            continue
        if not isinstance(e.get("name"), str) or not isinstance(e.get("cat"), str):
            problems.append(f"event {i}: needs a name and a category")
        for key in ("ts", "dur"):
            if not isinstance(e.get(key), (int, float)) or isinstance(e.get(key), bool) or e[key] != e[key]:
                problems.append(f"event {i}: '{key}' must be a number")
                break
        else:
            if e["ts"] < 0:
                problems.append(f"event {i} ({e['name']}): starts before the kernel (ts {e['ts']})")
            if e["dur"] < 0:
                problems.append(f"event {i} ({e['name']}): negative duration {e['dur']}")
    if problems:
        return problems[:20]
    try:
        json.dumps(trace, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return [f"not valid JSON: {exc}"]
    check_stages = not trace.get("otherData", {}).get("dropped")
    for (pid, tid), spans in sorted(_spans(events).items()):
        where = f"SM {pid}, thread {tid}"
        if pid not in named_pids:
            problems.append(f"{where}: the process has no process_name")
        if (pid, tid) not in named_tids:
            problems.append(f"{where}: the thread has no thread_name")
        stack: list[tuple] = []
        last_start = None
        requests: dict[object, list] = {}
        for start, end, e in spans:
            if last_start is not None and start < last_start:
                problems.append(f"{where}: {e['name']} at {e['ts']} µs comes after an event starting later "
                                "(not monotonic)")
            last_start = start
            _close_finished(stack, start, end)
            if stack and end > stack[-1][1]:
                parent = stack[-1][2]
                problems.append(f"{where}: {e['name']} [{e['ts']}, {e['ts'] + e['dur']}] overlaps "
                                f"{parent['name']} [{parent['ts']}, {parent['ts'] + parent['dur']}] without nesting")
            stack.append((start, end, e))
            if e["cat"] == "request":
                requests.setdefault(e["args"].get("request"), []).append((start, end))
        if check_stages:  # every stage within an event of its own request, on the same thread
            for start, end, e in spans:
                if e["cat"] == "stage" and not any(s <= start and end <= t
                                                   for s, t in requests.get(e["args"].get("request"), ())):
                    problems.append(f"{where}: stage {e['name']} of request {e['args'].get('request')} at "
                                    f"{e['ts']} µs is not inside its request's event")
        if len(problems) >= 20:
            break
    return problems[:20]


@dataclass
class Row:
    what: str
    parent: str | None  # the top-level kind it is a part of
    events: int
    total_us: float

    @property
    def mean_us(self) -> float:
        return self.total_us / self.events if self.events else 0.0


@dataclass
class Breakdown:
    rows: list[Row]
    span_us: float  # the kernel's span: earliest start to latest end
    threads: int
    sms: int
    rounds: int
    events: int
    dropped: int

    @property
    def team_us(self) -> float:
        return self.span_us * self.threads

    def table(self) -> str:
        team = self.team_us or 1.0
        drop = f"{self.dropped:,} dropped (a team's buffer was full)" if self.dropped else "none dropped"
        lines = [f"timeline: {self.threads} teams on {self.sms} SMs, kernel span {self.span_us:,.1f} µs, "
                 f"{self.rounds} rounds, {self.events:,} events ({drop})",
                 f"{'what':<34} {'events':>8} {'µs/event':>9} {'µs, all teams':>14} {'% team time':>12}"]
        for r in self.rows:
            name = ("  " if r.parent else "") + r.what
            events = f"{r.events:,}" if r.events else ""
            mean = f"{r.mean_us:.3f}" if r.events else ""
            lines.append(f"{name:<34} {events:>8} {mean:>9} {r.total_us:>14,.1f} {100 * r.total_us / team:>11.1f}%")
        lines.append("(team time: the kernel's span x teams; µs, all teams: summed over every team that recorded it; "
                     "idle: no event, e.g. a team without a request that has left its loop)")
        return "\n".join(lines)


def profile(trace) -> Breakdown:
    """Where the teams' time went: each top-level kind (request, barrier wait, phase 2, ...),
    inside it each stage, collective or part, the parent's time outside its parts, and idle
    (a team's share of the kernel's span that no event covers)."""
    spans = _spans(trace["traceEvents"])
    if not spans:
        return Breakdown([], 0.0, 0, 0, 0, 0, trace.get("otherData", {}).get("dropped", 0))
    first = min(s[0][0] for s in spans.values())
    last = max(max(e for _s, e, _ev in s) for s in spans.values())
    span_ns = last - first
    totals: dict[tuple, list] = {}  # (parent name or None, name) -> [events, ns]
    order: list[tuple] = []

    def add(key, ns, count=1):
        if key not in totals:
            totals[key] = [0, 0]
            order.append(key)
        totals[key][0] += count
        totals[key][1] += ns

    covered = 0
    # Phase 2's own team (team 0, XL_PHASE2_TEAM) waits while the others run their requests: its
    # waits get a row of their own, so that "barrier wait" stays the requests' teams'.
    phase2_team = bool(trace.get("otherData", {}).get("phase2_team"))
    for (_pid, tid), thread in spans.items():
        stack: list[tuple] = []  # (start, end, key, holds parts)
        for start, end, e in thread:
            _close_finished(stack, start, end)
            label = e["name"] if e["cat"] in ("request", "barrier", "phase2", "unknown") else f"{e['name']} ({e['cat']})"
            if phase2_team and tid == 0 and e["cat"] == "barrier":
                label = f"{e['name']} (phase 2's own team)"
            holder = next((s[2] for s in reversed(stack) if s[3]), None)  # a part's parent: what holds it
            key = (holder[1] if holder else None, label)
            add(key, end - start)
            if holder is not None:
                add((holder[1], "__children__"), end - start, 0)
            elif not stack:  # (a zero-length event at the end of one that holds no parts covers nothing)
                covered += end - start
            stack.append((start, end, key, _holds_parts(e)))
    rows = []
    for key in order:
        parent, label = key
        if parent is not None or label == "__children__":
            continue
        count, ns = totals[key]
        rows.append(Row(label, None, count, ns / 1000))
        children = [k for k in order if k[0] == label and k[1] != "__children__"]
        for child in children:
            c_count, c_ns = totals[child]
            rows.append(Row(child[1], label, c_count, c_ns / 1000))
        inside = totals.get((label, "__children__"), [0, 0])[1]
        if children and ns - inside > 0:
            rows.append(Row("(outside its parts)", label, 0, (ns - inside) / 1000))
    rows.append(Row("idle", None, 0, max(0, span_ns * len(spans) - covered) / 1000))
    other = trace.get("otherData", {})
    rounds = other.get("rounds") or max((e["args"].get("round", -1) + 1 for t in spans.values() for *_x, e in t),
                                        default=0)
    sms = len({pid for pid, _tid in spans})
    return Breakdown(rows, span_ns / 1000, len(spans), sms, int(rounds), sum(len(t) for t in spans.values()),
                   int(other.get("dropped", 0)))


def read(path) -> dict:
    """A trace written by --timeline (or any Chrome trace of complete events), checked."""
    path = Path(path)
    try:
        trace = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TimelineError(f"cannot read '{path}': {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TimelineError(f"'{path}' is not JSON ({exc})") from None
    problems = check_trace(trace)
    if problems:
        raise TimelineError(f"'{path}' is not a valid timeline: {problems[0]}"
                            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return trace


# Colours of the SM-by-time chart: fixed kinds; stages get tab20's colours in declaration order.
_COLOURS = {"request": "#d9d9d9", "barrier wait": "#f2f2f2", "phase 2": "#bdbdbd", "retire checks": "#737373",
            "admit": "#525252", "epoch wait": "#fdd0a2"}


def plot(trace, path, title: str | None = None, window: tuple[float, float] | None = None) -> None:
    """The SM-by-time chart: a row per team that did more than wait at barriers, grouped by SM
    (the others are counted in the axis label); each event a bar of its colour (parents first,
    their parts on top); white where a team recorded nothing. `window`: (from, to) in µs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from ...core.files import write_with

    all_spans = _spans(trace["traceEvents"])
    first = min((s[0][0] for s in all_spans.values()), default=0)
    lo, hi = (None, None) if window is None else (first + _ns(window[0]), first + _ns(window[1]))
    spans = {key: [s for s in thread if window is None or (s[1] >= lo and s[0] <= hi)]
             for key, thread in all_spans.items()}
    spans = {key: thread for key, thread in spans.items() if any(e["cat"] != "barrier" for *_x, e in thread)}
    waiting = len(all_spans) - len(spans)
    threads = sorted(spans)  # by SM, then team
    palette = plt.get_cmap("tab20").colors
    colours = dict(_COLOURS)
    bars: dict[str, dict[int, list]] = {}
    depth_of: dict[str, int] = {}
    for row, key in enumerate(threads):
        stack: list[tuple] = []
        for start, end, e in spans[key]:
            _close_finished(stack, start, end)
            name = e["name"]
            if name not in colours:
                colours[name] = palette[(len(colours) - len(_COLOURS)) % len(palette)]
            depth_of[name] = max(depth_of.get(name, 0), len(stack))
            bars.setdefault(name, {}).setdefault(row, []).append(((start - first) / 1000, max(end - start, 1) / 1000))
            stack.append((start, end))
    fig, ax = plt.subplots(figsize=(13, 6.5))
    for name in sorted(bars, key=lambda n: depth_of[n]):  # parents below their parts
        for row, xs in bars[name].items():
            ax.broken_barh(xs, (row, 0.9), facecolors=colours[name], edgecolors="none")
    sm_rows: dict[int, list[int]] = {}
    for row, (pid, _tid) in enumerate(threads):
        sm_rows.setdefault(pid, []).append(row)
    step = max(1, len(sm_rows) // 16)
    ticks = [(rows[0], f"SM {pid}") for k, (pid, rows) in enumerate(sorted(sm_rows.items())) if k % step == 0]
    ax.set_yticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=7)
    ax.set_ylim(len(threads), 0)
    if window is not None:
        ax.set_xlim(*window)
    ax.set_xlabel("µs since the kernel's first event (%globaltimer)")
    ax.set_ylabel(f"teams ({len(threads)}), grouped by SM" +
                  (f"\n({waiting} more only waited at barriers{' here' if window else ''})" if waiting else ""))
    other = trace.get("otherData", {})
    ax.set_title(title or f"{other.get('pipeline', 'kernel')} timeline: {other.get('mode', '')} mode, "
                 f"{len(all_spans)} teams on {len({pid for pid, _tid in all_spans})} SMs"
                 + (f", {window[0]:g}-{window[1]:g} µs" if window else ""), fontsize=10)
    ax.legend(handles=[Patch(color=colours[n], label=n) for n in sorted(bars, key=lambda n: (depth_of[n], n))],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    try:
        write_with(Path(path), lambda tmp: fig.savefig(tmp, dpi=110))
    finally:
        plt.close(fig)


def png_path(json_path) -> Path:
    """Where --timeline FILE.json puts its chart: FILE.png beside it."""
    path = Path(json_path)
    return path.with_suffix(".png") if path.suffix.lower() == ".json" else path.with_name(path.name + ".png")


def write(trace, json_path) -> Path:
    """The trace as JSON and its chart beside it; returns the chart's path."""
    from ...core.files import write_atomically

    write_atomically(Path(json_path), json.dumps(trace, separators=(",", ":"), allow_nan=False) + "\n")
    chart = png_path(json_path)
    plot(trace, chart)
    return chart


def summary_line(trace, json_path, chart) -> str:
    other = trace["otherData"]
    sms = len({e["pid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"})
    line = (f"timeline: {other['events']:,} events of {other['teams']} teams on {sms} SMs in {json_path} "
            f"(open it in ui.perfetto.dev), SM by time in {chart}; `xlgen profile {json_path}` summarises it")
    if other["dropped"]:
        line += (f"\ntimeline: {other['dropped']:,} events dropped: {len(other['dropped_by_team'])} teams filled "
                 f"their {other['capacity']:,} slots (the trace holds each team's first {other['capacity']:,})")
    return line
