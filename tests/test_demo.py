"""`xlgen demo`: the README's main job runs end to end and writes its plot."""

from click.testing import CliRunner

from xlgen.cli import main


def test_demo_runs_diff_tests_and_plots(tmp_path):
    result = CliRunner().invoke(main, ["demo", "-w", "small", "-o", str(tmp_path), "--no-gpu"])
    assert result.exit_code == 0, result.output
    assert "cpu: identical to the simulator" in result.output
    for profile in ("CONSTANT", "STRUCTURED", "BURSTY"):
        assert profile in result.output
    png = tmp_path / "block_sizes.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


# ---- a pipeline's declared demo (its companion's @demo) ----------------------------------------

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from xlgen.tools.pipeline.companion import CompanionError, load as load_companion  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COUNTER = (REPO / "tests" / "programs" / "counter.xl").read_text()

SHOW_TOOLS = '''\
from xlgen.companion import Unavailable, demo

from . import helper


@demo
def show(ctx, rounds: int = 2, loud: bool = False, label: str = "x", scale: float = 1.0):
    if rounds < 0:
        raise Unavailable(f"rounds = {rounds}: give 0 or more")
    ctx.output_directory(["show.txt"])
    compiled = ctx.build()
    (ctx.out_dir / "show.txt").write_text(f"{helper.twice(rounds)} {loud} {label} {scale} {ctx.source.name} "
                                          f"{ctx.use_gpu} {compiled.name}")
    if label == "boom":
        return 1 / 0
    return rounds != 13
'''


@pytest.fixture
def show(tmp_path):
    (tmp_path / "show.xl").write_text(COUNTER.replace("pipeline counter", "pipeline show") + '\ncompanion "show_tools.py"\n')
    (tmp_path / "show_tools.py").write_text(SHOW_TOOLS)
    (tmp_path / "helper.py").write_text("def twice(n):\n    return 2 * n\n")
    return tmp_path / "show.xl"


def _demo(*args):
    return CliRunner().invoke(main, ["demo", *map(str, args)])


def test_a_pipeline_runs_its_declared_demo_with_its_arguments(show, tmp_path):
    out = tmp_path / "out"
    r = _demo(show, "--no-gpu", "-o", out, "--arg", "rounds=4", "-a", "loud=true", "-a", "label=hi", "-a", "scale=0.5")
    assert r.exit_code == 0, r.output
    assert "running the pipeline's companion" in r.stderr  # the trust model: said on every run
    assert (out / "show.txt").read_text() == "8 True hi 0.5 show.xl False show"  # helper.py: a module beside it
    assert _demo(show, "--no-gpu", "-o", out).exit_code == 0 and (out / "show.txt").read_text().startswith("4 False x")
    assert _demo(show, "--no-gpu", "-o", out, "-a", "rounds=13").exit_code == 1  # the demo found a disagreement


@pytest.mark.parametrize("args, says", [
    (["-a", "round=4"], "the demo of pipeline show (show) takes no argument 'round'; did you mean 'rounds'? "
                        "(its arguments: rounds=2, loud=False, label='x', scale=1.0)"),
    (["-a", "rounds=four"], "argument rounds=four: give an integer"),
    (["-a", "loud=maybe"], "argument loud=maybe: give true or false"),
    (["-a", "scale=big"], "argument scale=big: give a number"),
    (["-a", "rounds"], "'rounds': give NAME=VALUE"),
    (["-a", "rounds=-1"], "rounds = -1: give 0 or more"),  # the demo's own Unavailable
    (["-w", "small"], "takes no argument 'workload'"),
])
def test_demo_arguments_that_do_not_fit_are_usage_errors(show, tmp_path, args, says):
    r = _demo(show, "--no-gpu", "-o", tmp_path / "out", *args)
    assert r.exit_code == 2 and says in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()


def test_a_demo_that_raises_is_reported_with_its_line(show, tmp_path):
    r = _demo(show, "--no-gpu", "-o", tmp_path / "out", "-a", "label=boom")
    line = SHOW_TOOLS.split("\n").index("        return 1 / 0") + 1
    assert r.exit_code == 1 and f"show_tools.py:{line}: demo 'show' raised ZeroDivisionError" in r.output, r.output
    assert "Traceback" not in r.output


def test_a_pipeline_without_a_demo_says_so(tmp_path):
    (tmp_path / "plain.xl").write_text(COUNTER)
    r = _demo(tmp_path / "plain.xl", "--no-gpu", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "pipeline counter declares no demo: it has no companion module" in r.output
    r = _demo(REPO / "examples" / "token_budget" / "token_budget.xl", "--no-gpu", "-o", tmp_path / "out")
    assert r.exit_code == 2 and re.search(r"pipeline token_budget declares no demo: its companion \S*token_budget_tools"
                                          r"\.py has no @demo function", r.output), r.output
    assert not (tmp_path / "out").exists()


def test_real_names_a_pipeline_so_not_both(show):
    r = _demo(show, "--real")
    assert r.exit_code == 2 and "give PIPELINE or --real, not both" in r.output


def test_one_demo_per_companion_and_imports_stay_in_its_folder(tmp_path):
    two = tmp_path / "two_tools.py"
    two.write_text("from xlgen.companion import demo\n\n@demo\ndef a(ctx):\n    pass\n\n@demo\ndef b(ctx):\n    pass\n")
    with pytest.raises(CompanionError, match=r"more than one @demo \(a, b\)"):
        load_companion(two)
    (tmp_path / "inner").mkdir()
    out = tmp_path / "inner" / "out_tools.py"
    out.write_text("from .. import two_tools\n")
    with pytest.raises(CompanionError, match=r"out_tools\.py:1: the companion module failed to load: ImportError: "
                                             r"attempted relative import beyond top-level package"):
        load_companion(out)


def test_beside_gives_the_companions_own_modules(show):
    companion = load_companion(show.parent / "show_tools.py")
    assert companion.beside("helper") is companion.module.helper
    assert [h.name for h in companion.of("demo")] == ["show"]


def test_the_bundled_pipelines_declare_their_demos():
    from xlgen.tools.demo.declared import arguments

    demos = {name: load_companion(REPO / "stages" / f"{name}_tools.py").of("demo") for name in ("xl_spec", "byte_spec")}
    assert [h.name for h in demos["xl_spec"]] == ["asbs"] and arguments(demos["xl_spec"][0]) == {"workload": "mixed"}
    assert [h.name for h in demos["byte_spec"]] == ["real_pair_demo"]
    assert arguments(demos["byte_spec"][0]) == {"prompts": "all", "new_tokens": 128}
