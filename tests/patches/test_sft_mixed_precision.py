"""Patch: the SFT trainer's compute dtype is configurable (``model.fsdp_config.mixed_precision``).

Unpatched 0.6.1 hard-codes bf16 in ``FSDPSFTTrainer`` (FSDP1 ``MixedPrecision``, FSDP2 ``MixedPrecisionPolicy`` and
the forward's ``torch.autocast``) and has no config key for it: Hydra rejects
``model.fsdp_config.mixed_precision.param_dtype=fp32``. On a CPU without AVX512-BF16/AMX that makes every SFT step
~10x slower than it has to be. The check builds the model through the trainer's own ``_build_model_optimizer``
(FSDP2, a gloo world of one) on the tiny Qwen3 and runs ``_compute_loss_and_backward``: with ``param_dtype=fp32``
the logits (the output of ``lm_head``) are fp32, with the defaults they are bf16 as before.
"""

from __future__ import annotations

from pathlib import Path

from kit_testing import gloo_world_of_one, tiny_model_dir


def _sft_config(model_dir: Path, overrides: list[str]):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(
            "sft_trainer",
            # the overrides under test first: Hydra names the first key it cannot set (unpatched verl)
            overrides=[
                *overrides,
                f"model.partial_pretrain={model_dir}",
                "model.attn_implementation=sdpa",  # patch 0002: no flash-attn on CPU
                "model.strategy=fsdp2",
                "trainer.device=cpu",
                "use_remove_padding=false",
            ],
        )


def _logits_dtypes(config) -> tuple[set, float]:
    """Build the trainer's model from ``config`` and run one micro-batch; return (lm_head output dtypes, loss)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    with gloo_world_of_one():
        # only what _build_model_optimizer and _compute_loss_and_backward read
        trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)
        trainer.config = config
        trainer.device_name = "cpu"
        trainer.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        trainer.ulysses_device_mesh = None
        trainer.use_remove_padding = False
        trainer.lora = False
        trainer.train_dataloader = [None]  # len() gives the number of steps for the lr schedule
        trainer._build_model_optimizer()
        seen: set = set()
        hook = trainer.model.lm_head.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        input_ids = torch.tensor([[9707, 11, 1879, 0, 3838, 374]])
        batch = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "position_ids": torch.arange(input_ids.shape[1])[None, :],
            "loss_mask": torch.ones_like(input_ids),
        }
        loss = trainer._compute_loss_and_backward(batch)
        hook.remove()
        return seen, float(loss)


def check_sft_mixed_precision() -> None:
    import math

    import torch

    model_dir = tiny_model_dir()
    fp32 = _sft_config(
        model_dir,
        [
            "model.fsdp_config.mixed_precision.param_dtype=fp32",
            "model.fsdp_config.mixed_precision.reduce_dtype=fp32",
            "model.fsdp_config.mixed_precision.buffer_dtype=fp32",
        ],
    )
    seen, loss = _logits_dtypes(fp32)
    assert seen == {torch.float32}, f"param_dtype=fp32 but the logits were computed in {seen}"
    assert math.isfinite(loss), loss

    # the default is unchanged: bf16 compute (CUDA/NPU runs)
    default = _sft_config(model_dir, [])
    assert default.model.fsdp_config.mixed_precision.param_dtype == "bf16"
    seen, loss = _logits_dtypes(default)
    assert seen == {torch.bfloat16}, f"default mixed precision computed the logits in {seen}, not bf16"
    assert math.isfinite(loss), loss


def test_patched() -> None:
    check_sft_mixed_precision()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__,
        "check_sft_mixed_precision",
        match="Could not override 'model.fsdp_config.mixed_precision.param_dtype'",
    )
