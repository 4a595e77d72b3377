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


def _precompile_script():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "precompile_cubins.py"
    spec = importlib.util.spec_from_file_location("precompile_cubins", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    module = _precompile_script()
    (tmp_path / "matvec.xl").write_text(MATVEC)
    monkeypatch.delenv("XLGEN_NVRTC_OPTIONS")
    assert module.main([str(tmp_path / "matvec.xl"), "--teams", "16", "--dry-run"]) == 0
    expected = gpu.cubin_plan(load(tmp_path / "matvec.xl"), 16, "90")[2]
    assert capsys.readouterr().out.strip() == f"{expected} (team 16)"


def test_a_team_of_several_blocks_is_a_cluster_with_a_request_copy_per_block(tmp_path, monkeypatch, capsys):
    """Teams of several blocks (XL_TEAM_BLOCKS): their own cubin, built with the cluster's size and a
    copy of the request in each block's shared memory, however large (the real pair's 189 KB too);
    the runtime takes 8 blocks for a team of several warps where the batch's clusters fit half the SMs."""
    monkeypatch.setenv("XLGEN_CACHE", str(tmp_path))
    monkeypatch.delenv("XLGEN_NVRTC_OPTIONS", raising=False)
    compiled = load_text(MATVEC, "matvec.xl")
    one = gpu.cubin_plan(compiled, 16, "90")
    four = gpu.cubin_plan(compiled, 16, "90", team_blocks=4)
    assert four[2] != one[2] and "-DXL_TEAM_BLOCKS=4" in four[1] and "-DXL_TEAM_BLOCKS=4" not in one[1]
    assert "-DXL_REQUEST_IN_SHARED=1" in four[1] and "-DXL_REQUEST_IN_SHARED=1" in one[1]
    assert gpu.request_mode(193_000, 16, 4) == 1 and gpu.request_mode(193_000, 16, 1) == 0
    chosen, program = gpu.TEAM_BLOCKS_CHOSEN, compiled.program
    assert gpu.choose_team_blocks(program, 16, "deterministic", 8, H100_SMS, 193_000) == chosen  # batch 8
    assert gpu.choose_team_blocks(program, 16, "deterministic", 9, H100_SMS, 193_000) == 1  # 72 clusters: too many
    assert gpu.choose_team_blocks(program, 1, "deterministic", 1, H100_SMS, 100) == 1  # a team of one warp
    assert gpu.choose_team_blocks(program, 16, "fast", 1, H100_SMS, 100) == 1
    assert gpu.choose_team_blocks(program, 16, "deterministic", 1, H100_SMS, gpu.CLUSTER_REQUEST_MAX + 1) == 1
    # no matrix-vector loop to spread: one block, whatever the team's warps
    assert gpu.choose_team_blocks(load("stages/xl_spec.xl").program, 8, "deterministic", 1, H100_SMS, 100) == 1
    monkeypatch.delenv("XLGEN_TEAM_BLOCKS", raising=False)
    assert gpu.team_blocks_default() is None
    monkeypatch.setenv("XLGEN_TEAM_BLOCKS", "4")
    assert gpu.team_blocks_default() == 4

    module = _precompile_script()
    (tmp_path / "matvec.xl").write_text(MATVEC)
    assert module.main([str(tmp_path / "matvec.xl"), "--teams", "16x4", "--dry-run"]) == 0
    expected = gpu.cubin_plan(load(tmp_path / "matvec.xl"), 16, "90", team_blocks=4)[2]
    assert capsys.readouterr().out.strip() == f"{expected} (team 16x4)"


def test_phase2_gets_a_team_of_its_own_with_cluster_teams(tmp_path, monkeypatch):
    """XL_PHASE2_TEAM: built in by default for teams of several blocks (the host then launches one
    team more), never for teams of one warp; XLGEN_PHASE2_TEAM=0 or 1 overrides it (its own cubin)."""
    monkeypatch.setenv("XLGEN_CACHE", str(tmp_path))
    monkeypatch.delenv("XLGEN_NVRTC_OPTIONS", raising=False)
    monkeypatch.delenv("XLGEN_PHASE2_TEAM", raising=False)
    compiled = load_text(MATVEC, "matvec.xl")
    assert gpu.phase2_team(16, 8) and gpu.phase2_team(4, 2)
    assert not gpu.phase2_team(16, 1) and not gpu.phase2_team(1, 1)
    default = gpu.cubin_plan(compiled, 16, "90", team_blocks=8)
    assert "-DXL_PHASE2_TEAM=1" in default[1]
    assert "-DXL_PHASE2_TEAM=1" not in gpu.cubin_plan(compiled, 16, "90")[1]
    monkeypatch.setenv("XLGEN_PHASE2_TEAM", "0")
    assert not gpu.phase2_team(16, 8)
    off = gpu.cubin_plan(compiled, 16, "90", team_blocks=8)
    assert "-DXL_PHASE2_TEAM=1" not in off[1] and off[2] != default[2]
    monkeypatch.setenv("XLGEN_PHASE2_TEAM", "1")
    assert gpu.phase2_team(16, 1) and not gpu.phase2_team(1, 1)


def test_run_refuses_blocks_of_one_warp():
    from click.testing import CliRunner

    from xlgen.cli import main

    out = CliRunner().invoke(main, ["run", "stages/xl_spec.xl", "--team-warps", "1", "--team-blocks", "4"])
    assert out.exit_code == 2 and "--team-blocks needs blocks of several warps" in out.output
