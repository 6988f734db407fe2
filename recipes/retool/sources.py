"""Read source datasets from any local path or from the hub, and tell which known schema they are in.

verl's recipe only loads ``<org>/<name>`` hub-style folders and derives the data source from the last two path
components; offline clusters keep data wherever they can. Accepted here:

* a ``.parquet``, ``.jsonl`` or ``.json`` file;
* a folder: a ``datasets.save_to_disk`` folder, or any folder of parquet/jsonl files (a hub snapshot included;
  files whose path names the split, e.g. ``data/train-00000-of-00001.parquet``, are preferred);
* a hub id (``org/name``) when no such local path exists, loaded by ``datasets.load_dataset`` (which honours
  ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE``).

Rows come out in batches of plain dicts, so 1.8 M-row inputs are streamed, never held as Python objects at once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platforms.cli_errors import MissingPathError

# The format rule is the doctor's and the dry run's too (issue 44): one definition, in platforms/data_file.py.
from platforms.data_file import FORMATS, RL_FORMATS, SFT_FORMATS, SchemaError, detect_format

__all__ = [
    "FORMATS",
    "RL_FORMATS",
    "SFT_FORMATS",
    "SchemaError",
    "Source",
    "default_data_source",
    "detect_format",
    "open_source",
]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Source:
    """One readable input: its name for messages, its columns, its size if known, and a batch iterator."""

    name: str
    columns: list[str]
    num_rows: int | None
    _batches: Any = field(repr=False)

    def batches(self, batch_size: int = 8192) -> Iterator[list[dict[str, Any]]]:
        yield from self._batches(batch_size)

    def rows(self) -> Iterator[dict[str, Any]]:
        for batch in self.batches():
            yield from batch


def _parquet_source(path: Path) -> Source:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path)

    def batches(batch_size: int) -> Iterator[list[dict[str, Any]]]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            yield batch.to_pylist()

    return Source(str(path), list(meta.schema_arrow.names), meta.metadata.num_rows, batches)


def _json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as exc:
            raise SchemaError(str(path), None, "<file>", f"invalid JSON: {exc}") from None
    else:
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise SchemaError(str(path), lineno - 1, "<line>", f"invalid JSON on line {lineno}: {exc}") from None
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise SchemaError(str(path), i, "<row>", f"expected a JSON object, got {type(row).__name__}")
    return rows


def _json_source(path: Path) -> Source:
    rows = _json_rows(path)
    columns: list[str] = []
    for row in rows[:100]:
        columns.extend(key for key in row if key not in columns)

    def batches(batch_size: int) -> Iterator[list[dict[str, Any]]]:
        for start in range(0, len(rows), batch_size):
            yield rows[start : start + batch_size]

    return Source(str(path), columns, len(rows), batches)


def _file_source(path: Path) -> Source:
    if path.suffix == ".parquet":
        return _parquet_source(path)
    if path.suffix in (".jsonl", ".json"):
        return _json_source(path)
    raise SchemaError(str(path), None, "<file>", "unsupported file type (expected .parquet, .jsonl or .json)")


def _chain(name: str, sources: list[Source]) -> Source:
    columns = sources[0].columns
    for source in sources[1:]:
        if set(source.columns) != set(columns):
            raise SchemaError(source.name, None, "<columns>", f"columns {source.columns} differ from {columns}")
    sizes = [s.num_rows for s in sources]
    total = None if None in sizes else sum(sizes)

    def batches(batch_size: int) -> Iterator[list[dict[str, Any]]]:
        for source in sources:
            yield from source.batches(batch_size)

    return Source(name, columns, total, batches)


def _dataset_source(name: str, dataset: Any) -> Source:
    """A ``datasets.Dataset`` as a :class:`Source`."""

    def batches(batch_size: int) -> Iterator[list[dict[str, Any]]]:
        for batch in dataset.iter(batch_size=batch_size):
            keys = list(batch)
            yield [dict(zip(keys, values, strict=True)) for values in zip(*batch.values(), strict=True)]

    return Source(name, list(dataset.column_names), len(dataset), batches)


def _pick_split(name: str, dataset_dict: Any, split: str) -> Any:
    if split in dataset_dict:
        return dataset_dict[split]
    if len(dataset_dict) == 1:
        return next(iter(dataset_dict.values()))
    raise SchemaError(name, None, "<split>", f"no split {split!r}; available: {', '.join(dataset_dict)}")


def _folder_source(path: Path, split: str) -> Source:
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        import datasets

        loaded = datasets.load_from_disk(str(path))
        dataset = _pick_split(str(path), loaded, split) if isinstance(loaded, datasets.DatasetDict) else loaded
        return _dataset_source(str(path), dataset)
    for pattern in ("*.parquet", "*.jsonl", "*.json"):
        files = sorted(p for p in path.rglob(pattern) if not any(part.startswith(".") for part in p.parts))
        if not files:
            continue
        named = [
            p for p in files if re.search(rf"(^|[/_.-]){re.escape(split)}([/_.-]|$)", p.relative_to(path).as_posix())
        ]
        chosen = named or files
        return _chain(str(path), [_file_source(p) for p in chosen])
    raise SchemaError(str(path), None, "<folder>", "no .parquet, .jsonl or .json files and not a save_to_disk folder")


def _hub_source(hub_id: str, split: str) -> Source:
    import datasets

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    print(f"[retool] loading {hub_id!r} (split {split!r}) from the hub at {endpoint}", flush=True)
    dataset = datasets.load_dataset(hub_id, split=split)
    return _dataset_source(hub_id, dataset)


def open_source(location: str, split: str = "train") -> Source:
    """Open ``location``: a local file or folder if it exists, else a hub id (see the module docstring)."""
    path = Path(location).expanduser()
    if path.is_file():
        return _file_source(path)
    if path.is_dir():
        return _folder_source(path, split)
    if _HUB_ID.match(location) and not location.startswith((".", "/", "~")):
        return _hub_source(location, split)
    raise MissingPathError(f"{location}: no such file or folder (and not a hub id of the form org/name)")


def default_data_source(fmt: str, location: str) -> str:
    """A ``data_source`` name for rows from ``location`` (validation metrics are grouped by it).

    AIME inputs are named by year when the name says it (``aime_2024``/``aime_2025``, as verl's recipe names them);
    ``Problem``/``Answer`` data is Maxwell-Jia/AIME_2024; otherwise the file or folder name.
    """
    name = location.rstrip("/").lower()
    for year in ("2024", "2025"):
        if "aime" in name and year in name:
            return f"aime_{year}"
    if fmt == "aime_maxwell":
        return "aime_2024"
    if fmt == "dapo" and "dapo" in name:
        return "dapo_math_17k"
    return Path(name).stem.replace("-", "_") or "math"
