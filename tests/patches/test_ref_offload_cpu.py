"""Patch: on CPU the FSDP2 reference model gets no CPUOffloadPolicy(pin_memory=True).

Unpatched 0.6.1 always offloads the ref model with pinned memory, which needs an accelerator: building it on CPU
dies with "Cannot access accelerator device when none is available". The check builds the ref policy through the
worker's own ``init_model`` (role="ref", fsdp2) and computes reference log-probs with it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tiny_model_dir() -> Path:
    """The kit's tiny random Qwen3 + real Qwen tokenizer, built once into build/ (cached by fingerprint)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from recipes.smoke.tiny_model import build_tiny_qwen

    return build_tiny_qwen(Path(os.environ.get("KIT_TINY_MODEL_DIR", REPO_ROOT / "build" / "tiny-qwen3")))


@contextlib.contextmanager
def _gloo_world_of_one() -> Iterator[None]:
    """A 1-process gloo group (made here, so this check does not depend on the backend patch)."""
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    saved = dict(os.environ)
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def _ppo_config(overrides: list[str]):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def check_ref_model_on_cpu() -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from verl import DataProto
    from verl.workers.fsdp_workers import ActorRolloutRefWorker

    model = _tiny_model_dir()
    config = _ppo_config(
        [
            f"actor_rollout_ref.model.path={model}",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "actor_rollout_ref.ref.strategy=fsdp2",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
            "trainer.device=cpu",
        ]
    )
    with _gloo_world_of_one():
        worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="ref")
        worker.init_model()
        params = list(worker.ref_module_fsdp.parameters())
        assert params and all(p.device.type == "cpu" for p in params)

        torch.manual_seed(0)
        prompt_len, resp_len = 6, 4
        input_ids = torch.randint(0, 1000, (2, prompt_len + resp_len))
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, :2] = 0  # left padding
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        data = DataProto.from_dict(
            tensors={
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "position_ids": position_ids,
                "responses": input_ids[:, prompt_len:],
            }
        )
        ref_log_prob = worker.compute_ref_log_prob(data).batch["ref_log_prob"]

    # the same numbers from plain transformers (bf16, like the ref model's weights and compute)
    hf = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    with torch.no_grad():
        logits = hf(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits.float()
    expected = torch.log_softmax(logits[:, prompt_len - 1 : -1], dim=-1)
    expected = expected.gather(-1, input_ids[:, prompt_len:, None]).squeeze(-1)
    assert ref_log_prob.shape == (2, resp_len), ref_log_prob.shape
    # ref log-probs come back in bf16: at about -12 their resolution is 0.0625
    assert torch.allclose(ref_log_prob.float(), expected, atol=0.1), (ref_log_prob, expected)


def test_patched() -> None:
    check_ref_model_on_cpu()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_ref_model_on_cpu", match="Cannot access accelerator device when none is available"
    )
