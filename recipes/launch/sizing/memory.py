"""A coarse per-device memory estimate of a plan, so a layout that cannot fit fails the dry run, not hour one.

Why coarse is enough: the layouts to tell apart differ by tens of GB (a 32B actor's 16 bytes/parameter over 8 or
16 ranks; 65 GB of vLLM weights at TP 1 on an 80 GB device), not by the last gigabyte; the estimate says where
every term comes from, and the dry-run table prints it against the profile's memory per device.

Training (the FSDP actor of RL, or the SFT trainer): verl's param/optimizer offload moves the states to the host
only *between* phases — ``update_actor`` loads both back before the step (verl/workers/fsdp_workers.py:876-879) — so
the peak holds fp32 weights (4), fp32 gradients (4) and AdamW's two fp32 moments (8): 16 bytes per parameter,
sharded over all ranks (FSDP ``fsdp_size: -1``). Activations, per device: the ``T`` tokens it holds (RL:
``ppo_max_token_len_per_gpu`` with dynamic batch size; SFT: ``micro_batch_size_per_gpu x max_length / SP``), with
gradient checkpointing one bf16 hidden state per layer plus one layer's recomputed MLP, and the logits over the full
vocabulary, counted at 8 bytes per entry (an fp32 copy and its gradient: the 151,936-row vocabulary makes this the
largest term for the 4B model).

Rollout (vLLM, colocated): ``gpu_memory_utilization`` of each device goes to vLLM; its bf16 weights take
``2 x params / TP``, the rest is KV cache (``2 x layers x kv_heads x head_dim x 2`` bytes per token), which must
hold at least one whole trajectory per replica. While vLLM runs, the actor's states that are *not* offloaded stay on
the device (verl/workers/fsdp_workers.py rollout_mode: only ``param_offload`` moves weights out), so they and
vLLM's share must fit together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from recipes.launch.run_inputs.catalog import ModelFacts

GB = 1e9
#: fp32 weights + fp32 gradients + AdamW exp_avg + exp_avg_sq, per parameter.
TRAIN_STATE_BYTES = 16
#: Logits bytes per (token, vocabulary entry): an fp32 copy and its gradient.
LOGITS_BYTES = 8
#: Fraction of a device's memory an estimate may reach before the plan is refused (allocator slack, workspaces).
HEADROOM = 0.95


def facts_for(model_path: str | None, fallback: ModelFacts) -> ModelFacts:
    """The model's shape from its own config.json when readable (a local model, e.g. the smoke's tiny one)."""
    if not model_path:
        return fallback
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return fallback
    return facts_from_config(config, model_path, fallback)


def facts_from_config(c: object, model_path: str, fallback: ModelFacts) -> ModelFacts:
    """The shape a parsed config.json gives (``c``: its JSON, None when unreadable), else ``fallback``."""
    if not isinstance(c, dict):
        return fallback
    try:
        heads = int(c["num_attention_heads"])
        return ModelFacts(
            hf_name=str(model_path),
            num_attention_heads=heads,
            num_key_value_heads=int(c.get("num_key_value_heads") or heads),
            tiny_arch=fallback.tiny_arch,
            hidden_size=int(c["hidden_size"]),
            num_layers=int(c["num_hidden_layers"]),
            intermediate_size=int(c["intermediate_size"]),
            head_dim=int(c.get("head_dim") or int(c["hidden_size"]) // heads),
            vocab_size=int(c["vocab_size"]),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            qkv_bias=str(c.get("model_type", "")) == "qwen2",
        )
    except (ValueError, KeyError, TypeError):
        return fallback


@dataclass(frozen=True)
class MemoryEstimate:
    device_gb: float
    train_state_gb: float
    activation_gb: float
    tokens_per_device: int
    rollout_weights_gb: float | None = None  # per device, vLLM
    kv_tokens_per_replica: int | None = None
    trajectory_tokens: int | None = None
    resident_during_rollout_gb: float | None = None
    vllm_share_gb: float | None = None

    @property
    def train_gb(self) -> float:
        return self.train_state_gb + self.activation_gb


def _activation_bytes(facts: ModelFacts, tokens: int, checkpointing: bool) -> float:
    hidden = tokens * facts.hidden_size * 2  # one bf16 hidden state
    mlp = tokens * facts.intermediate_size * 2 * 3  # gate, up and their product, bf16
    per_layer = hidden + mlp + tokens * facts.hidden_size * 2 * 6  # attention inputs/outputs, norms, residuals
    layers = facts.num_layers * hidden + per_layer if checkpointing else facts.num_layers * per_layer
    return layers + tokens * facts.vocab_size * LOGITS_BYTES


def estimate(
    cfg: DictConfig, phase: str, facts: ModelFacts, device_gb: float, world: int, sft_sp: int = 1
) -> MemoryEstimate:
    """The estimate for a resolved config over ``world`` ranks (see the module docstring for the terms). ``sft_sp``:
    SFT's Ulysses sequence parallelism, as the plan's layout read it at the stack's key."""
    params = facts.parameters
    state = TRAIN_STATE_BYTES * params / world
    if phase == "sft":
        sp = sft_sp
        tokens = int(cfg.data.micro_batch_size_per_gpu) * int(cfg.data.max_length) // max(1, sp)
        act = _activation_bytes(facts, tokens, bool(cfg.model.enable_gradient_checkpointing))
        return MemoryEstimate(device_gb, state / GB, act / GB, tokens)
    arr = cfg.actor_rollout_ref
    trajectory = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    if arr.actor.use_dynamic_bsz:
        tokens = int(arr.actor.ppo_max_token_len_per_gpu)
    else:
        tokens = (
            int(arr.actor.ppo_micro_batch_size_per_gpu or 1)
            * trajectory
            // int(arr.actor.ulysses_sequence_parallel_size)
        )
    act = _activation_bytes(facts, tokens, bool(arr.model.enable_gradient_checkpointing))
    tp = int(arr.rollout.tensor_model_parallel_size)
    weights = 2 * params / tp
    share = float(arr.rollout.gpu_memory_utilization) * device_gb * GB
    kv_per_token = 2 * facts.num_layers * facts.num_key_value_heads * facts.head_dim * 2
    kv_tokens = int(max(0.0, share - weights) * tp / kv_per_token)
    fsdp = arr.actor.fsdp_config
    resident = (0 if fsdp.param_offload else 4 * params / world) + (0 if fsdp.optimizer_offload else 8 * params / world)
    return MemoryEstimate(
        device_gb,
        state / GB,
        act / GB,
        tokens,
        rollout_weights_gb=weights / GB,
        kv_tokens_per_replica=kv_tokens,
        trajectory_tokens=trajectory,
        resident_during_rollout_gb=resident / GB,
        vllm_share_gb=share / GB,
    )


def problems(est: MemoryEstimate) -> list[str]:
    """What does not fit, each with the numbers and the usual fix."""
    out = []
    limit = HEADROOM * est.device_gb
    if est.train_gb > limit:
        out.append(
            f"training needs ~{est.train_gb:.0f} GB per device (weights+gradients+AdamW {est.train_state_gb:.0f} GB, "
            f"activations of {est.tokens_per_device} tokens {est.activation_gb:.0f} GB) of {est.device_gb:g} GB: "
            "more devices (nodes), a larger sequence parallelism or a smaller token budget per device"
        )
    if est.rollout_weights_gb is not None and est.vllm_share_gb is not None:
        if est.rollout_weights_gb >= est.vllm_share_gb:
            out.append(
                f"vLLM's weights need {est.rollout_weights_gb:.0f} GB per device but gpu_memory_utilization leaves "
                f"{est.vllm_share_gb:.0f} GB: raise rollout.tensor_model_parallel_size"
            )
        elif est.kv_tokens_per_replica is not None and est.kv_tokens_per_replica < (est.trajectory_tokens or 0):
            out.append(
                f"vLLM's KV cache holds ~{est.kv_tokens_per_replica} tokens per replica, less than one trajectory "
                f"({est.trajectory_tokens}): raise tensor parallelism or gpu_memory_utilization"
            )
        resident = est.resident_during_rollout_gb or 0.0
        if resident + est.vllm_share_gb > est.device_gb:
            out.append(
                f"during rollout the actor keeps {resident:.0f} GB per device (no param/optimizer offload) next to "
                f"vLLM's {est.vllm_share_gb:.0f} GB of {est.device_gb:g} GB: turn on actor.fsdp_config.param_offload "
                "and optimizer_offload, or lower gpu_memory_utilization"
            )
    return out
