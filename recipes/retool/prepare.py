"""``retool-prepare``: build the ReTool recipe's SFT, RL-train and validation parquet files.

    retool-prepare sft --input JoeYing/ReTool-SFT --output data/retool_sft.parquet
    retool-prepare rl  --input BytedTsinghua-SIA/DAPO-Math-17k --output data/dapo_math_17k.parquet
    retool-prepare val --input yentinglin/aime_2025 --output data/aime_2025.parquet

``--input`` is a local file/folder (offline clusters) or a hub id; the source schema is detected from its columns
(``--format`` forces one). RL/val rows are deduplicated by prompt: DAPO-Math-17k as published is one 17,917-row
block repeated 100 times, so training on it raw means 100 epochs of the same prompts in one "epoch". Output is
written to a temporary file next to ``--output`` and renamed at the end: a failed run leaves no partial file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from platforms.cli_errors import (
    EXIT_OK,
    ArgumentParser,
    UsageError,
    check_writable,
    entry_point,
    output_file,
    whole_number_arg,
)
from recipes.retool.rows import dedup_key, to_rl_row
from recipes.retool.sft import to_sft_row
from recipes.retool.sources import (
    RL_FORMATS,
    SFT_FORMATS,
    SchemaError,
    Source,
    default_data_source,
    detect_format,
    open_source,
)

PROGRESS_EVERY_S = 2.0


def log(message: str) -> None:
    print(f"[retool-prepare] {message}", file=sys.stderr, flush=True)


class Progress:
    """Prints ``read N/M rows`` at most every :data:`PROGRESS_EVERY_S` seconds (and once at the end)."""

    def __init__(self, total: int | None) -> None:
        self.total, self.count = total, 0
        self.start = self.last = time.monotonic()

    def advance(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.report()

    def report(self) -> None:
        of = f"/{self.total:,} ({100 * self.count / self.total:.0f}%)" if self.total else ""
        log(f"read {self.count:,}{of} rows in {time.monotonic() - self.start:.1f}s")


def write_parquet_atomic(rows: list[dict[str, Any]], output: Path) -> None:
    """Write ``rows`` to ``output`` via a temporary file in the same folder and an atomic rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    try:
        table = pa.Table.from_pylist(rows)
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def _converted(
    source: Source, convert: Callable[[dict[str, Any], int], dict[str, Any]], skip_invalid: bool, stats: dict[str, int]
) -> Iterator[dict[str, Any]]:
    progress = Progress(source.num_rows)
    index = 0
    for batch in source.batches():
        for row in batch:
            try:
                yield convert(row, index)
            except SchemaError as exc:
                if not skip_invalid:
                    raise
                stats["invalid"] += 1
                if stats["invalid"] <= 5:
                    log(f"skipping invalid row: {exc}")
            index += 1
        progress.advance(len(batch))
    progress.report()
    stats["read"] = index


def prepare_sft(args: argparse.Namespace, source: Source, fmt: str) -> list[dict[str, Any]]:
    stats = {"invalid": 0, "read": 0}

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        return to_sft_row(row, fmt, source.name, index, keep_prompt=args.keep_prompts)

    rows = list(_converted(source, convert, args.skip_invalid, stats))
    turns = sum(sum(1 for m in r["messages"] if m["role"] == "tool") for r in rows)
    log(f"rows read: {stats['read']:,}; invalid skipped: {stats['invalid']:,}; conversations: {len(rows):,}")
    log(f"tool turns: {turns:,} ({turns / max(1, len(rows)):.1f} per conversation)")
    return rows


def prepare_rl(args: argparse.Namespace, source: Source, fmt: str, split: str) -> list[dict[str, Any]]:
    data_source = args.data_source or default_data_source(fmt, args.input)
    stats = {"invalid": 0, "read": 0}
    answers: dict[str, set[str]] = {}
    rows: list[dict[str, Any]] = []
    unstripped = 0

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        return to_rl_row(row, fmt, data_source, split, index, source.name)

    duplicates = 0
    for row in _converted(source, convert, args.skip_invalid, stats):
        if fmt == "dapo" and "Answer: $Answer" in row["prompt"][0]["content"]:
            unstripped += 1
        key = dedup_key(row)
        seen = answers.setdefault(key, set())
        is_duplicate = bool(seen)
        seen.add(row["reward_model"]["ground_truth"])
        if is_duplicate and not args.no_dedup:
            duplicates += 1
            continue
        rows.append(row)
    conflicts = {key for key, seen in answers.items() if len(seen) > 1}
    if args.drop_conflicting and conflicts:
        rows = [row for row in rows if dedup_key(row) not in conflicts]
    if fmt != "retool_rl":
        for i, row in enumerate(rows):
            row["extra_info"]["index"] = i
    log(
        f"rows read: {stats['read']:,}; invalid skipped: {stats['invalid']:,}; unique prompts: {len(answers):,}; "
        f"duplicates dropped: {duplicates:,}"
    )
    action = "dropped" if args.drop_conflicting else "kept the first answer"
    log(f"prompts with conflicting answers: {len(conflicts):,} ({action})")
    if unstripped:
        log(f"WARNING: {unstripped:,} rows still contain DAPO's 'Answer: $Answer' instruction (not stripped)")
    log(f"data_source: {data_source}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="retool-prepare",
        description="Build the ReTool recipe's parquet files: multi-turn SFT (sft), RL training (rl), validation (val)",
        epilog="Hub ids are loaded with `datasets` (HF_ENDPOINT and HF_HUB_OFFLINE are honoured); local files or "
        "folders are read directly. Output is written atomically.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    help_by_command = {
        "sft": "ReTool-SFT (JoeYing/ReTool-SFT raw, or swordfaith/ReTool-SFT-multi-turn) -> verl multi-turn SFT",
        "rl": "DAPO-Math-17k (or any RL source) -> deduplicated RL parquet with the kit's tool-use prompt",
        "val": "AIME 2024 / 2025 (DAPO format, Problem/Answer, problem/answer) -> RL parquet for validation",
    }
    for name, text in help_by_command.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--input", required=True, metavar="PATH|HUB_ID", help="local file/folder, or hub id org/name")
        p.add_argument("--output", required=True, type=output_file(".parquet"), metavar="FILE.parquet")
        p.add_argument("--force", action="store_true", help="replace --output when it exists (default: refused)")
        formats = SFT_FORMATS if name == "sft" else RL_FORMATS
        p.add_argument("--format", choices=formats, help="source schema (default: detected from the columns)")
        p.add_argument("--split", default="train", help="split to read from a hub id or folder (default: train)")
        p.add_argument(
            "--limit",
            type=whole_number_arg(0, meaning="0 (all rows)"),
            default=0,
            help="convert only the first N rows (0: all)",
        )
        p.add_argument("--skip-invalid", action="store_true", help="skip rows that fail validation (default: stop)")
        if name == "sft":
            p.add_argument(
                "--keep-prompts", action="store_true", help="keep the source's user text instead of the kit's prompt"
            )
        else:
            p.add_argument("--data-source", help="data_source value (default: derived from the input name)")
            p.add_argument("--no-dedup", action="store_true", help="keep duplicate prompts")
            p.add_argument(
                "--drop-conflicting", action="store_true", help="drop prompts that appear with different answers"
            )
    return parser


class _Limited(Source):
    """A source cut to its first ``limit`` rows."""

    def __init__(self, source: Source, limit: int) -> None:
        total = limit if source.num_rows is None else min(limit, source.num_rows)

        def batches(batch_size: int) -> Iterator[list[dict[str, Any]]]:
            left = limit
            for batch in source.batches(batch_size):
                if left <= 0:
                    return
                yield batch[:left]
                left -= len(batch)

        super().__init__(source.name, source.columns, total, batches)


@entry_point("retool-prepare")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.monotonic()
    if args.output.is_dir():  # refused before any work, not an IsADirectoryError after it
        raise UsageError(
            f"--output {args.output} is a directory", f"name the parquet file to write, e.g. {args.output}/a.parquet"
        )
    check_writable("--output", args.output)  # /proc, a read-only mount, a file as the folder: before any work
    if args.output.exists() and Path(args.input).exists() and args.output.resolve() == Path(args.input).resolve():
        # issue 33: the input was replaced by a re-preparation of itself (its data_source renamed after the file)
        raise UsageError(f"--output {args.output} is the --input file", "write the prepared rows to another file")
    try:
        source = open_source(args.input, split=args.split)
        fmt = args.format or detect_format(source.columns, source.name)
        allowed = SFT_FORMATS if args.command == "sft" else RL_FORMATS
        if fmt not in allowed:
            raise SchemaError(source.name, None, "<columns>", f"{fmt} data cannot be used for `{args.command}`")
        if args.limit > 0:
            source = _Limited(source, args.limit)
        log(f"{args.command}: {source.name} ({source.num_rows or '?'} rows, format {fmt}) -> {args.output}")
        if args.command == "sft":
            rows = prepare_sft(args, source, fmt)
        else:
            rows = prepare_rl(args, source, fmt, split="train" if args.command == "rl" else "test")
        if not rows:
            raise SchemaError(source.name, None, "<rows>", "no rows to write")
        write_parquet_atomic(rows, args.output)
    except ConnectionError as exc:  # datasets: "Couldn't reach '<id>' on the Hub (OfflineModeIsEnabled)" and the like
        raise UsageError(
            f"{args.input}: the Hugging Face hub cannot be reached ({exc})",
            f"on an offline cluster, download it on a connected machine (retool-bundle create, or hf download "
            f"--repo-type dataset {args.input} --local-dir DIR), copy DIR here and pass --input DIR",
        ) from None
    except Exception as exc:
        import pyarrow as pa

        if not isinstance(exc, pa.ArrowException):
            raise
        raise UsageError(f"{args.input}: not a readable parquet/jsonl file ({type(exc).__name__}: {exc})") from None
    log(f"wrote {len(rows):,} rows to {args.output} in {time.monotonic() - start:.1f}s")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
