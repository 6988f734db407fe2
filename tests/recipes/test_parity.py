"""``--parity`` (recipes/launch/planning/parity.py): every kit numerical change is undone where each one lives.

Each assertion compares a parity plan with the default plan of the same recipe, so a setting that stops reaching the
config, the process environment, the Ray job's environment or the tool config fails here.
"""

from __future__ import annotations

import pytest
from kit_testing import interpreter_stack
from omegaconf import OmegaConf

from recipes.launch.planning import parity, plan, report
from recipes.launch.run_inputs import inputs
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.retool import TOOL_CONFIG_PATH

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves

ENVIRON = {"HOME": "/nonexistent/kit-home"}


def _build(name: str, *, parity_on: bool, hw: str = "a3") -> plan.Plan:
    built = plan.build(RECIPES[name], hw, STACK, (), parity=parity_on, path_check=False, environ=dict(ENVIRON))
    assert built.cfg is not None, built.errors
    return built


def _job_env(built: plan.Plan) -> dict:
    return dict(OmegaConf.select(built.cfg, inputs.RL_ENV_KEY) or {})


@pytest.mark.parametrize("name", ["qwen3_4b_dapo", "qwen2.5_32b_dapo"])
def test_rl_parity_sets_verls_rule_tool_output_memory_and_kernels(name: str) -> None:
    default, ref = _build(name, parity_on=False), _build(name, parity_on=True)
    assert OmegaConf.select(default.cfg, "custom_reward_function.reward_kwargs.verifier") in (None, "kit")
    assert ref.cfg.custom_reward_function.reward_kwargs.verifier == "strict"
    assert default.cfg.actor_rollout_ref.rollout.multi_turn.max_tool_response_length == 2048
    assert ref.cfg.actor_rollout_ref.rollout.multi_turn.max_tool_response_length == 256
    assert ref.env["KIT_FUSED_KERNELS"] == "off" and "KIT_FUSED_KERNELS" not in default.env
    # the Ray job's environment: where the AgentLoopWorkers run the tool and the actor workers run the kernels
    assert _job_env(ref)["KIT_FUSED_KERNELS"] == "off" and _job_env(ref)["RETOOL_TOOL_MEMORY_LIMIT_MB"] == "1024"
    assert "RETOOL_TOOL_MEMORY_LIMIT_MB" not in _job_env(default)
    # everything else is the same run
    for key in ("data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.total_training_steps"):
        assert OmegaConf.select(ref.cfg, key) == OmegaConf.select(default.cfg, key), key
    rows = dict(report.rows(ref))
    assert rows["parity"] == parity.describe("rl") and "math_dapo" in rows["parity"]
    assert "parity" not in dict(report.rows(default))


def test_sft_parity_only_turns_kernels_off() -> None:
    default, ref = _build("qwen3_4b_sft", parity_on=False), _build("qwen3_4b_sft", parity_on=True)
    assert ref.env["KIT_FUSED_KERNELS"] == "off"
    assert OmegaConf.to_container(ref.cfg) == OmegaConf.to_container(default.cfg)
    assert dict(report.rows(ref))["parity"] == "on: fused kernels off (verl's own npu_patch on NPU)"


def test_tool_config_reads_the_parity_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl resolves the tool config (verl/tools/utils/tool_registry.py, to_container(resolve=True)): env decides."""

    def memory_limit() -> int:
        tools = OmegaConf.load(TOOL_CONFIG_PATH)
        config = OmegaConf.to_container(tools.tools[0].config, resolve=True)
        return int(config["memory_limit_mb"])  # as recipes/retool/tool.py reads it

    monkeypatch.delenv("RETOOL_TOOL_MEMORY_LIMIT_MB", raising=False)
    assert memory_limit() == -1
    monkeypatch.setenv("RETOOL_TOOL_MEMORY_LIMIT_MB", parity.RL_JOB_ENV["RETOOL_TOOL_MEMORY_LIMIT_MB"])
    assert memory_limit() == 1024
