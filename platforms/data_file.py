"""What kind of data is this file, and can the dataset class of a phase read it? One answer for the launcher's dry
run and the doctor's ``--data``.

Why one function, below both: issue 44 — an RL parquet (DAPO columns) given as the SFT ``TRAIN_FILE`` passed the
dry run ("checked: ... dataset class" meant only that the class imports) and ``retool-doctor --data`` said OK; verl's
SFT dataset then raised ``KeyError: 'messages'`` after the job had its nodes. The same for an SFT parquet given to
RL (the kit's ``ReToolRLDataset`` raises ``SchemaError``). The recipes may not import the doctor and the doctor may
not import the recipe code (tests/test_import_graph.py), so the rule lives here, in ``platforms`` like
``model_folder.py``; ``recipes/retool/sources.py`` re-exports the format detection, so the dataset class decides with
this very function.

Fast: a parquet file's footer and its first few rows (one small batch), never the whole file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platforms.cli_errors import UsageError

FORMATS = ("retool_rl", "dapo", "aime_maxwell", "problem_answer", "sft_multiturn", "retool_sft_raw")
RL_FORMATS = ("retool_rl", "dapo", "aime_maxwell", "problem_answer")
SFT_FORMATS = ("sft_multiturn", "retool_sft_raw")
#: Rows read to check a file's shape: enough to catch a wrong schema, few enough to keep a dry run instant.
FIRST_ROWS = 4


class SchemaError(UsageError, ValueError):
    """A row does not match its schema; the message names the file, the row and the field.

    ``row`` is the 0-based index the code counts with; messages count from 1, as jsonl line numbers do, so "row 3"
    of a jsonl file without blank lines is line 3 (issue 14: messages mixed 0-based rows and 1-based lines)."""

    def __init__(self, source: str, row: int | None, field_name: str, problem: str) -> None:
        where = f"row {row + 1}" if row is not None else "schema"
        super().__init__(f"{source}: {where}: field {field_name!r}: {problem}")
        self.source, self.row, self.field_name, self.problem = source, row, field_name, problem


def detect_format(columns: list[str], source: str = "input") -> str:
    """The source schema, from the column names (``--format`` overrides this); ``source`` names it in errors."""
    cols = set(columns)
    if {"prompt", "reward_model", "agent_name"} <= cols:
        return "retool_rl"
    if {"prompt", "reward_model"} <= cols:
        return "dapo"
    if {"Problem", "Answer"} <= cols:
        return "aime_maxwell"
    if {"problem", "answer"} <= cols:
        return "problem_answer"
    if {"messages", "tools"} <= cols:
        return "sft_multiturn"
    if "messages" in cols:
        return "retool_sft_raw"
    if not cols:
        raise SchemaError(source, None, "<columns>", "no columns: the file is empty")
    raise SchemaError(source, None, "<columns>", f"unrecognised columns {sorted(cols)}; pass --format")


@dataclass(frozen=True)
class DataFile:
    """What :func:`inspect` found: ``problems`` (phrases after "data FILE ..."), empty when the file reads."""

    path: Path
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the first few rows
    num_rows: int | None = None
    fmt: str | None = None  # a key of FORMATS, None when the columns match none
    problems: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``"rl"``, ``"sft"`` or ``""``: which phase's data the columns are."""
        return "rl" if self.fmt in RL_FORMATS else "sft" if self.fmt in SFT_FORMATS else ""


def _parquet(path: Path, count: int) -> tuple[list[str], list[dict[str, Any]], int]:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as handle:
        batch = next(handle.iter_batches(batch_size=count), None)
        rows = batch.to_pylist()[:count] if batch is not None else []
        return list(handle.schema_arrow.names), rows, handle.metadata.num_rows


def _json(path: Path, count: int) -> tuple[list[str], list[dict[str, Any]], int | None]:
    rows: list[Any] = []
    if path.suffix == ".json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
        rows = json.loads(path.read_text(encoding="utf-8"))[:count]
    else:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    rows.append(json.loads(line))
                if len(rows) >= count:
                    break
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError("rows are not JSON objects")
    columns: list[str] = []
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    return columns, rows, None


def inspect(path: str | Path, count: int = FIRST_ROWS) -> DataFile:
    """Read ``path`` (a ``.parquet``, ``.jsonl`` or ``.json`` file): its columns, first ``count`` rows, format."""
    where = Path(path)
    if not where.is_file():
        return DataFile(where, problems=["does not exist" if not where.exists() else "is not a file"])
    reader = _parquet if where.suffix == ".parquet" else _json if where.suffix in (".jsonl", ".json") else None
    if reader is None:
        return DataFile(where, problems=["is not a .parquet, .jsonl or .json file"])
    try:
        columns, rows, num_rows = reader(where, count)
    except ImportError:  # no pyarrow in this interpreter: nothing more can be said here
        return DataFile(where)
    except Exception as exc:  # noqa: BLE001  (ArrowInvalid, OSError, JSON errors alike: the file does not read)
        what = "parquet" if where.suffix == ".parquet" else "JSON"
        return DataFile(where, problems=[f"is not a readable {what} file ({type(exc).__name__}: {exc})"])
    try:
        fmt: str | None = detect_format(columns, str(where))
    except SchemaError as exc:
        return DataFile(where, columns, rows, num_rows, None, [f"has {exc.problem.removesuffix('; pass --format')}"])
    if num_rows == 0 or not rows:
        return DataFile(where, columns, rows, num_rows, fmt, ["has no rows"])
    return DataFile(where, columns, rows, num_rows, fmt)


def describe(found: DataFile) -> str:
    """The kind of data, for an OK line: ``RL data (dapo columns)``."""
    if not found.fmt:
        return "data"
    return f"{'RL' if found.kind == 'rl' else 'SFT'} data ({found.fmt} columns)"


def _sft_row_problem(row: dict[str, Any], messages_key: str) -> str | None:
    """verl's multi-turn SFT dataset reads ``row[messages_key]`` as a list of ``{"role", "content"}`` messages."""
    messages = row.get(messages_key)
    if not isinstance(messages, list | tuple) or not messages:
        return f"field {messages_key!r} is not a non-empty list of messages: {messages!r:.80}"
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            return f"field {messages_key!r} holds {message!r:.80}, not a message with a role"
    return None


def phase_problems(
    found: DataFile, phase: str, messages_key: str = "messages", messages_setting: str = "the SFT config's messages_key"
) -> list[str]:
    """Why the dataset class of ``phase`` cannot read ``found`` (phrases after "data FILE ..."): verl's multi-turn
    SFT dataset needs the ``messages_key`` column in a parquet file, a column its config names at the stack's key
    (``messages_setting``: ``VerlFacts.sft_key("messages_key")``); the kit's ``ReToolRLDataset`` takes the
    :data:`RL_FORMATS` only (row-level checks are the dataset's own converter's, run by the launcher)."""
    if found.problems or not found.fmt:
        return list(found.problems)
    if phase == "sft":
        if found.path.suffix != ".parquet":
            return ["is not a parquet file: verl's SFT dataset reads parquet only (retool-prepare sft writes one)"]
        if messages_key not in found.columns:
            return [
                f"has no {messages_key!r} column ({messages_setting}), which verl's SFT dataset reads: it "
                f"holds {describe(found)}, columns {sorted(found.columns)}"
            ]
        for index, row in enumerate(found.rows):
            problem = _sft_row_problem(row, messages_key)
            if problem:
                return [f"row {index + 1}: {problem}"]
        return []
    if found.kind != "rl":
        return [f"holds {describe(found)}, not RL data: the kit's ReToolRLDataset takes {', '.join(RL_FORMATS)} rows"]
    return []
