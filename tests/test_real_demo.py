"""`xlgen demo --real`: the real model pair (stages/byte_spec.xl, models/bytes_pair/) end to end on
the CPU build, at CI speed: two prompts of two kinds, 16 new tokens each, and the simulator's diff
test on their first 16 bytes (the simulator is slow: docs/models.md, "In the mega-kernel")."""

from click.testing import CliRunner

from xlgen.cli import main


def test_demo_real_reproduces_pytorch_and_plots(tmp_path):
    result = CliRunner().invoke(main, ["demo", "--real", "--prompts", "random_0,prose_verse", "-n", "16", "--no-gpu",
                                       "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "cpu: identical to the simulator" in out
    assert "speculative = plain greedy: all 2 answers identical" in out
    assert "2/2 prompts agree, 32/32 tokens equal" in out
    assert "kind random" in out and "kind prose" in out and "tokens/step" in out
    png = tmp_path / "real_block_sizes.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    policies = tmp_path / "real_policy_trajectories.png"  # ASBS and the cost policy, with and without pressure
    assert policies.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and policies.stat().st_size > 10_000
    assert "policy trajectories (ASBS and the cost policy" in out
