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
