"""verl's FSDP model merger as the kit's hand-offs run it: the checkpoint's dtype kept, tied embeddings kept tied.

Why not ``python -m verl.model_merger`` itself (issue 44, finding 2): its FSDP merger casts every shard with
``.bfloat16()`` (verl/model_merger/fsdp_model_merger.py, ``_load_and_merge_state_dicts``) and builds the model it
saves with ``torch_dtype=torch.bfloat16`` (base_model_merger.py, ``save_hf_model_and_tokenizer``), so an fp32 SFT
run on CPU came back in bf16 (a lossy cast no later step can undo), and it saves ``lm_head.weight`` beside
``embed_tokens.weight`` although the config ties them (the two arrive as separate tensors, so ``save_pretrained``
cannot see they are shared). This module runs the same merger, with the same arguments, and undoes just those
choices; the file modes are the hand-off's business (:func:`recipes.launch.handoffs.handoff.merge`).

    python -m recipes.launch.handoffs.merger merge --backend fsdp --local_dir STEP_DIR --target_dir TARGET
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The output embedding that ``tie_word_embeddings`` shares with the input one (every model the kit merges).
LM_HEAD = "lm_head.weight"


@contextlib.contextmanager
def casts_kept() -> Iterator[None]:
    """While merging, ``Tensor.bfloat16()`` returns the tensor as it is: the one place verl decides the dtype."""
    import torch

    own = torch.Tensor.__dict__.get("bfloat16")
    torch.Tensor.bfloat16 = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del torch.Tensor.bfloat16
        else:
            torch.Tensor.bfloat16 = own  # type: ignore[method-assign]


def checkpoint_dtype(state_dict: dict[str, Any]) -> Any:
    """The dtype the checkpoint was trained and saved in: that of its first floating-point tensor."""
    return next((t.dtype for t in state_dict.values() if t.is_floating_point()), None)


def drop_tied_head(state_dict: dict[str, Any], model_config: Any) -> None:
    """Leave out ``lm_head.weight`` when the config ties it to the input embedding and it holds the same values, as
    ``save_pretrained`` would for a tied model; a head that differs is kept (and the merge says so)."""
    import torch

    if not getattr(model_config, "tie_word_embeddings", False) or LM_HEAD not in state_dict:
        return
    embed = next((k for k in state_dict if k.endswith("embed_tokens.weight")), None)
    if embed is not None and torch.equal(state_dict[embed], state_dict[LM_HEAD]):
        del state_dict[LM_HEAD]
    else:
        print(f"kit merger: {LM_HEAD} differs from the input embedding although the config ties them: kept")


def forget_trainer_attention(model_config: Any) -> None:
    """Drop the attention the trainer computed with when it is one the kit registers only inside its trainers
    (the CPU platform's packed sdpa, :data:`platforms.cpu.PACKED_ATTENTION`): verl 0.9.1's engine saves it in the
    checkpoint's ``huggingface/config.json`` (``"attn_implementation": "kit_packed_sdpa"``), and transformers then
    refuses to build the model in the merger, in retool-eval or anywhere else ("is not supported"). The merged model
    gets the library's default, as a model fresh from the hub has; verl 0.6.1's trainer saved no such key."""
    from platforms.cpu import PACKED_ATTENTION

    if getattr(model_config, "_attn_implementation", None) != PACKED_ATTENTION:
        return
    model_config._attn_implementation = None
    vars(model_config).pop("attn_implementation", None)


def record_dtype(target: Path, dtype: Any) -> None:
    """The saved config names the dtype of the weights beside it (verl's save wrote bfloat16 whatever they were)."""
    if dtype is None:
        return
    path = target / "config.json"
    config = json.loads(path.read_text())
    name = str(dtype).removeprefix("torch.")
    for key in ("dtype", "torch_dtype"):
        if key in config:
            config[key] = name
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def kit_merger_class() -> type:
    """verl's ``FSDPModelMerger`` with the dtype and the tying kept (built here: importing verl imports torch)."""
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    class KitMerger(FSDPModelMerger):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            forget_trainer_attention(self.model_config)

        def _load_and_merge_state_dicts(self, *args: Any) -> dict[str, Any]:
            with casts_kept():
                return super()._load_and_merge_state_dicts(*args)

        def save_hf_model_and_tokenizer(self, state_dict: dict[str, Any]) -> None:
            dtype = checkpoint_dtype(state_dict)
            drop_tied_head(state_dict, self.model_config)
            super().save_hf_model_and_tokenizer(state_dict)
            record_dtype(Path(self.config.target_dir), dtype)

    return KitMerger


def main() -> int:
    """verl's own command line (``merge --backend fsdp --local_dir ... --target_dir ...``), read from sys.argv."""
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    config = generate_config_from_args(parse_args())
    if config.backend != "fsdp" or config.operation != "merge":
        print(
            "recipes.launch.handoffs.merger: error: only 'merge --backend fsdp' (the kit's checkpoints)",
            file=sys.stderr,
        )
        return 2
    merger = kit_merger_class()(config)
    merger.merge_and_save()
    merger.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
