"""Command-line details from issue 27: one meaning for exit code 3 in the help, the docs and the
code; --show's field list; --json and bundled names in every running command's --help."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.cli import EXIT_HANG, EXIT_USAGE, main

REPO = Path(__file__).resolve().parent.parent
COUNTER = str(REPO / "tests" / "programs" / "counter.xl")


def _help(*command) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    return " ".join(result.output.split())


def test_exit_code_3_means_one_thing_in_the_help_the_docs_and_the_code():
    assert EXIT_HANG == 3 and EXIT_USAGE == 2
    top = _help()
    assert "3 stopped at --timeout, on any backend" in top and "GPU hang;" not in top
    assert "2 usage or input error" in top and "missing or unreadable" in top
    doc = (REPO / "docs" / "workloads.md").read_text()
    row = re.search(r"^\| 3 \| (.*) \|$", doc, re.M).group(1)
    assert row.startswith("stopped at `--timeout`, on any backend") and "simulator" in row and "hang" in row
    assert "| 130 | interrupted" in doc
    for command in ("sim", "diff", "run", "bench"):
        assert re.search(r"3 (the simulator )?stopped at (--timeout|the timeout)", _help(command)), command


def test_show_of_a_field_that_does_not_exist_lists_the_fields():
    result = CliRunner().invoke(main, ["sim", COUNTER, "--show", "nofield"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "--show: 'nofield' is not a request field of pipeline counter (its scalar request fields: count, steps)" in out


@pytest.mark.parametrize("command", ["sim", "diff", "run", "bench"])
def test_every_running_command_documents_json_and_bundled_names(command):
    text = _help(command)
    assert "--json FILE" in text and "xlgen.result/1" in text and "docs/results_json.md" in text
    assert re.search(rf"xlgen {command} xl_spec .*--json \w+\.json", text), text


def test_top_level_help_has_the_new_examples():
    text = _help()
    assert "xlgen doctor" in text and "xlgen diff xl_spec -w small --json result.json" in text
    assert "xlgen fmt --check stages/*.xl # is the source canonically formatted? (prints the diff)" in text
