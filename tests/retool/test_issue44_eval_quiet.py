"""Issue 44, finding 4: ``retool-eval DUMPS --quiet`` without ``--json``/``--markdown`` printed and wrote nothing and
ended 0, so a scripted evaluation lost its report silently; it is a usage error now (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from platforms.cli_errors import EXIT_USAGE
from recipes.retool.evaluate import main


def test_quiet_without_an_output_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dumps = tmp_path / "0.jsonl"
    dumps.write_text('{"input": "q", "output": "a", "score": 1.0}\n')
    assert main([str(dumps), "--quiet"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("retool-eval: error: --quiet without --json or --markdown"), lines[0]


def test_quiet_with_json_still_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check refuses only the combination that goes nowhere: --quiet --json FILE passes it (what it reads next
    may fail on this stand-in dump, but not with the --quiet line)."""
    dumps = tmp_path / "0.jsonl"
    dumps.write_text('{"input": "q", "output": "a", "score": 1.0}\n')
    try:
        main([str(dumps), "--quiet", "--json", str(tmp_path / "eval.json")])
    except SystemExit:
        pass
    assert "--quiet without" not in capsys.readouterr().err
