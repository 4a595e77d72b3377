"""The KV cache's residency report from the command line: the bundled pipeline's companion
report and plot (`--report kv`, `--plot kv=PATH`, and their old spellings `--kv-report`,
`--kv-plot`), `--param`, the bundled `kv_pressure` workload, the benchmark's KV metrics,
and the numbers docs/kv_cache.md quotes."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from xlgen.backends.build import load
from xlgen.cli import main
from xlgen.runtime import sim
from xlgen.tools.pipeline.companion import params_by_name
from xlgen.tools.pipeline.workload import load as load_workload, resolve
from xlgen.tools.pipeline.companion import load as load_companion

# The bundled pipeline's companion (stages/xl_spec_tools.py), loaded as every tool loads it.
TOOLS = load_companion(Path(__file__).resolve().parent.parent / "stages" / "xl_spec_tools.py").module
PoolObserver = TOOLS.PoolObserver
assert_invariants = TOOLS.assert_invariants
format_report = TOOLS.format_report
kv_metrics = TOOLS.kv_metrics
no_report_reason = TOOLS.no_report_reason
plot_occupancy = TOOLS.plot_occupancy
residency = TOOLS.residency
report = TOOLS.kv_report

REPO = Path(__file__).resolve().parent.parent
BUNDLED = "stages/xl_spec.xl"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _red(pixels):
    """Pixels of the threshold line (#d62728, antialiased): red, not orange (draft) or blue (committed)."""
    return (pixels[..., 0] > 0.6) & (pixels[..., 1] < 0.35) & (pixels[..., 2] < 0.35)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def compiled():
    return load(BUNDLED)


def _simulate(compiled, name="kv_pressure", observer=None, **params):
    module = compiled.sim_module()
    w = load_workload(resolve(name), module)
    w.params.update(params)
    return w, sim.run(module, w.params, w.inputs, w.config, observer=observer)


@pytest.fixture(scope="module")
def pressure_run(compiled):
    return _simulate(compiled)


# ---- the bundled workload ---------------------------------------------------------------

def test_kv_pressure_workload_puts_the_pool_under_pressure(compiled):
    observer = PoolObserver(48)
    w, result = _simulate(compiled, observer=observer)
    assert len(w.inputs) == 64 and w.config.max_active == 16
    assert w.params == {"kv_cache": True, "pool_pages": 48}
    assert_invariants(result, 48, observer)  # every request finished, nothing leaked, bookkeeping exact
    r = report(compiled.program, result, 16)
    res = residency(compiled.program, result)
    assert r.waits > 0 and r.misses > 0 and sum(r.evictions.values()) > 0
    assert r.peak_live == 48 and r.oversize == 0
    settings = TOOLS.kv_settings(params_by_name(compiled.sim_module(), w.params))
    assert (res.live > settings.threshold_pages).mean() > 0.5  # KV_PRESSURE
    assert (res.committed + res.draft + res.free == 48).all()


def test_kv_pressure_workload_agrees_with_the_cpu_build():
    result = invoke("diff", BUNDLED, "-w", "kv_pressure", "--backend", "cpu")
    assert result.exit_code == 0, result.output
    assert "identical: sim == cpu" in result.output


# ---- --kv-report -------------------------------------------------------------------------

@pytest.mark.parametrize("option", [["--kv-report"], ["--report", "kv"]])
def test_kv_report_prints_the_report_of_the_run(compiled, pressure_run, option):
    _w, expected = pressure_run
    r = report(compiled.program, expected, 16)
    result = invoke("sim", BUNDLED, "-w", "kv_pressure", *option)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "KV cache: pool of 48 pages x 16 tokens, pressure above 40.8 live pages, eviction LRU" in out
    assert format_report(r) in out
    assert f"kv_hit_rate {r.kv_hit_rate:.3f}" in out and f"fragmentation {r.fragmentation_ratio:.3f}" in out
    ev = r.evictions
    assert (f"evictions by cause: decode {ev['decode']} (draft pages for a block), recompute {ev['recompute']} "
            f"(missed pages got back), yield {ev['yield']}") in out
    assert out.index("sim: 64 requests, 64 done") < out.index("KV cache:")  # after the run's summary


def test_kv_report_with_the_kv_cache_off_is_refused_before_running(tmp_path):
    plot = tmp_path / "off.png"
    result = invoke("sim", BUNDLED, "-w", "small", "--param", "kv_cache=false", "--kv-report", "--kv-plot", plot)
    assert result.exit_code == 2, result.output
    assert ("--kv-report: the KV cache is off in this run (launch param kv_cache is false; "
            "--param kv_cache=true turns it on)") in result.output
    assert "req " not in result.output  # nothing ran
    assert "Traceback" not in result.output and not plot.exists()


def test_kv_report_on_a_pipeline_without_a_kv_cache_is_refused_before_running():
    result = invoke("sim", REPO / "tests" / "programs" / "counter.xl", "--kv-report")
    assert result.exit_code == 2, result.output
    assert ("--kv-report: pipeline counter has no companion module, so no report 'kv' (declare one with "
            "`companion \"FILE.py\"`") in result.output
    assert "req " not in result.output


def test_kv_report_in_gpu_fast_mode_is_refused_before_running():
    result = invoke("run", BUNDLED, "-w", "kv_pressure", "--mode", "fast", "--kv-report")
    assert result.exit_code == 2
    assert "--report and --plot (and --kv-report, --kv-plot) need --mode deterministic" in result.output


# ---- --kv-plot ---------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["--kv-plot", "--plot"])
def test_kv_plot_writes_a_png_of_the_occupancy(tmp_path, spelling):
    import matplotlib.image

    path = tmp_path / "kv.png"
    args = ["--kv-plot", path] if spelling == "--kv-plot" else ["--plot", f"kv={path}"]
    result = invoke("sim", BUNDLED, "-w", "kv_pressure", *args)
    assert result.exit_code == 0, result.output
    assert f"wrote {path}" in result.output
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 800 and height >= 400
    pixels = matplotlib.image.imread(path)[..., :3]
    # The committed pages (#1f77b4) fill most of the plot; the threshold line is red (#d62728).
    committed = np.all(np.abs(pixels - np.array([0x1F, 0x77, 0xB4]) / 255) < 0.02, axis=-1)
    assert committed.mean() > 0.3 and _red(pixels).sum(axis=1).max() > 300


def test_kv_plot_into_a_missing_directory_is_a_usage_error(tmp_path):
    result = invoke("sim", BUNDLED, "-w", "kv_pressure", "--kv-plot", tmp_path / "nope" / "kv.png")
    assert result.exit_code == 2
    assert "no such directory" in result.output and "Traceback" not in result.output


def test_plot_occupancy_draws_the_threshold_where_the_params_put_it(compiled, pressure_run, tmp_path):
    import matplotlib.image

    _w, result = pressure_run
    res = residency(compiled.program, result)
    rows = {}
    for threshold in (0.25, 0.75):
        path = tmp_path / f"t{threshold}.png"
        plot_occupancy(res, 48, threshold, path, title="t")
        pixels = matplotlib.image.imread(path)[..., :3]
        rows[threshold] = int(np.argmax(_red(pixels).sum(axis=1)))  # the line spans the plot's width
    assert rows[0.25] > rows[0.75]  # a lower threshold is drawn lower (image rows grow downwards)


# ---- --param -----------------------------------------------------------------------------

def test_param_overrides_the_workload(compiled):
    _w, expected = _simulate(compiled, pool_pages=24, fixed_block=8)
    result = invoke("sim", BUNDLED, "-w", "kv_pressure", "--param", "pool_pages=24", "--param", "fixed_block=8",
                    "--kv-report")
    assert result.exit_code == 0, result.output
    assert "pool of 24 pages" in result.output
    assert format_report(report(compiled.program, expected, 16)) in result.output


def test_param_turns_the_kv_cache_on():
    result = invoke("sim", BUNDLED, "-w", "small", "--param", "kv_cache=true", "--param", "pool_pages=8",
                    "--kv-report")
    assert result.exit_code == 0, result.output
    assert "KV cache: pool of 8 pages" in result.output and "kv report:" not in result.output


@pytest.mark.parametrize("arg, message", [
    ("nope=1", "--param nope: not a launch parameter of pipeline xl_spec"),
    ("pool_page=8", "did you mean 'pool_pages'?"),
    ("fixed_block=abc", "--param fixed_block=abc: fixed_block is i32; give an integer"),
    ("fixed_block=4294967296", "does not fit in i32"),
    ("kv_cache=maybe", "kv_cache is a bool; give true or false"),
    ("asbs_alpha=fast", "asbs_alpha is f32; give a number"),
    ("fixed_block", "expected NAME=VALUE"),
])
def test_bad_params_are_usage_errors(arg, message):
    result = invoke("sim", BUNDLED, "-w", "small", "--param", arg)
    assert result.exit_code == 2, result.output
    assert message in result.output
    if arg == "nope=1":  # the valid ones are listed
        assert "kv_cache" in result.output and "eviction_policy" in result.output and "fixed_block" in result.output


# ---- the benchmark's KV metrics -----------------------------------------------------------

def test_kv_metrics_are_the_report(compiled, pressure_run):
    _w, result = pressure_run
    r = report(compiled.program, result, 16)
    m = kv_metrics(compiled.program, result, 16)
    assert m == {"kv_hit_rate": r.kv_hit_rate, "fragmentation_ratio": r.fragmentation_ratio,
                 "kv_misses": r.misses, "kv_waits": r.waits, "evictions_decode": r.evictions["decode"],
                 "evictions_recompute": r.evictions["recompute"], "evictions_yield": r.evictions["yield"],
                 "peak_live_pages": r.peak_live}
    assert 0 < m["kv_hit_rate"] < 1 and 0 < m["fragmentation_ratio"] < 1 and m["kv_misses"] > 0
    assert kv_metrics(compiled.program, result, 8)["fragmentation_ratio"] != m["fragmentation_ratio"]  # page_tokens used


def test_bench_adds_kv_metrics_only_with_kv_records(compiled, pressure_run):
    from xlgen.tools.measure.bench import pipeline_metrics

    w, result = pressure_run
    metrics = pipeline_metrics(compiled, w, result)  # the companion's @metrics among the declared ones
    assert {k: metrics[k] for k in kv_metrics(compiled.program, result, 16)} == kv_metrics(compiled.program, result, 16)
    assert metrics["output_elements"] == int(result.requests["n_out"].sum())
    assert 0 < metrics["acceptance_rate"] < 1 and "mean_block[CONSTANT]" in metrics
    small, off = _simulate(compiled, "small", kv_cache=False)
    assert no_report_reason(compiled.program, off) is not None
    assert "kv_hit_rate" not in pipeline_metrics(compiled, small, off)


# ---- docs/kv_cache.md ---------------------------------------------------------------------

ROW = re.compile(r"^\| (\d+)[^|]*\| (\d)[^|]*\| ([\d.]+) \| ([\d.]+) \| (\d+) \((\d+)\) \| (\d+) \| "
                 r"(\d+) / (\d+) / (\d+) \| (\d+) \| (\d+) \|$", re.MULTILINE)


def test_the_docs_results_table_is_what_the_simulator_measures(compiled):
    doc = (REPO / "docs" / "kv_cache.md").read_text()
    rows = ROW.findall(doc)
    assert {(int(r[0]), int(r[1])) for r in rows} == {(8, 0), (8, 1), (0, 0), (0, 1)}
    for fixed, policy, hit, frag, misses, pages, waits, dec, rec, yld, peak, rounds in rows:
        cmd = (f"xlgen sim stages/xl_spec.xl -w kv_pressure --param fixed_block={fixed} "
               f"--param eviction_policy={policy} --kv-report")
        assert cmd in doc
        _w, result = _simulate(compiled, fixed_block=int(fixed), eviction_policy=int(policy))
        r = report(compiled.program, result, 16)
        measured = (f"{r.kv_hit_rate:.3f}", f"{r.fragmentation_ratio:.3f}", str(r.misses), str(r.miss_pages),
                    str(r.waits), *(str(r.evictions[c]) for c in ("decode", "recompute", "yield")),
                    str(r.peak_live), str(r.rounds))
        assert (hit, frag, misses, pages, waits, dec, rec, yld, peak, rounds) == measured, (fixed, policy)
    assert (REPO / "docs" / "kv_occupancy.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "](kv_occupancy.png)" in doc
    assert "[docs/kv_cache.md](docs/kv_cache.md)" in (REPO / "README.md").read_text()


# ---- fast mode's comparison on committed tokens (what xlgen bench checks for mega-fast) ---

def test_committed_tokens_compare_equal_when_only_kv_bookkeeping_differs(compiled, pressure_run):
    from xlgen.tools.check.diff import committed_output_fields, compare_results

    w, expected = pressure_run
    got = sim.run_interleaved(compiled.sim_module(), w.params, w.inputs, w.config, seed=0)  # fast-mode semantics
    assert not np.array_equal(expected.requests["kv_waits"], got.requests["kv_waits"])  # schedule-dependent
    fields = committed_output_fields(compiled.program)
    assert compare_results(compiled.program, expected, got, fields) is None
    assert compare_results(compiled.program, expected, got) is not None  # the whole state does differ
    got.requests["out_tokens"][5, 3] ^= 1
    divergence = compare_results(compiled.program, expected, got, fields)
    assert divergence is not None and "request 5: field out_tokens" in divergence.render()


def test_count_zero_is_a_run_of_no_requests():
    result = invoke("sim", BUNDLED, "-w", "small", "--count", "0")
    assert result.exit_code == 0, result.output
    assert "sim: 0 requests, 0 done, 0 failed, 0 rounds" in result.output
