"""Honest input handling and honest reports (issue 16): what a workload may say and how it is
stored, one launch range for every backend, exit codes, records counted by kind, slot
utilisation, the watchdog named as such, and the smaller report fixes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen.backends.build import load
from xlgen.cli import EXIT_REQUESTS_FAILED, main
from xlgen.tools.pipeline.metrics import run_counts, slot_utilisation
from xlgen.runtime import cpu, sim
from xlgen.semantics.ops import ERR_WATCHDOG
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, NO_STAGE, LaunchConfig
from xlgen.tools.pipeline.workload import WorkloadError, from_dict, load as load_workload, resolve

REPO = Path(__file__).resolve().parent.parent
PIPE = REPO / "tests" / "cli_inputs" / "inputs.xl"
COUNTER = REPO / "tests" / "programs" / "counter.xl"
F32_MAX = float(np.finfo(np.float32).max)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def compiled():
    return load(PIPE)


@pytest.fixture(scope="module")
def module(compiled):
    return compiled.sim_module()


# ---- accepted values are stored exactly as written ------------------------------------------

def test_edge_values_are_accepted_and_stored_exactly(compiled, module):
    text = ('{"requests": [{"steps": -2147483648, "bound": 2147483647, "word": 4294967295, "rate": 3.4028234663852886e38,'
            ' "enabled": false, "mode": "OFF", "caps": "EXEC", "history": [7, -7], "modes": ["FAST", "OFF"]},'
            ' {"rate": NaN, "caps": 7, "bound": 0}, {"rate": -Infinity, "bound": 0}, {"rate": 1, "bound": 0}],'
            ' "params": {"gain": Infinity, "mask": 4294967295, "start_mode": "FAST", "verbose": true, "limit": -1},'
            ' "launch": {"max_active": 2147483647, "max_rounds": 2147483647}}')
    w = from_dict(json.loads(text), module)
    assert w.inputs[0] == {"steps": -(1 << 31), "bound": (1 << 31) - 1, "word": (1 << 32) - 1, "rate": F32_MAX,
                           "enabled": False, "mode": 2, "caps": 4, "history": [7, -7], "modes": [0, 2]}
    assert w.inputs[1]["caps"] == 7 and math.isnan(w.inputs[1]["rate"])
    assert w.params == {"gain": math.inf, "mask": (1 << 32) - 1, "start_mode": 0, "verbose": True, "limit": -1}
    assert (w.config.max_active, w.config.max_rounds) == ((1 << 31) - 1, (1 << 31) - 1)
    w.config.max_rounds = 50  # the rest of this test runs the requests: request 0 counts a long way
    w.inputs[0]["steps"] = w.inputs[0]["bound"] - 1
    result = sim.run(module, w.params, w.inputs, w.config)
    r = result.requests
    assert r["rate"][0] == np.float32(F32_MAX) and np.isnan(r["rate"][1]) and r["rate"][2] == -np.inf
    assert r["rate"][3] == 1.0 and r["word"][0] == (1 << 32) - 1 and r["caps"][1] == 7
    assert list(r["history"][0]) == [7, -7, 0, 0] and list(r["modes"][0]) == [0, 2]


def test_a_generated_workload_draws_what_it_says(module):
    w = from_dict({"seed": 5, "generate": {"count": 6, "fields": {
        "steps": {"counter": 10}, "rate": {"uniform": [0.25, 0.5]}, "word": {"uniform": [3, 4]},
        "mode": {"cycle": ["OFF", "FAST"]}, "caps": {"choice": ["READ", 6]}, "history": {"constant": [1, 2]},
        "enabled": False}}}, module)
    assert [r["steps"] for r in w.inputs] == [10, 11, 12, 13, 14, 15]
    assert [r["mode"] for r in w.inputs] == [2, 0, 2, 0, 2, 0]
    assert {r["caps"] for r in w.inputs} <= {1, 6} and {r["word"] for r in w.inputs} <= {3, 4}
    assert all(0.25 <= r["rate"] < 0.5 and r["history"] == [1, 2] and r["enabled"] is False for r in w.inputs)
    # the draws follow docs/workloads.md: one generator, request by request, field by field
    rng = np.random.default_rng(5)
    expected = []
    for _ in range(6):
        rate = float(rng.uniform(0.25, 0.5))
        word = int(rng.integers(3, 5))
        caps = [1, 6][int(rng.integers(0, 2))]
        expected.append((rate, word, caps))
    assert [(r["rate"], r["word"], r["caps"]) for r in w.inputs] == expected


def test_nothing_is_coerced_any_more(module):
    """The examples of issue 16: 5.5, -5.9 and true for an i32 field used to become 5, -5 and 1."""
    for value in (5.5, -5.9, True):
        with pytest.raises(WorkloadError, match=r"workload: requests\[0\]\.steps: .* i32 takes an integer"):
            from_dict({"requests": [{"steps": value}]}, module)


def test_errors_name_the_file(tmp_path, module):
    path = tmp_path / "mine.json"
    path.write_text('{"requests": [{"mode": 7}]}')
    with pytest.raises(WorkloadError) as info:
        load_workload(path, module)
    assert str(info.value) == (f"{path}: requests[0].mode: 7 is an integer; enum Mode takes a member name "
                               "(FAST, SLOW, OFF)")


def test_the_bundled_workloads_still_load(module):
    bundled = load("stages/xl_spec.xl").sim_module()
    for name, count in (("small", 7), ("mixed", 48), ("kv_pressure", 64)):
        assert len(load_workload(resolve(name), bundled).inputs) == count


def test_many_errors_are_cut_short(module):
    with pytest.raises(WorkloadError) as info:
        from_dict({"requests": [{"steps": 0.5}] * 30}, module)
    lines = str(info.value).splitlines()
    assert len(lines) == 21 and lines[-1] == "... and 10 more"


# ---- launch settings: one range, refused by every backend rather than truncated ---------------

@pytest.mark.parametrize("setting, value", [("max_active", 0), ("max_active", (1 << 32) + 1),
                                            ("max_rounds", -1), ("max_rounds", 1 << 40),
                                            ("max_active", 2.0), ("max_rounds", True)])
def test_every_backend_refuses_a_launch_it_cannot_represent(compiled, module, setting, value):
    config = LaunchConfig(**{setting: value})
    for run in (lambda: sim.run(module, None, [{}], config), lambda: sim.run_interleaved(module, None, [{}], config),
                lambda: cpu.run(compiled, None, [{}], config)):
        with pytest.raises(ValueError, match=f"launch {setting} = .*: give an integer in 1..2147483647"):
            run()


def test_the_largest_launch_values_agree_between_backends(compiled, module):
    config = LaunchConfig(max_active=(1 << 31) - 1, max_rounds=(1 << 31) - 1)
    inputs = [{"bound": 2}, {"bound": 4}]
    a, b = sim.run(module, None, inputs, config), cpu.run(compiled, None, inputs, config)
    assert np.array_equal(a.records, b.records) and a.rounds == b.rounds == 4


def test_the_request_count_is_checked_against_memory(module):
    from xlgen.tools.pipeline.workload import bytes_per_request, check_request_count

    check_request_count(1000, module)
    with pytest.raises(WorkloadError, match=r"2000000000 requests need about 1\.\d TiB of memory before the run "
                                            r"starts \(\d+\.\d KiB each\); this machine has .* available"):
        check_request_count(2_000_000_000, module)
    assert 20 * 4 < bytes_per_request(module) < 4096  # 20 words of state: a plausible estimate


# ---- records by kind, utilisation, exit codes ----------------------------------------------------

FAILING = {"launch": {"max_active": 2, "max_rounds": 20},
           "requests": [{}, {"divisor": 0}, {"forever": True}, {"bound": 5}, {"bound": 1}]}


def test_record_table_names_the_columns(module):
    w = from_dict(FAILING, module)
    result = sim.run(module, w.params, w.inputs, w.config)
    table = result.record_table
    assert table.dtype.names == ("req_id", "round", "kind", "stage", "words")
    assert np.shares_memory(table, result.records)  # a view: callers of records keep working
    assert np.array_equal(table["req_id"], result.records[:, 0]) and np.array_equal(table["kind"], result.records[:, 2])
    assert np.array_equal(table["words"], result.records[:, 4:])
    err = table[(table["kind"] == KIND_ERROR) & (table["req_id"] == 1)][0]
    assert err["stage"] == 0 and err["words"][0] == 1 and err["words"][1] > 0  # division by zero, its line
    watchdog = table[(table["kind"] == KIND_ERROR) & (table["req_id"] == 2)][0]
    assert watchdog["stage"] == NO_STAGE and watchdog["words"][0] == ERR_WATCHDOG and watchdog["round"] == 20


def test_counts_keep_kinds_apart(module):
    w = from_dict(FAILING, module)
    result = sim.run(module, w.params, w.inputs, w.config)
    c = run_counts(result)
    kinds = result.records[:, 2]
    assert c.trace_records == int((kinds < 1000).sum())  # trace records carry their trace's index
    assert (c.done_records, c.error_records, c.runtime_errors, c.watchdog) == (3, 2, 1, 1)
    assert c.trace_records + c.done_records + c.error_records == len(result.records)
    assert (c.done, c.failed, c.unfinished) == (3, 2, 0)


def _observed_busy(module, w):
    """Busy request-rounds counted while the simulator runs (its observer sees the requests
    resident after a round's stages; a request that failed in a stage was busy in that round too)."""
    seen = []
    result = sim.run(module, w.params, w.inputs, w.config, observer=lambda rnd, reqs, sh, active: seen.append(len(active)))
    stage_errors = int(((result.records[:, 2] == KIND_ERROR) & (result.records[:, 3] != NO_STAGE)).sum())
    return result, sum(seen) + stage_errors


@pytest.mark.parametrize("source, workload", [(PIPE, FAILING), (COUNTER, {"launch": {"max_active": 3},
                                                                            "requests": [{}] * 9}),
                                               ("stages/xl_spec.xl", "small")])
def test_slot_utilisation_counts_busy_request_rounds(source, workload):
    module = load(source).sim_module()
    w = load_workload(resolve(workload), module) if isinstance(workload, str) else from_dict(workload, module)
    result, busy = _observed_busy(module, w)
    u = slot_utilisation(result, w.config.max_active)
    assert u.busy == busy and u.capacity == w.config.max_active and u.rounds == result.rounds
    assert u.fraction == busy / (w.config.max_active * result.rounds)


def test_slot_utilisation_of_the_textbook_example():
    """counter.xl: request i counts to 10 + i, one trace record per busy round; 8 requests in
    2 slots keep both slots busy except while the last request runs alone."""
    module = load(COUNTER).sim_module()
    result = sim.run(module, None, [{}] * 8, LaunchConfig(max_active=2))
    u = slot_utilisation(result, 2)
    assert u.busy == sum(10 + i for i in range(8)) == run_counts(result).trace_records  # 108
    assert result.rounds == 56 and str(u) == "slot utilisation 96.4% (108 busy request-rounds of 2 slots x 56 rounds)"


def test_sim_exit_code_and_summary_when_requests_fail(tmp_path):
    path = tmp_path / "failing.json"
    path.write_text(json.dumps(FAILING))
    result = invoke("sim", PIPE, "-w", path)
    assert result.exit_code == EXIT_REQUESTS_FAILED == 4, result.output
    assert ("sim: 5 requests, 3 done, 2 failed (1 runtime error, 1 stopped by the watchdog), 20 rounds; "
            "records: ") in result.output
    assert ", 3 done, 2 error; slot utilisation" in result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["req", "status", "ended", "steps", "quotient", "word", "rate", "enabled", "mode"]
    assert lines[1].split()[:3] == ["0", "done", "2"]
    assert lines[1].split()[5:] == ["0", "0.25", "true", "SLOW"]  # bools and enum members by name
    assert lines[2].split()[:3] == ["1", "error", "0"]
    assert "request 1 round 0: runtime error in stage work (line 32): division by zero: 100 / 0" in lines[3]
    assert lines[4].split()[:4] == ["2", "watchdog", "20", "19"]  # admitted in round 1, when request 1 failed
    assert lines[5].strip() == ("request 2 stopped by the max_iterations watchdog: unfinished after 20 rounds "
                                "(launch max_rounds)")
    assert "'done when'" not in result.output  # the watchdog is no error of `done when`


def test_sim_exits_0_when_every_request_finishes():
    result = invoke("sim", COUNTER, "--max-active", "2")
    assert result.exit_code == 0, result.output
    # The summary, then what a pipeline that declares nothing still gets: latency in rounds.
    assert result.output.splitlines()[-4:] == [
        "sim: 8 requests, 8 done, 0 failed, 56 rounds; records: 108 trace, 8 done, 0 error; slot utilisation 96.4% "
        "(108 busy request-rounds of 2 slots x 56 rounds)",
        "metrics:", "  latency_rounds_p50  30", "  latency_rounds_p99  55.72"]


def test_diff_exits_4_when_backends_agree_but_requests_fail(tmp_path):
    path = tmp_path / "failing.json"
    path.write_text(json.dumps(FAILING))
    result = invoke("diff", PIPE, "-w", path, "--backend", "cpu")
    assert "identical: sim == cpu" in result.output
    assert result.exit_code == 4, result.output
    assert "cpu: 5 requests, 3 done, 2 failed (1 runtime error, 1 stopped by the watchdog)" in result.output


def test_exit_codes_are_documented():
    doc = (REPO / "docs" / "workloads.md").read_text()
    for code, meaning in ((0, "every request finished"), (1, "backends disagree"), (2, "usage"), (3, "hang"),
                          (4, "a request failed")):
        assert f"| {code} |" in doc and meaning in doc
    for command in ("sim", "diff", "run", "bench"):
        assert "Exit codes" in invoke(command, "--help").output


# ---- smaller report fixes --------------------------------------------------------------------

def test_no_progress_labels_when_stderr_is_not_a_terminal():
    result = CliRunner().invoke(main, ["sim", str(COUNTER)])
    assert "simulating" not in result.output and "working" not in result.output


def test_graph_says_when_there_is_no_state_machine():
    result = invoke("graph", COUNTER)
    assert result.exit_code == 0
    assert '"tick";' in result.stdout  # the one stage is drawn
    assert ("note: pipeline counter has no enum request field that a stage's guard compares" in result.stderr)
    bundled = invoke("graph", "stages/xl_spec.xl")
    assert "note:" not in bundled.stderr


def test_sim_help_explains_the_columns():
    out = " ".join(invoke("sim", "--help").output.split())
    assert "`ended` (the round in" in out and "slot utilisation" in out


def test_param_types_without_the_ir_are_the_irs():
    """A generated module imported without xlgen.build has no XL_PROGRAM: its params' types
    (enums included) are read from the module itself, and agree with the IR's."""
    import types

    from xlgen.tools.pipeline.workload import param_types

    for source in (PIPE, REPO / "tests" / "programs" / "enums_flags.xl"):
        module = load(source).sim_module()
        bare = types.SimpleNamespace(**{k: v for k, v in vars(module).items() if k != "XL_PROGRAM"})
        assert param_types(bare) == param_types(module)
