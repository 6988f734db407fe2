"""``data.custom_cls`` for the ReTool recipe: RL rows from any local path or hub id, in any known source schema.

verl config::

    data.custom_cls.path=pkg://recipes.retool.dataset
    data.custom_cls.name=ReToolRLDataset

What it fixes in verl 0.6.1's ``CustomRLHFDataset``: that one only loads ``<org>/<name>`` folders through
``load_dataset(path)["train"]``, ignores ``data.filter_overlong_prompts`` and ``max_samples``, and maps with bound
methods, which fail to pickle under ``datasets.map(num_proc>1)``. Here:

* inputs: the kit's prepared parquet (``retool-prepare``; used as is) or a raw source (DAPO-Math-17k, AIME in
  either layout), as a ``.parquet``/``.jsonl``/``.json`` file, a folder, or a hub id; raw sources are converted
  with the same row functions as ``retool-prepare`` and deduplicated by prompt;
* overlong prompts are filtered with the prompt exactly as ToolAgentLoop builds it: chat template *with* the tool
  schema (verl's own filter counts without it unless ``data.tool_config_path`` is set, so prompts that pass it can
  still overflow ``max_prompt_length`` in the rollout);
* every function given to ``datasets.map``/``filter`` is a module-level function bound with ``functools.partial``
  to picklable values, so ``num_proc > 1`` works.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from functools import partial
from pathlib import Path
from typing import Any

import datasets
from verl.utils.dataset.rl_dataset import RLHFDataset

try:
    from recipes.retool.rows import dedup_key, to_rl_row
except ImportError:  # loaded by file path (data.custom_cls.path=<file>) without the kit on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from recipes.retool.rows import dedup_key, to_rl_row
from recipes.retool.schema import TOOL_SCHEMA
from recipes.retool.sources import RL_FORMATS, SchemaError, default_data_source, detect_format

logger = logging.getLogger(__name__)


def load_table(location: str, split: str = "train") -> datasets.Dataset:
    """A ``datasets.Dataset`` from a parquet/jsonl/json file, a folder, or a hub id."""
    path = Path(location).expanduser()
    if path.is_file():
        builder = "parquet" if path.suffix == ".parquet" else "json"
        return datasets.load_dataset(builder, data_files=str(path), split="train")
    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            return loaded[split] if split in loaded else next(iter(loaded.values()))
        return loaded
    if path.is_dir():
        return datasets.load_dataset(str(path), split=split)
    if "/" in location and not location.startswith((".", "/", "~")):
        return datasets.load_dataset(location, split=split)
    raise FileNotFoundError(f"{location}: no such file or folder (and not a hub id of the form org/name)")


def convert_row(
    row: dict[str, Any], index: int, *, fmt: str, data_source: str, split: str, source: str
) -> dict[str, Any]:
    """``datasets.map`` adapter for :func:`recipes.retool.rows.to_rl_row` (module level: picklable)."""
    return to_rl_row(row, fmt, data_source, split, index, source)


def prompt_hashes(batch: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Batched ``datasets.map`` function: a short digest of each row's dedup key."""
    keys = (dedup_key({"prompt": prompt}) for prompt in batch["prompt"])
    return {"_prompt_hash": [hashlib.blake2b(k.encode(), digest_size=12).hexdigest() for k in keys]}


def prompt_fits(
    row: dict[str, Any],
    *,
    tokenizer: Any,
    prompt_key: str,
    max_length: int,
    tools: list[dict[str, Any]],
    chat_kwargs: dict[str, Any],
) -> bool:
    """Whether the rollout prompt (chat template with the tool schema, as ToolAgentLoop renders it) fits."""
    try:
        ids = tokenizer.apply_chat_template(
            row[prompt_key], tools=tools, add_generation_prompt=True, tokenize=True, **chat_kwargs
        )
    except Exception:
        logger.exception("cannot render a prompt; dropping the row")
        return False
    return len(ids) <= max_length


def to_rl_dataset(table: datasets.Dataset, location: str, num_proc: int | None, split: str = "rl") -> datasets.Dataset:
    """Rows of ``table`` in the kit's RL schema: raw sources converted and deduplicated by prompt."""
    fmt = detect_format(list(table.column_names))
    if fmt not in RL_FORMATS:
        raise SchemaError(location, None, "<columns>", f"{fmt} data is not RL data (columns {table.column_names})")
    if fmt == "retool_rl":
        return table
    fn = partial(convert_row, fmt=fmt, data_source=default_data_source(fmt, location), split=split, source=location)
    converted = table.map(
        fn, with_indices=True, remove_columns=list(table.column_names), num_proc=num_proc, desc="ReTool RL rows"
    )
    hashed = converted.map(prompt_hashes, batched=True, num_proc=num_proc, desc="prompt digests")
    first: dict[str, int] = {}
    for i, digest in enumerate(hashed["_prompt_hash"]):
        first.setdefault(digest, i)
    print(f"[retool] {location}: {len(converted):,} rows, {len(first):,} unique prompts ({fmt})")
    return converted.select(sorted(first.values())) if len(first) < len(converted) else converted


class ReToolRLDataset(RLHFDataset):
    """verl's ``RLHFDataset`` reading any ReTool RL source (see the module docstring)."""

    def _num_proc(self) -> int | None:
        workers = self.num_workers or 1
        return workers if workers > 1 else None

    def _read_files_and_tokenize(self) -> None:
        tables = [to_rl_dataset(load_table(str(f)), str(f), self._num_proc()) for f in self.data_files]
        self.dataframe = datasets.concatenate_datasets(tables) if len(tables) > 1 else tables[0]
        total = len(self.dataframe)
        print(f"[retool] dataset len: {total:,}")
        if 0 < self.max_samples < total:
            source = self.dataframe.shuffle(seed=self.seed) if self.shuffle else self.dataframe
            self.dataframe = source.select(range(self.max_samples))
            print(f"[retool] selected {self.max_samples:,} of {total:,} rows")
        self.dataframe = self.maybe_filter_out_long_prompts(self.dataframe)

    def maybe_filter_out_long_prompts(self, dataframe: datasets.Dataset | None = None) -> datasets.Dataset:
        if not self.filter_overlong_prompts or self.processor is not None:
            return super().maybe_filter_out_long_prompts(dataframe)
        fits = partial(
            prompt_fits,
            tokenizer=self.tokenizer,
            prompt_key=self.prompt_key,
            max_length=self.max_prompt_length,
            tools=self.tool_schemas or [TOOL_SCHEMA],
            chat_kwargs=dict(self.apply_chat_template_kwargs or {}),
        )
        before = len(dataframe)
        kept = dataframe.filter(
            fits, num_proc=self._num_proc(), desc=f"ReTool: dropping prompts over {self.max_prompt_length} tokens"
        )
        print(
            f"[retool] prompts within {self.max_prompt_length} tokens (with the tool schema): {len(kept):,}/{before:,}"
        )
        return kept
