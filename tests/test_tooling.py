"""Declarations for the tools (`output`, `progress`, `metric`, `companion`) and the companion
module API: what the checker carries into the IR, what `xlgen sim`/`diff` compute and check
from them, how a broken companion is reported, and that xlgen itself names nothing of the
bundled pipeline."""

from __future__ import annotations

import io
import re
import textwrap
import tokenize
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen.backends.build import load
from xlgen.frontend.checker import load_program
from xlgen.cli import main
from xlgen.tools.pipeline.companion import CompanionError, load as load_companion
from xlgen.tools.check.diff import committed_output_fields
from xlgen.tools.pipeline.metrics import declared_metrics, timing_metrics
from xlgen.frontend.parser import parse_text
from xlgen.frontend.printer import format_module
from xlgen.runtime import sim

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "token_budget"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# A pipeline written for these tests: request i emits i + 2 values, one per round, and waits
# one round first when i is odd. Its invariants and reference are in the companion below.
PIPELINE = """\
pipeline emitter

enum Kind { EVEN, ODD }

shared {
    emitted: i32
}

request {
    kind: Kind = EVEN
    want: i32 = 2
    delay: i32
    out: i32[16]
    n_out: i32
}

stage emit when n_out < want {
    if delay > 0 {
        delay -= 1
    } else {
        out[n_out] = want * 10 + n_out
        n_out += 1
    }
}

collective count_all when n_out == want {
    emitted += 1
}

trace emit: n_out, delay

done when n_out == want

output out[n_out]

progress emit

metric mean_emitted[kind] = mean(n_out)
metric total = sum(n_out)
metric emit_records = sum(emit.n_out)
metric per_delay = sum(n_out) / sum(delay)
metric largest_delay = max(emit.delay)

companion "emitter_tools.py"
"""

COMPANION = """\
from xlgen.companion import invariant, metrics, reference, report

CALLS = {"round": 0, "request": 0}


@invariant
def never_too_many(state):
    CALLS["round"] += 1
    if sum(state.requests[i].n_out for i in state.active) > LIMIT:
        return f"more than {LIMIT} values in the batch"


@invariant(each="request")
def within_want(request, state):
    CALLS["request"] += 1
    if request.n_out > BAD_AT:
        return f"n_out {request.n_out} > {BAD_AT}"


@invariant(at="end")
def counted(run):
    if int(run.shared["emitted"]) != len(run.requests):
        return "emitted != requests"


@reference
def expected(request, params):
    return [int(request["want"]) * 10 + k for k in range(int(request["want"])) if k != SKIP]


@metrics
def extra(run):
    return {"rounds_seen": run.result.rounds}


@report("short")
def short(run):
    return f"{len(run.requests)} requests, {int(run.shared['emitted'])} emitted"


LIMIT = 10_000
BAD_AT = 10_000
SKIP = -1
"""

WORKLOAD = """\
{"launch": {"max_active": 3},
 "requests": [{"want": 2}, {"want": 3, "delay": 1, "kind": "ODD"}, {"want": 4}, {"want": 5, "delay": 1, "kind": "ODD"},
              {"want": 6}]}
"""


@pytest.fixture
def emitter(tmp_path):
    def make(**companion_vars):
        (tmp_path / "emitter.xl").write_text(PIPELINE)
        text = COMPANION
        for name, value in companion_vars.items():
            text = re.sub(rf"^{name} = .*$", f"{name} = {value!r}", text, flags=re.M)
        (tmp_path / "emitter_tools.py").write_text(text)
        (tmp_path / "requests.json").write_text(WORKLOAD)
        return tmp_path / "emitter.xl", tmp_path / "requests.json"
    return make


# ---- the front end ---------------------------------------------------------------------------

def test_declarations_are_carried_in_the_ir(emitter):
    path, _ = emitter()
    program, warnings = load_program(path)
    assert warnings == []
    t = program.tooling
    assert (t.output.field, t.output.count, t.progress) == ("out", "n_out", "emit")
    assert [m.name for m in t.metrics] == ["mean_emitted", "total", "emit_records", "per_delay", "largest_delay"]
    assert t.metrics[0].group == "kind" and t.metrics[2].terms[0].stage == "emit"
    assert [x.agg for x in t.metrics[3].terms] == ["sum", "sum"]
    assert t.companion == str((path.parent / "emitter_tools.py").resolve())


def test_declarations_round_trip_through_the_printer():
    text = PIPELINE.replace("metric total = sum(n_out)", "# how many\nmetric total = sum(n_out)  # all of them")
    module = parse_text(text, "emitter.xl")
    printed = format_module(module)
    assert printed == text
    assert parse_text(printed, "emitter.xl") == module


def test_declarations_change_no_generated_code(emitter):
    path, _ = emitter()
    bare = path.parent / "bare" / "emitter.xl"  # the same pipeline without the declarations
    bare.parent.mkdir()
    bare.write_text(PIPELINE[: PIPELINE.index("output out[n_out]")].rstrip() + "\n")
    with_declarations, without = load(path).files, load(bare).files
    assert with_declarations.keys() == without.keys()
    for name, text in with_declarations.items():
        assert _without_source(text) == _without_source(without[name]), name


def _without_source(text: str) -> str:
    """Generated text with the .xl path it names (a comment, a constant) taken out."""
    return re.sub(r"[^\s'\"]*emitter\.xl", "SOURCE", text)


def test_the_bundled_pipeline_declares_its_outputs_and_companion():
    program, _ = load_program(REPO / "stages" / "xl_spec.xl")
    assert committed_output_fields(program) == ["out_tokens", "n_out"]
    assert program.tooling.progress == "commit"
    assert Path(program.tooling.companion) == (REPO / "stages" / "xl_spec_tools.py").resolve()


# ---- metrics from declarations -----------------------------------------------------------------

def test_declared_metrics_and_timing(emitter):
    path, _ = emitter()
    compiled = load(path)
    inputs = [{"want": 2}, {"want": 3, "delay": 1, "kind": 1}]  # kind ODD
    result = sim.run(compiled.sim_module(), {}, inputs, sim.LaunchConfig(max_active=2))
    m = declared_metrics(compiled.program, result)
    # emit records: request 0 has n_out 1, 2; request 1 has 0 (the delay round), 1, 2, 3; each records
    # delay after the stage, so 0 every time; no delay is left at the end (a ratio over 0: no value).
    assert m == {"mean_emitted": 2.5, "mean_emitted[EVEN]": 2.0, "mean_emitted[ODD]": 3.0, "total": 5,
                 "emit_records": 9, "per_delay": None, "largest_delay": 0}
    t = timing_metrics(compiled.program, result, 2)
    # first value at the end of round 0 (request 0) and round 1 (request 1); one value per round after
    assert t["ttft_rounds_p50"] == 1.5 and t["itl_rounds_p50"] == 1.0 and t["itl_rounds_p99"] == 1.0
    assert t["latency_rounds_p50"] == 3.0  # request 0 done in round 1, request 1 in round 3: 2 and 4 rounds


def test_a_pipeline_without_declarations_still_gets_latency():
    result = invoke("sim", REPO / "tests" / "programs" / "counter.xl")
    assert result.exit_code == 0, result.output
    assert "latency_rounds_p50" in result.output and "ttft" not in result.output
    assert "invariants" not in result.output


def test_sim_prints_declared_and_companion_metrics_and_reports(emitter):
    path, workload = emitter()
    result = invoke("sim", path, "-w", workload, "--report", "short")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "output_elements     20" in out and "total               20" in out and "per_delay           n/a" in out
    assert re.search(r"by kind:\n\s+mean_emitted\n\s+EVEN\s+4\n\s+ODD\s+4\n", out), out
    assert "rounds_seen" in out and "ttft_rounds_p50" in out
    assert "5 requests, 5 emitted" in out
    assert "invariants hold (never_too_many, within_want, counted;" in out


def test_unknown_report_is_a_usage_error_naming_the_ones_there_are(emitter):
    path, workload = emitter()
    result = invoke("sim", path, "-w", workload, "--report", "long")
    assert result.exit_code == 2
    assert "--report long: pipeline emitter's companion" in result.output and "(its reports: short)" in result.output
    result = invoke("sim", path, "-w", workload, "--plot", "x=a.png")
    assert result.exit_code == 2 and "has no plot 'x' (its plots: none)" in result.output


# ---- a user's invariants, every round ------------------------------------------------------------

def test_user_invariants_are_checked_every_round_by_sim_and_diff(emitter):
    path, workload = emitter()
    compiled = load(path)
    rounds = sim.run(compiled.sim_module(), {}, [{"want": 2}, {"want": 3, "delay": 1, "kind": 1}, {"want": 4},
                                                 {"want": 5, "delay": 1, "kind": 1}, {"want": 6}],
                     sim.LaunchConfig(max_active=3)).rounds
    for command in ("sim", "diff"):
        result = invoke(command, path, "-w", workload, *(["--backend", "cpu"] if command == "diff" else []))
        assert result.exit_code == 0, result.output
        assert f"invariants hold (never_too_many, within_want, counted; {rounds} rounds checked)" in result.output
    tools = load_companion(path.parent / "emitter_tools.py").module
    assert tools.CALLS["round"] == 2 * rounds  # sim, then diff: once per round each
    assert tools.CALLS["request"] > tools.CALLS["round"]  # once per active request


def test_a_violated_invariant_names_round_and_request(emitter):
    path, workload = emitter(BAD_AT=2)
    for command in ("sim", "diff"):
        result = invoke(command, path, "-w", workload)
        assert result.exit_code == 1, result.output
        # request 1 (want 3, one round of delay) reaches n_out 3 in round 3; request 2 (want 4) in round 2
        assert "round 2, request 2: invariant 'within_want' violated: n_out 3 > 2" in result.output
        assert "round 3, request 1: invariant 'within_want' violated: n_out 3 > 2" in result.output
        assert re.search(r"invariants: \d+ violations", result.output)


def test_a_violated_round_invariant_names_the_round(emitter):
    path, workload = emitter(LIMIT=3)
    result = invoke("diff", path, "-w", workload)
    assert result.exit_code == 1
    assert "round 1: invariant 'never_too_many' violated: more than 3 values in the batch" in result.output
    assert invoke("diff", path, "-w", workload, "--no-invariants").exit_code == 0


def test_the_reference_is_checked_by_diff(emitter):
    path, workload = emitter(SKIP=1)
    result = invoke("diff", path, "-w", workload, "--backend", "cpu")
    assert result.exit_code == 1, result.output
    assert "identical: sim == cpu" in result.output
    assert "output differs from the reference 'expected':" in result.output
    assert "request 0: out[:n_out] differs from the reference 'expected' in length: 2 elements where the " \
           "reference has 1" in result.output
    assert "request 1: out[:n_out] differs from the reference 'expected' at position 1: 31 where the reference " \
           "has 32" in result.output
    good = invoke("diff", *emitter()[:1], "-w", workload, "--backend", "cpu")
    assert "output equals the reference 'expected' for all 5 finished requests" in good.output


# ---- a broken companion --------------------------------------------------------------------------

def test_a_companion_that_fails_to_import_is_reported_with_its_line(emitter, tmp_path):
    path, workload = emitter()
    (tmp_path / "emitter_tools.py").write_text("from xlgen.companion import invariant\n\nx = 1 / 0\n")
    result = invoke("sim", path, "-w", workload)
    assert result.exit_code == 1
    assert re.search(r"xlgen: error: .*emitter_tools\.py:3: the companion module failed to load: ZeroDivisionError",
                     result.output), result.output
    assert "Traceback" not in result.output
    (tmp_path / "emitter_tools.py").write_text("def broken(:\n")
    result = invoke("diff", path, "-w", workload)
    assert result.exit_code == 1 and "emitter_tools.py:1: the companion module failed to load: SyntaxError" in \
        result.output


def test_a_companion_function_that_raises_is_reported_with_its_line(emitter, tmp_path):
    path, workload = emitter()
    text = (tmp_path / "emitter_tools.py").read_text().replace('    CALLS["request"] += 1\n',
                                                               '    CALLS["request"] += 1\n    request.nope\n')
    (tmp_path / "emitter_tools.py").write_text(text)
    line = text.split("\n").index("    request.nope") + 1
    result = invoke("sim", path, "-w", workload)
    assert result.exit_code == 1
    assert f"emitter_tools.py:{line}: invariant 'within_want' raised AttributeError" in result.output
    assert "Traceback" not in result.output


def test_companion_api_misuse_is_caught_at_import(tmp_path):
    bad = tmp_path / "bad_tools.py"
    bad.write_text("from xlgen.companion import invariant\n\n@invariant(each='page')\ndef f(s):\n    pass\n")
    with pytest.raises(CompanionError, match=r"bad_tools\.py:3: .*each='page'"):
        load_companion(bad)


# ---- the example pipeline ------------------------------------------------------------------------

def test_the_example_pipeline_agrees_with_the_cpu_build_and_its_checks():
    result = invoke("diff", EXAMPLE / "token_budget.xl", "-w", EXAMPLE / "requests.json", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert "identical: sim == cpu" in result.output
    assert "invariants hold (budget_kept, within_bounds, all_work_accounted;" in result.output
    assert "output equals the reference 'expected_tokens' for all 24 finished requests" in result.output


def test_the_example_pipeline_under_a_tight_budget():
    """A budget of 3 tokens a round: every request still finishes, the budget is kept every round."""
    result = invoke("diff", EXAMPLE / "token_budget.xl", "-w", EXAMPLE / "requests.json", "--param", "budget=3",
                    "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert "invariants hold" in result.output and "output equals the reference" in result.output


def test_the_example_gets_every_metric_from_its_declarations():
    result = invoke("sim", EXAMPLE / "token_budget.xl", "-w", EXAMPLE / "requests.json", "--report", "budget")
    assert result.exit_code == 0, result.output
    for name in ("output_elements", "waited_rounds", "tokens_per_step", "latency_rounds_p50", "ttft_rounds_p50",
                 "itl_rounds_p95", "budget_use", "by tier:", "INTERACTIVE", "BATCH"):
        assert name in result.output
    assert re.search(r"budget 48 tokens/round over \d+ rounds: \d+ granted", result.output)


def test_the_readme_shows_the_example_as_it_is():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Your own pipeline in 5 minutes"):readme.index("## Testing your own pipeline")]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    sources = {"": (EXAMPLE / "token_budget.xl").read_text(), "python": (EXAMPLE / "token_budget_tools.py").read_text()}
    for lang, text in blocks:
        if lang == "sh":
            for line in text.strip().splitlines():
                args = line.split()
                assert args[0] == "xlgen"
                result = invoke(*args[1:])
                assert result.exit_code == 0, (line, result.output)
        else:
            for chunk in text.strip().split("\n\n"):
                assert chunk in sources[lang], chunk


# ---- xlgen knows no pipeline -----------------------------------------------------------------------

# Words of the bundled pipeline that are also ordinary words of the compiler and its runtime.
GENERIC = {
    "state",  # "final state", RoundState, the generated code's state
    "seed",  # a workload generator's and the fuzzer's random seed
    "vocab",  # a parameter of the prelude's model builtins (the runtime, not the pipeline)
    "decode",  # bytes.decode
    "iterations",  # loop iterations in the checker's messages
    "DONE",  # the grammar's `done` keyword, as a terminal name
    "profile",  # the `xlgen profile` command: where a kernel timeline's time went (issue 27)
}
_PATH = re.compile(r"[\w./-]+\.(?:md|py|xl|json|png)\b")


def _bundled_names() -> set[str]:
    program, _ = load_program(REPO / "stages" / "xl_spec.xl")
    names = {f.name for f in program.request_fields + program.shared_fields}
    names |= {s.name for s in program.stages} | {p.name for p in program.params} | set(program.consts)
    for e in program.enums:
        names |= {e.name, *e.members}
    return names - GENERIC


def _words(path: Path):
    """(word, line) of every identifier in the file, its strings, comments and docstrings (paths aside)."""
    text = path.read_text()
    if path.suffix != ".py":
        for number, line in enumerate(text.split("\n"), 1):
            yield from ((w, number) for w in re.findall(r"[A-Za-z_]\w*", _PATH.sub("", line)))
        return
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT):
            for w in re.findall(r"[A-Za-z_]\w*", _PATH.sub("", tok.string)):
                yield w, tok.start[0]


def test_xlgen_names_nothing_of_the_bundled_pipeline():
    names = _bundled_names()
    assert {"n_out", "out_tokens", "commit", "spec_verify", "kv_manage", "PINNED", "MAX_PAGES", "kv_cache"} <= names
    files = sorted((REPO / "xlgen").rglob("*.py")) + sorted((REPO / "templates").glob("*.j2"))
    found = [f"{p.relative_to(REPO)}:{line}: {w}" for p in files for w, line in _words(p) if w in names]
    assert found == [], "xlgen names the bundled pipeline's fields, stages, params or constants:\n" + \
        "\n".join(found[:30])


def test_the_name_check_would_catch_a_name(tmp_path):
    names = _bundled_names()
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent('''\
        def f(result):
            return result.requests["n_out"].sum()  # the committed tokens
    '''))
    assert [w for w, _ in _words(probe) if w in names] == ["n_out"]


# ---- xlgen bench reads the declarations (its GPU runs stood in for by the CPU build) ----------------

def _fake_gpu(monkeypatch):
    """xlgen.tools.measure.bench with the GPU replaced by the CPU build, timed at 1 ms, one round per µs."""
    import sys
    import types

    from xlgen.runtime import cpu, gpu

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"fake"}))
    monkeypatch.setitem(sys.modules, "cupy", cupy)

    def run(compiled, params, inputs, config, mode="deterministic", timeout=None):
        result = cpu.run(compiled, params, inputs, config)
        result.backend = f"gpu-{mode}"
        result.extra["timing"] = types.SimpleNamespace(wall_ms=1.0, kernel_ms=0.5, launches=1)
        result.extra["round_end_ns"] = np.arange(result.rounds + 1, dtype=np.int64) * 1000
        return result

    monkeypatch.setattr(gpu, "run", run)


def test_bench_gets_tokens_and_timing_from_the_declarations(monkeypatch):
    from xlgen.tools.measure.bench import run_bench
    from xlgen.tools.pipeline.workload import load as load_workload

    _fake_gpu(monkeypatch)
    compiled = load(EXAMPLE / "token_budget.xl")
    w = load_workload(EXAMPLE / "requests.json", compiled.sim_module())
    report = run_bench(compiled, w, repeats=1, variants=("mega-deterministic",))
    v = report.variants[0]
    assert v.identical and v.tokens == report.metrics["output_elements"] > 0
    assert v.tokens_per_s == v.tokens / 1e-3
    m = report.metrics
    assert m["ttft_us_p50"] == m["ttft_rounds_p50"]  # one round per µs
    assert m["itl_us_p50"] == m["itl_rounds_p50"] and m["latency_us_p99"] == m["latency_rounds_p99"]
    assert "budget_use" in m and "waited_rounds[BATCH]" in m and "slot_utilisation" in m


def test_bench_of_a_pipeline_that_declares_nothing(monkeypatch):
    from xlgen.tools.measure.bench import run_bench
    from xlgen.tools.pipeline.workload import Workload

    _fake_gpu(monkeypatch)
    compiled = load(REPO / "tests" / "programs" / "counter.xl")
    report = run_bench(compiled, Workload("default", [{} for _ in range(4)]), repeats=1,
                       variants=("mega-deterministic",))
    v = report.variants[0]
    assert v.tokens is None and v.tokens_per_s is None
    assert "latency_rounds_p50" in report.metrics and "latency_us_p50" in report.metrics
    assert not any(k.startswith(("ttft", "itl")) for k in report.metrics)
    row = report.table().splitlines()[2]
    assert row.split()[4:6] == ["-", "-"]  # tokens/s and launches/token: no output declared


def test_assert_backends_agree_checks_the_companion(emitter):
    from xlgen.tools.check.testing import CompanionCheckFailed, assert_backends_agree

    path, workload = emitter()
    assert_backends_agree(path, workload, backends=["cpu"])
    path, workload = emitter(BAD_AT=2)
    with pytest.raises(CompanionCheckFailed, match=r"round 2, request 2: invariant 'within_want' violated"):
        assert_backends_agree(path, workload, backends=["cpu"])
    assert_backends_agree(path, workload, backends=["cpu"], check_companion=False)
    path, workload = emitter(SKIP=0)
    with pytest.raises(CompanionCheckFailed, match=r"request 0: out\[:n_out\] differs from the reference"):
        assert_backends_agree(path, workload, backends=[])


def test_the_example_is_canonically_formatted_and_checks_cleanly():
    result = invoke("fmt", "--check", EXAMPLE / "token_budget.xl")
    assert result.exit_code == 0, result.output
    result = invoke("check", "--werror", EXAMPLE / "token_budget.xl")
    assert result.exit_code == 0, result.output


def test_phase2_counters_are_named_by_stage_and_part():
    """scripts/profile_kv_rounds.py and scripts/real_phase2.py name -DXL_PROFILE_PHASE2's counters
    (xl_prof[stage * 32 + part]) through xlgen.tools.measure.phase2; its length is the runtime's."""
    from xlgen.runtime.gpu import single_source
    from xlgen.tools.measure import phase2

    names = {3: "kv_manage", 8: "cost_batch"}
    assert phase2.mark_name(3 * 32, names) == "kv_manage.guards"
    assert phase2.mark_name(3 * 32 + 1, names) == "kv_manage.segment 0"
    assert phase2.mark_name(3 * 32 + 4, names) == "kv_manage.collectives 1"
    assert phase2.mark_name(8 * 32 + 30, names) == "cost_batch.settle"
    assert phase2.mark_name(9 * 32 + 31, names) == "9.traces"
    counts = np.zeros(phase2.COUNTERS, dtype=np.uint64)
    counts[[8 * 32 + 2, 3 * 32 + 3]] = [1000, 500]
    assert phase2.per_round(counts, names, 10) == [("kv_manage.segment 1", 50.0), ("cost_batch.collectives 0", 100.0)]
    runtime = single_source(load(Path(__file__).resolve().parents[1] / "stages" / "xl_spec.xl"))
    assert f"__device__ unsigned long long xl_prof[{phase2.COUNTERS}];" in runtime
    assert f"&xl_prof[(mark) & {phase2.COUNTERS - 1}]" in runtime
