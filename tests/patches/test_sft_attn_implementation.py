"""Patch: the SFT trainer's attention kernel is configurable (``model.attn_implementation``).

Unpatched 0.6.1 hard-codes ``attn_implementation="flash_attention_2"`` in ``FSDPSFTTrainer._build_model_optimizer``
and has no config key for it: Hydra rejects ``model.attn_implementation=sdpa``, and without the override the model
load needs flash-attn. The check composes the SFT config with the override and builds the model through the
trainer's own ``_build_model_optimizer`` (FSDP2, 1-process gloo group) on a tiny Qwen3.
"""

from __future__ import annotations

from pathlib import Path

from kit_testing import gloo_world_of_one, tiny_model_dir


def check_sft_attn_implementation() -> None:
    import torch
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from torch.distributed.device_mesh import init_device_mesh
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    model_dir = tiny_model_dir()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        config = compose(
            "sft_trainer",
            overrides=[
                f"model.partial_pretrain={model_dir}",
                "model.attn_implementation=sdpa",
                "model.strategy=fsdp2",
                "trainer.device=cpu",
            ],
        )
    assert config.model.attn_implementation == "sdpa"

    with gloo_world_of_one():
        # only what _build_model_optimizer reads; __init__ would also build datasets and dataloaders
        trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)
        trainer.config = config
        trainer.device_mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        trainer.ulysses_device_mesh = None
        trainer.use_remove_padding = False
        trainer.lora = False
        trainer.train_dataloader = [None]  # len() gives the number of steps for the lr schedule
        trainer._build_model_optimizer()
        model = trainer.fsdp_model
        assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
        input_ids = torch.tensor([[9707, 11, 1879, 0]])
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
        assert logits.shape == (1, 4, model.config.vocab_size) and torch.isfinite(logits).all()

    # the default is unchanged (flash_attention_2 for CUDA/NPU runs)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        assert compose("sft_trainer").model.attn_implementation == "flash_attention_2"


def test_patched() -> None:
    check_sft_attn_implementation()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_sft_attn_implementation", match="Could not override 'model.attn_implementation'"
    )
