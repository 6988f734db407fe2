"""Is this a complete Hugging Face model folder? One answer for the launcher's dry run and the doctor's ``--model``.

Why one function, below both: issue 33 finding 1 — a folder whose ``model.safetensors.index.json`` names 4 shards
with 1 downloaded passed both checks (the launcher looked for config.json only, the doctor for any ``*.safetensors``)
and the dry run said "dry run OK" with a 6 KB checkpoint estimate; the trainer would fail only after Ray, the
workers and the data were up. The recipes may not import the doctor (tests/test_import_graph.py), so the rule lives
here, in ``platforms`` like ``netprobe.py``. Stdlib only, and the checkpoint names of :mod:`platforms.verl_facts`.

What "complete" means is what ``transformers`` loads (``modeling_utils`` looks for ``model.safetensors``, then its
``.index.json``, then ``pytorch_model.bin`` and its index): config.json; a single weights file, or an index whose
``weight_map`` names shards that are all present and non-empty and, when the index has ``metadata.total_size``,
hold at least that many bytes (safetensors headers add a little on top, never less). A Git LFS pointer (a clone
without ``git lfs``: a ~130-byte text file starting ``version https://git-lfs``) is not a weight.

And a tokenizer ``AutoTokenizer`` can load (issue 44: a folder of weights and config only passed the dry run, the
trainer raised at its tokenizer load): one of :data:`TOKENIZER_FILES`, present, non-empty, not an LFS pointer.
This was the doctor's own extra rule before; it lives here so the dry run and ``retool-doctor --model`` agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from platforms.verl_facts import RL_ROLE, CheckpointLayout

#: The single-file and index names ``transformers`` tries, in its order (safetensors first).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
LFS_POINTER_PREFIX = b"version https://git-lfs"
#: An LFS pointer file is ~130 bytes; anything this big is content.
_LFS_POINTER_MAX = 1024
#: The files a fast or slow tokenizer loads from (``tokenizers``' JSON, sentencepiece, BPE vocab); one suffices.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
#: Shards named in a message before "(+N more)".
SHOWN = 3


@dataclass(frozen=True)
class ModelFolder:
    """What :func:`inspect` found: ``problems`` (phrases after "model DIR ..."), empty when the folder is complete."""

    path: Path
    problems: list[str] = field(default_factory=list)
    weights: str = ""  # the file the weights were read from (a weights file or an index)
    weights_bytes: int = 0  # bytes of the weight files present
    expected_bytes: int | None = None  # what a complete folder holds: the index's total_size, or the weights' bytes
    verl_checkpoint: bool = False  # a verl FSDP checkpoint given as the model: problems[0] says which merge makes it

    @property
    def complete(self) -> bool:
        return not self.problems


def _names(items: list[str]) -> str:
    more = f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def is_lfs_pointer(path: Path) -> bool:
    """A Git LFS pointer in place of the file's content (checked out without ``git lfs pull``)."""
    try:
        if path.stat().st_size > _LFS_POINTER_MAX:
            return False
        with path.open("rb") as handle:
            return handle.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
    except OSError:
        return False


#: What is wrong with a weights file, said of one file and of several.
_PHRASES = {
    "missing": ("is missing", "are missing"),
    "empty": ("is empty", "are empty"),
    "lfs": ("is a Git LFS pointer, not weights", "are Git LFS pointers, not weights"),
}


def _file_problem(path: Path) -> str | None:
    """Why one weights file is not a weight (a key of :data:`_PHRASES`), or None."""
    if not path.is_file():
        return "missing"
    if path.stat().st_size == 0:
        return "empty"
    if is_lfs_pointer(path):
        return "lfs"
    return None


def _shards(index: Path) -> tuple[list[str], int | None, str | None]:
    """(shard names, metadata.total_size, None) from an index file, or ([], None, why it cannot be read)."""
    try:
        data = json.loads(index.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return [], None, f"has an index {index.name} that is not valid JSON"
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        return [], None, f"has an index {index.name} without a weight_map"
    total = (data.get("metadata") or {}).get("total_size") if isinstance(data.get("metadata"), dict) else None
    try:
        total = int(total) if total is not None else None
    except (TypeError, ValueError):
        total = None
    return sorted({str(name) for name in weight_map.values()}), total, None


def _check_index(folder: Path, index: Path) -> tuple[list[str], int, int | None]:
    """(problems, bytes present, metadata.total_size) of a sharded checkpoint."""
    names, total, unreadable = _shards(index)
    if unreadable:
        return [unreadable], 0, None
    kinds: dict[str, list[str]] = {}
    present = 0
    for name in names:
        problem = _file_problem(folder / name)
        if problem:
            kinds.setdefault(problem, []).append(name)
        else:
            present += (folder / name).stat().st_size
    problems = [
        f"is incomplete: {len(bad)} of the {len(names)} shards {index.name} names "
        f"{_PHRASES[kind][len(bad) > 1]}: {_names(bad)}"
        for kind, bad in sorted(kinds.items())
    ]
    if not problems and total is not None and present < total:
        problems.append(
            f"is incomplete: its {len(names)} shards hold {present:,} bytes, less than the {total:,} "
            f"{index.name} names (metadata.total_size): a shard is truncated"
        )
    return problems, present, total


def verl_checkpoint(folder: Path) -> str | None:
    """Why ``folder`` is a verl FSDP checkpoint rather than a model (a realistic MODEL_PATH / --model mistake: the
    trainer's ``global_step_N``, its ``actor/``, or the run folder above them), with the merge that makes the model
    (an SFT step: scripts/sft_to_rl.sh; an RL step's actor: scripts/rl_to_hf.sh); None when it is not one.

    The names are those :class:`platforms.verl_facts.CheckpointLayout` gives both stacks' trainers (``actor/``,
    ``fsdp_config.json``, ``model_world_size_W_rank_R.pt``, ``global_step_N``): this check runs before a stack is
    chosen, and tests/stack091/test_launcher_checkpoints_091.py holds verl 0.9.1's trees to them."""
    layout = CheckpointLayout(role=RL_ROLE, loader_state="")
    steps = layout.saved_steps(folder)  # by step number: global_step_10 after global_step_9

    def shards(where: Path) -> bool:
        return (where / layout.fsdp_config).is_file() or any(where.glob(layout.shard("model", "*", "*")))

    if folder.name == RL_ROLE and shards(folder):  # an RL step's actor/
        where, step, rl = folder.parent.parent, folder.parent.name, True
    elif (folder / RL_ROLE).is_dir() and shards(folder / RL_ROLE):
        where, step, rl = folder.parent, folder.name, True
    elif shards(folder):
        where, step, rl = folder.parent, folder.name, False
    elif steps:
        newest = layout.step_dir(folder, steps[-1])
        where, step, rl = folder, newest.name, (newest / RL_ROLE).is_dir()
    else:
        return None
    script = "scripts/rl_to_hf.sh" if rl else "scripts/sft_to_rl.sh"
    number = step.removeprefix("global_step_")
    merge = f"{script} --ckpt-dir {where}" + (f" --step {number}" if number.isdigit() else "")
    return f"is a verl FSDP checkpoint, not a Hugging Face model folder: merge it first ({merge})"


def tokenizer_problem(folder: Path) -> str | None:
    """Why ``transformers`` would find no tokenizer to load in ``folder`` (a phrase after "model DIR ..."), or None."""
    found = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not found:
        return f"has no tokenizer ({' / '.join(TOKENIZER_FILES)}): the trainer loads it before anything else"
    bad = [(path.name, _file_problem(path)) for path in found]
    if all(problem for _, problem in bad):
        name, problem = bad[0]
        return f"has no loadable tokenizer: {name} {_PHRASES[str(problem)][0]}"
    return None


def inspect(path: str | Path) -> ModelFolder:
    """Check ``path`` as a Hugging Face model folder (reads config.json and the index, stats the shards)."""
    folder = Path(path)
    if not folder.exists():
        return ModelFolder(folder, ["does not exist"])
    if not folder.is_dir():
        return ModelFolder(folder, ["is a file, not a model folder"])
    checkpoint = verl_checkpoint(folder)
    if checkpoint and not (folder / "config.json").is_file():
        return ModelFolder(folder, [checkpoint], verl_checkpoint=True)
    problems = []
    try:
        json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        problems.append("has no config.json: not a Hugging Face model folder")
    except (OSError, UnicodeDecodeError, ValueError):
        problems.append("has a config.json that is not valid JSON")
    tokenizer = tokenizer_problem(folder)
    if tokenizer:
        problems.append(tokenizer)
    found = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    found += sorted(p.name for p in folder.glob("*.index.json") if p.name not in WEIGHT_FILES)
    if not found:
        wanted = "model.safetensors, pytorch_model.bin or a *.index.json of shards"
        return ModelFolder(folder, [*problems, f"has no weights ({wanted})"])
    weights = folder / found[0]
    if weights.name.endswith(".index.json"):
        shard_problems, present, total = _check_index(folder, weights)
        expected = total if total is not None else (None if shard_problems else present)
        return ModelFolder(folder, problems + shard_problems, weights.name, present, expected)
    problem = _file_problem(weights)
    if problem:
        problems.append(f"is incomplete: its weights {weights.name} {_PHRASES[problem][0]}")
        return ModelFolder(folder, problems, weights.name)
    size = weights.stat().st_size
    return ModelFolder(folder, problems, weights.name, size, size)
