"""``--parity``: run the reference configuration on the kit's stack, every kit numerical change turned off.

Why: the kit deviates from the reference runs where it has evidence (the ``kit:`` comments in recipes/config and the
reasons in platforms), but a user reproducing a published number must be able to rule those out. With
``--parity`` the launcher undoes each change that alters what the model computes or sees:

* fused kernels: ``KIT_FUSED_KERNELS=off`` in every process (npu_kernels.auto then patches nothing, so verl 0.6.1's
  own npu_patch runs on NPU, as in the Ascend sample, and plain transformers on CUDA);
* the answer check: ``verifier=strict`` makes the reward score answers with verl's own ``math_dapo`` (last 300
  characters, strict ``\\boxed{}`` match), as verl 0.6.1's recipe/retool/retool.py does, instead of the kit's
  normalising verifier; the shaping is already the reference's (4B: the sample's tool bonus, 32B: verl's);
* tool output: ``multi_turn.max_tool_response_length=256``, verl 0.6.1's default (verl/trainer/config/rollout/
  rollout.yaml), which the references left unset, instead of the kit's 2048;
* the tool's memory limit: 1024 MB, the reference tool config's (verl 0.6.1 recipe/retool/
  sandbox_fusion_tool_config.yaml), through ``RETOOL_TOOL_MEMORY_LIMIT_MB`` (recipes/retool/code_interpreter.yaml).

Left as they are, because they change no numbers of a correct run: the process environment (timeouts, logging,
allocator, ports), checkpoint and logging choices, and the kit's tool itself (it runs the same code; its messages
for timeouts and sandbox failures are clearer than verl's ``no stdout here``).
"""

from __future__ import annotations

#: Process environment of every launch process (the driver, torchrun ranks) and of every Ray worker.
ENV: dict[str, str] = {"KIT_FUSED_KERNELS": "off"}
#: RL only: the Ray job's environment (where the tool runs: the AgentLoopWorkers).
RL_JOB_ENV: dict[str, str] = {"RETOOL_TOOL_MEMORY_LIMIT_MB": "1024"}


def rl_overrides(reward_key: str) -> tuple[str, ...]:
    """RL only: Hydra overrides; ``reward_key`` is where the stack's verl reads the reward (platforms.stacks)."""
    return (
        f"++{reward_key}.reward_kwargs.verifier=strict",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=256",
    )


def describe(phase: str) -> str:
    """The dry-run row: what --parity turned off."""
    parts = ["fused kernels off (verl's own npu_patch on NPU)"]
    if phase == "rl":
        parts += ["answers checked by verl's math_dapo", "tool output <= 256 chars", "tool memory 1024 MB"]
    return "on: " + ", ".join(parts)
