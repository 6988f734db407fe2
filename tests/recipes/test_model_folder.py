"""A model folder is complete only with every shard its index names (issue 33 finding 1), and the checkpoint
estimate comes from the model's shape, never from the bytes on disk.

What would fail: the launcher's check going back to "config.json is there" (a 7B folder with 1 of 4 shards planned
"dry run OK"), the shared rule accepting an LFS pointer, an empty or a truncated shard, or the estimate reading
``*.safetensors`` sizes again ("~6.0 KB each" for a 7B model). All in-process and quick.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit_testing import interpreter_stack

from platforms import model_folder
from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.launch.sizing import budget

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

SEVEN_B = RECIPES["qwen2.5_7b_sft"]
SHARDS = [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]


def _qwen25_7b_config() -> dict[str, object]:
    """The shape of Qwen2.5-7B-Instruct's config.json, from the recipe's own facts."""
    m = SEVEN_B.model
    return {
        "model_type": "qwen2",
        "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_key_value_heads,
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_layers,
        "intermediate_size": m.intermediate_size,
        "vocab_size": m.vocab_size,
        "tie_word_embeddings": m.tie_word_embeddings,
    }


def _sharded(folder: Path, present: dict[str, bytes], total_size: int | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(_qwen25_7b_config()))
    (folder / "tokenizer.json").write_text("{}")
    index: dict[str, object] = {"weight_map": {f"layers.{i}": name for i, name in enumerate(SHARDS)}}
    if total_size is not None:
        index["metadata"] = {"total_size": total_size}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for name, content in present.items():
        (folder / name).write_bytes(content)
    return folder


def test_one_of_four_shards_is_incomplete_and_names_the_missing(tmp_path: Path) -> None:
    found = model_folder.inspect(_sharded(tmp_path / "m", {SHARDS[0]: bytes(1000)}))
    assert not found.complete
    assert found.problems == [
        "is incomplete: 3 of the 4 shards model.safetensors.index.json names are missing: " + ", ".join(SHARDS[1:])
    ]


def test_many_missing_shards_show_the_first_few_and_a_count(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    names = [f"model-{i:05d}-of-00017.safetensors" for i in range(1, 18)]
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: n for n in names}}))
    (problem,) = model_folder.inspect(folder).problems
    assert problem.startswith("is incomplete: 17 of the 17 shards") and problem.endswith("(+14 more)")


def test_lfs_pointers_empty_and_truncated_shards_are_not_weights(tmp_path: Path) -> None:
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 3945562440\n"
    lfs = model_folder.inspect(_sharded(tmp_path / "lfs", {name: pointer for name in SHARDS}))
    assert lfs.problems == [
        "is incomplete: 4 of the 4 shards model.safetensors.index.json names are Git LFS pointers, not weights: "
        f"{', '.join(SHARDS[:3])} (+1 more)"
    ]
    empty = model_folder.inspect(_sharded(tmp_path / "empty", {**{n: b"w" * 10 for n in SHARDS}, SHARDS[2]: b""}))
    assert empty.problems == [
        f"is incomplete: 1 of the 4 shards model.safetensors.index.json names is empty: {SHARDS[2]}"
    ]
    short = model_folder.inspect(_sharded(tmp_path / "short", {n: b"w" * 10 for n in SHARDS}, total_size=41))
    assert len(short.problems) == 1 and "hold 40 bytes, less than the 41" in short.problems[0]
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "config.json").write_text("{}")
    (tmp_path / "single" / "tokenizer.json").write_text("{}")
    (tmp_path / "single" / "model.safetensors").write_bytes(pointer)
    assert model_folder.inspect(tmp_path / "single").problems == [
        "is incomplete: its weights model.safetensors is a Git LFS pointer, not weights"
    ]


def test_a_complete_tiny_folder_passes(tmp_path: Path) -> None:
    # header bytes on top of total_size are allowed (safetensors files are larger than their tensors)
    found = model_folder.inspect(_sharded(tmp_path / "m", {n: b"w" * 12 for n in SHARDS}, total_size=40))
    assert found.complete and found.weights_bytes == 48 and found.expected_bytes == 40
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "config.json").write_text("{}")
    (tmp_path / "one" / "tokenizer.model").write_bytes(b"sentencepiece")
    (tmp_path / "one" / "pytorch_model.bin").write_bytes(b"w" * 64)
    assert model_folder.inspect(tmp_path / "one").complete


def test_the_dry_run_refuses_the_partial_folder_with_the_download_to_finish(tmp_path: Path) -> None:
    folder = _sharded(tmp_path / "Qwen2.5-7B-Instruct", {SHARDS[0]: bytes(1000)})
    environ = {"HOME": str(tmp_path), "MODEL_PATH": str(folder), "CKPT_DIR": str(tmp_path / "ckpt")}
    built = plan.build(SEVEN_B, "a3", STACK, [], path_check=True, environ=environ)
    (line,) = [e for e in built.errors if e.startswith("model ")]
    assert f"model MODEL_PATH={folder} is incomplete: 3 of the 4 shards" in line
    assert f"-> finish the download: hf download Qwen/Qwen2.5-7B-Instruct --local-dir {folder}" in line


def test_the_checkpoint_estimate_is_the_models_shape_whatever_is_on_disk(tmp_path: Path) -> None:
    facts_based = SEVEN_B.model.parameters * budget.CKPT_BYTES_PER_PARAM  # ~91 GB, not the 6 KB of issue 33
    partial = _sharded(tmp_path / "partial", {SHARDS[0]: bytes(1000)})
    big = _sharded(tmp_path / "big", {})
    for name in SHARDS:  # sparse: 4 x 40 GB on paper, nothing on the disk
        with (big / name).open("wb") as handle:
            handle.truncate(40 * 10**9)
    for where in (str(tmp_path / "absent"), str(partial), str(big)):
        built = plan.build(
            SEVEN_B, "a3", STACK, [], path_check=False, environ={"HOME": str(tmp_path), "MODEL_PATH": where}
        )
        assert built.facts is not None and built.facts.checkpoints.per_checkpoint == facts_based, where
    assert facts_based > 90e9


def test_a_verl_checkpoint_given_as_the_model_says_to_merge_it(tmp_path: Path) -> None:
    """The trainer's global_step_N (or the folder above it) as MODEL_PATH / --model: "has no config.json" did not say
    what the folder is; the line names the merge that makes the model."""
    step = tmp_path / "ckpt" / "global_step_40"
    (step / "huggingface").mkdir(parents=True)
    (step / "fsdp_config.json").write_text('{"world_size": 8}')
    (step / "model_world_size_8_rank_0.pt").write_bytes(b"x")
    merge = f"merge it first (scripts/sft_to_rl.sh --ckpt-dir {tmp_path / 'ckpt'} --step 40)"
    for where in (step, tmp_path / "ckpt"):
        assert model_folder.inspect(where).problems == [
            f"is a verl FSDP checkpoint, not a Hugging Face model folder: {merge}"
        ]
    built = plan.build(
        RECIPES["qwen3_4b_dapo"],
        "a3",
        STACK,
        [],
        path_check=True,
        environ={"HOME": str(tmp_path), "MODEL_PATH": str(step)},
    )
    assert (
        f"model MODEL_PATH={step} is a verl FSDP checkpoint, not a Hugging Face model folder: {merge}" in built.errors
    )
