"""Checks that need this machine's filesystem or network: model, data, checkpoint dir, sandbox; dataset sizes.

Skipped with ``--no-path-check`` (planning a cluster run from a laptop), except reading a dataset's row count when
the file happens to be there: the steps-per-epoch line of the dry-run table is worth having whenever it is free.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from recipes.launch.run_inputs.inputs import Input

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Problem:
    """A path problem: ``error`` stops the launch, otherwise it is a warning."""

    message: str
    error: bool = True


def _named(value: str, source: Input | None) -> str:
    if source is None:
        return value
    return f"{source.env}={value}" if source.source == "env" else f"{value} (default of {source.env})"


def _finish_hint(path: str, source: Input | None, problem: str) -> str:
    """How to complete a folder that is there but partial: the same download into that very folder (``hf download``
    skips the files it has; a git clone's LFS pointers need ``git lfs pull``), or the input's own hint (RL: merge
    the SFT checkpoint again)."""
    if source is None:
        return ""
    words = source.hint.split()
    lfs = f"`git lfs pull` in {path}, or " if "Git LFS pointer" in problem else ""
    if words[:2] == ["hf", "download"] and len(words) > 2:
        return f"\n  -> finish the download: {lfs}hf download {words[2]} --local-dir {path} (it skips the files it has)"
    return f"\n  -> {lfs}{source.hint}, or set MODEL_PATH"


def check_model(path: str, source: Input | None) -> list[Problem]:
    """A complete Hugging Face model folder (platforms/model_folder.py, shared with retool-doctor --model):
    config.json and every weight shard its index names (issue 33 finding 1: 1 of 4 shards passed as "dry run OK")."""
    from platforms import model_folder

    hint = f"\n  -> {source.hint}, or set MODEL_PATH" if source else ""
    folder = model_folder.inspect(path)
    if not Path(path).is_dir():
        return [Problem(f"model {_named(path, source)} {folder.problems[0]}{hint}")]
    if folder.verl_checkpoint:  # the merge that fixes it is in the line
        return [Problem(f"model {_named(path, source)} {folder.problems[0]}")]
    if not (Path(path) / "config.json").is_file():
        return [Problem(f"model {_named(path, source)} has no config.json: not a Hugging Face model folder{hint}")]
    return [Problem(f"model {_named(path, source)} {p}{_finish_hint(path, source, p)}") for p in folder.problems]


def check_data(path: str, source: Input | None, phase: str, messages: tuple[str, str] | None = None) -> list[Problem]:
    """SFT reads parquet files only; the kit's RL dataset also takes folders, json(l) and hub ids. A file is read
    as the phase's dataset class reads it, on its first rows (recipes/launch/run_inputs/validate_data.py, issue 44): a
    damaged file, another phase's data or a row the class refuses ends the plan, not the job. SFT: ``messages`` is (the
    column verl's dataset reads the conversations from, the stack's key that names it)."""
    from recipes.launch.run_inputs import validate_data

    where = Path(path)
    hint = f"\n  -> {source.hint}, or set {source.env}" if source else ""
    if where.is_file():
        named = _named(path, source)
        return [Problem(f"data {named} {p}{hint}") for p in validate_data.problems(path, phase, messages)]
    if where.is_dir() and phase == "rl":
        return []
    if phase == "rl" and not where.exists() and _HUB_ID.match(path):
        return [Problem(f"data {path} is not a local path: it will be downloaded as a hub dataset", error=False)]
    kind = "parquet file" if phase == "sft" else "file or folder"
    return [Problem(f"data {_named(path, source)} is not an existing {kind}{hint}")]


def _run_scripts() -> str:
    """The kit's docker run wrappers, from the platforms (``docker/run_npu.sh, docker/run_cuda.sh or ...``)."""
    from platforms import PLATFORMS

    scripts = [p.run_script for p in PLATFORMS.values() if p.run_script]
    return " or ".join([", ".join(scripts[:-1]), scripts[-1]]) if len(scripts) > 1 else "".join(scripts)


#: The folders a run writes what must outlive it: checkpoints, and the validation and rollout dumps (issue 33,
#: finding 3: the README's eval step dumped to $HOME/eval, which docker/run_npu.sh does not mount).
OUTPUT_DIRS = {
    "trainer.default_local_dir": "checkpoint dir",
    "trainer.validation_data_dir": "validation dump dir",
    "trainer.rollout_data_dir": "rollout dump dir",
}


def check_ckpt_dir(path: str, source: Input | None, what: str = "checkpoint dir") -> list[Problem]:
    """The trainer creates the folder; its nearest existing parent must be writable, and it must not lie on a
    container's own root filesystem, where what it holds vanishes with the container
    (recipes/launch/run_inputs/mounts.py), unless KIT_ALLOW_EPHEMERAL_CKPT=1 says that is meant. ``what``: which of
    :data:`OUTPUT_DIRS`."""
    from recipes.launch.run_inputs import mounts

    where = Path(path)
    parent = where
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return [Problem(f"{what} {_named(path, source)}: {parent} is not a writable folder")]
    root = mounts.container_root_of(path)
    if root is None:
        return []
    where_it_is = f"{what} {_named(path, source)} is on this container's own filesystem ({root.fstype} /)"
    if os.environ.get(mounts.EPHEMERAL_CKPT_ENV, "").strip() == "1":
        return [Problem(f"{where_it_is}: its files go when the container goes ({mounts.EPHEMERAL_CKPT_ENV}=1)", False)]
    fix = "point CKPT_DIR/CKPT_ROOT" if what == "checkpoint dir" else "point it (under CKPT_ROOT, for one)"
    return [
        Problem(
            f"{where_it_is}: its files vanish when the container is removed\n  -> start the container with "
            f"{_run_scripts()} (they mount CKPT_ROOT, MODELS_DIR and DATA_DIR at the same path), or "
            f"{fix} at a mounted host folder; {mounts.EPHEMERAL_CKPT_ENV}=1 allows it anyway"
        )
    ]


def check_sandbox(url: str, source: Input | None, timeout_s: float = 5.0) -> list[Problem]:
    """Run ``print(1)`` through the kit's sandbox client: RL without a sandbox trains on 'tool unavailable' notes."""
    from recipes.retool.sandbox_client import SandboxClient

    hint = f"\n  -> start it: {source.hint}; or set RETOOL_SANDBOX_URL" if source else ""
    try:
        client = SandboxClient(url, run_timeout_s=timeout_s, max_retries=0, request_margin_s=2.0)
    except ValueError as exc:
        return [Problem(f"sandbox {_named(url, source)}: {exc}")]
    result = client.run("print(1)")
    client.close()
    if result.kind != "finished" or result.stdout.strip() != "1":
        detail = result.message or f"{result.kind}, stdout {result.stdout.strip()[:80]!r}"
        return [Problem(f"sandbox {_named(url, source)} did not run print(1): {detail}{hint}")]
    return []


def parquet_rows(paths: str | list[str]) -> int | None:
    """Total rows of local parquet files (footer metadata only: instant even for big files), else None."""
    files = [paths] if isinstance(paths, str) else list(paths)
    total = 0
    for item in files:
        where = Path(str(item))
        if where.suffix != ".parquet" or not where.is_file():
            return None
        try:
            import pyarrow.parquet as pq

            total += pq.ParquetFile(where).metadata.num_rows
        except Exception:  # noqa: BLE001  (an unreadable file is reported by the trainer; here it only costs a line)
            return None
    return total
