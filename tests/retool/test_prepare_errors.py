"""Errors people meet with ``retool-prepare`` (issue 14, finding 10): one line naming the file and what to do, exit 2,
no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipes.retool.prepare import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["val", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def test_output_directory_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").mkdir()
    code, line = _run(capsys, "--input", str(tmp_path / "missing.parquet"), "--output", str(tmp_path / "out"))
    assert code == 2 and "is a folder, not a file" in line  # before reading the (missing) input


def test_truncated_parquet_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"problem": ["1+1"] * 50, "answer": ["2"] * 50}), good)
    bad = tmp_path / "aime_2025.parquet"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    code, line = _run(capsys, "--input", str(bad), "--output", str(tmp_path / "o.parquet"))
    assert code == 2 and str(bad) in line and "not a readable parquet" in line
    assert not (tmp_path / "o.parquet").exists()


def test_empty_jsonl_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, line = _run(capsys, "--input", str(empty), "--output", str(tmp_path / "o.parquet"))
    assert code == 2 and "empty.jsonl" in line and "empty" in line.split("empty.jsonl", 1)[1]


def test_offline_hub_says_how_to_bring_the_data_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import recipes.retool.prepare as prepare

    def offline(*_: object, **__: object) -> None:  # what datasets raises with HF_HUB_OFFLINE=1
        raise ConnectionError("Couldn't reach 'yentinglin/aime_2025' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(prepare, "open_source", offline)
    code, line = _run(capsys, "--input", "yentinglin/aime_2025", "--output", str(tmp_path / "o.parquet"))
    assert code == 2 and "cannot be reached" in line
    assert "hf download --repo-type dataset yentinglin/aime_2025" in line and "--input DIR" in line


def test_dedup_folds_whitespace_only_differences() -> None:
    """Two DAPO rows that differ only in spaces and line breaks are one problem (finding 12's planted bug)."""
    from recipes.retool.rows import dedup_key

    def row(text: str) -> dict:
        return {"prompt": [{"role": "user", "content": text}]}

    assert dedup_key(row("Find  x if\n2x = 4.")) == dedup_key(row("Find x if 2x = 4. "))
    assert dedup_key(row("Find x if 2x = 4.")) != dedup_key(row("Find y if 2y = 4."))


def test_row_numbers_are_jsonl_line_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "aime.jsonl"
    bad.write_text(
        '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n{"problem": "", "answer": "5"}\n'
    )
    code, line = _run(capsys, "--input", str(bad), "--output", str(tmp_path / "o.parquet"))
    assert code == 2 and "aime.jsonl: row 3: field 'problem'" in line  # the third line of the file
