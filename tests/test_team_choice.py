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


@pytest.mark.parametrize("batch, team", [(1, 32), (8, 32), (132, 32), (133, 16), (264, 16), (265, 8),
                                         (1000, 4), (4224, 1), (100000, 1)])
def test_the_largest_team_with_the_whole_batch_on_the_device(real_pair, batch, team):
    assert gpu.choose_team_warps(real_pair, "deterministic", batch, H100_SMS) == team
    # never more warps than TEAM_WARPS_PER_SM per SM, unless a warp per request already is
    assert team == 1 or batch * team <= H100_SMS * gpu.TEAM_WARPS_PER_SM


def test_one_warp_where_a_team_adds_nothing_or_cannot_run(real_pair):
    assert gpu.choose_team_warps(real_pair, "fast", 1, H100_SMS) == 1  # teams: deterministic mode only
    assert gpu.choose_team_warps(load("stages/xl_spec.xl").program, "deterministic", 1, H100_SMS) == 1


def test_the_environment_overrides_the_choice(monkeypatch):
    monkeypatch.delenv("XLGEN_TEAM_WARPS", raising=False)
    assert gpu.team_warps_default() is None  # the runtime chooses
    monkeypatch.setenv("XLGEN_TEAM_WARPS", "4")
    assert gpu.team_warps_default() == 4
