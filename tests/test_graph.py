"""`xlgen graph`: the bundled pipeline's state machine is extracted from guards and assignments."""

import shutil

import pytest
from click.testing import CliRunner

from xlgen.frontend.checker import load_program
from xlgen.cli import main
from xlgen.tools.pipeline.graph import to_dot


def test_bundled_state_machine_edges(monkeypatch):
    dot = to_dot(load_program("stages/xl_spec.xl")[0])
    for edge in ('"PREFILL_READY" -> "DECODE_READY" [label="prefill"]',
                 '"DECODE_READY" -> "VERIFY_READY" [label="decode"]',
                 '"VERIFY_READY" -> "COMMIT_READY" [label="spec_verify"]',
                 '"COMMIT_READY" -> "DECODE_READY" [label="commit"]',
                 '"COMMIT_READY" -> "DONE" [label="commit"]'):
        assert edge in dot
    assert '"DONE" [label="DONE", peripheries=2]' in dot  # the state `done when` tests


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_graph_renders_png(tmp_path):
    out = tmp_path / "g.png"
    result = CliRunner().invoke(main, ["graph", "stages/xl_spec.xl", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
