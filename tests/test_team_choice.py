"""The team of warps the runtime chooses where neither the caller nor XLGEN_TEAM_WARPS sets one
(gpu.choose_team_warps; issue 23 item 2, docs/gpu.md "Teams of warps"). Pure functions: no GPU."""

from __future__ import annotations

import pytest

from xlgen.backends.build import load, load_text
from xlgen.runtime import gpu

H100_SMS = 132

MATVEC = """pipeline matvec
const N: i32 = 64
tensor w: f32[N, N]
request {
    x: f32[N]
    y: f32[N]
    finished: bool
}
stage mv when !finished {
    lanes for i in 0..N {
        let d = sum(j in 0..N: w[i, j] * x[j])
        y[i] = d
    }
    finished = true
}
done when finished
"""


@pytest.fixture(scope="module")
def real_pair():
    return load("stages/byte_spec.xl").program


def test_programs_whose_lanes_loops_hold_reductions_want_teams(real_pair):
    assert gpu.wants_team(real_pair)
    assert gpu.wants_team(load_text(MATVEC, "matvec.xl").program)
    # the synthetic pipeline's only lanes loop holds no reduction: a team would add nothing
    assert not gpu.wants_team(load("stages/xl_spec.xl").program)


@pytest.mark.parametrize("batch, team", [(1, 16), (8, 16), (132, 16), (133, 16), (264, 16), (265, 8),
                                         (1000, 4), (4224, 1), (100000, 1)])
def test_the_largest_team_with_the_whole_batch_on_the_device(real_pair, batch, team):
    assert gpu.choose_team_warps(real_pair, "deterministic", batch, H100_SMS) == team
    # never more warps than TEAM_WARPS_PER_SM per SM, unless a warp per request already is
    assert team == 1 or batch * team <= H100_SMS * gpu.TEAM_WARPS_PER_SM
    assert team <= gpu.TEAM_WARPS_CHOSEN_MAX  # a team of 32 warps only where the caller asks for it


def test_one_warp_where_a_team_adds_nothing_or_cannot_run(real_pair):
    assert gpu.choose_team_warps(real_pair, "fast", 1, H100_SMS) == 1  # teams: deterministic mode only
    assert gpu.choose_team_warps(load("stages/xl_spec.xl").program, "deterministic", 1, H100_SMS) == 1


def test_the_environment_overrides_the_choice(monkeypatch):
    monkeypatch.delenv("XLGEN_TEAM_WARPS", raising=False)
    assert gpu.team_warps_default() is None  # the runtime chooses
    monkeypatch.setenv("XLGEN_TEAM_WARPS", "4")
    assert gpu.team_warps_default() == 4


def test_the_cubin_cache_is_named_by_source_and_options(tmp_path, monkeypatch, capsys):
    """gpu.cubin_plan: what compile_module compiles and where it caches it; a cubin compiled
    elsewhere (scripts/precompile_cubins.py) under that name is used as is."""
    monkeypatch.setenv("XLGEN_CACHE", str(tmp_path))
    compiled = load_text(MATVEC, "matvec.xl")
    source, options, path = gpu.cubin_plan(compiled, 16, "90")
    assert path.parent == compiled.dir and path.suffix == ".cubin"
    assert "-arch=sm_90" in options and "-DXL_TEAM_WARPS=16" in options and "--fmad=false" in options
    assert "xl_run_deterministic" in source
    assert gpu.cubin_plan(compiled, 32, "90")[2] != path  # another team shape: another cubin
    monkeypatch.setenv("XLGEN_NVRTC_OPTIONS", "-DXL_ROWS_MAX=0")
    assert gpu.cubin_plan(compiled, 16, "90")[2] != path  # other options: another cubin

    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "precompile_cubins.py"
    spec = importlib.util.spec_from_file_location("precompile_cubins", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "matvec.xl").write_text(MATVEC)
    monkeypatch.delenv("XLGEN_NVRTC_OPTIONS")
    assert module.main([str(tmp_path / "matvec.xl"), "--teams", "16", "--dry-run"]) == 0
    expected = gpu.cubin_plan(load(tmp_path / "matvec.xl"), 16, "90")[2]
    assert capsys.readouterr().out.strip() == f"{expected} (team 16)"
