"""End to end on CPU: verl's own agent-loop worker + ToolAgentLoop, our tool in a live sandbox, our reward via the
reward loop — and the same run fails on unpatched verl 0.6.1, which does not pass num_turns to the reward.

The policy is a scripted server manager (``generate`` returns token ids of the real Qwen tokenizer) that reads the
tool output it is shown and answers from it, so a broken tool (e.g. a last expression that prints nothing) changes
the answer and the reward. Everything else is verl's code path: ``create_rl_dataset`` with ``data.custom_cls``,
``AgentLoopWorkerBase.generate_sequences`` -> ``_run_agent_loop`` -> ``ToolAgentLoop.run`` (hermes tool calls,
tools from our YAML) -> ``RewardManagerWorker`` -> ``NaiveRewardLoopManager.run_single`` -> our ``compute_score``.

``check_tool_rounds_counted_end_to_end`` is module level so the ``unpatched_verl`` fixture can run it in a
subprocess against unpatched verl; it takes its inputs from environment variables (RETOOL_IT_*).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "retool" / "dapo_math_17k.jsonl"
RUN_TIMEOUT_S = 2


def _tool_call(code: str, thought: str) -> str:
    call = json.dumps({"name": "code_interpreter", "arguments": {"code": code}})
    return f"{thought}\n<tool_call>\n{call}\n</tool_call>"


def _policy(problem: str, outputs: list[str]) -> str:
    """The scripted model: the next assistant turn for ``problem`` after having seen tool ``outputs``."""
    if "sum of the squares" in problem:  # two tool rounds, the second fails; answers with the first output
        if not outputs:
            return _tool_call("squares = [k * k for k in range(1, 11)]\nsum(squares)", "Let me add them up.")
        if len(outputs) == 1:
            return _tool_call("print(sum(squares))", "Let me double-check that.")
        return (
            f"The first run printed {outputs[0].strip()}; the second run starts fresh. \\boxed{{{outputs[0].strip()}}}"
        )
    if "positive divisors" in problem:  # no tool
        return "The exponents are 4, 2 and 1, so there are (4+1)(2+1)(1+1) = 30 divisors. \\boxed{30}"
    if "smallest integer" in problem:  # one round; answers in a format verl's strict grader rejects
        if not outputs:
            return _tool_call("min(n for n in range(-10, 10) if n * n + 6 * n + 8 <= 0)", "Let me search.")
        return f"So $n$ is {outputs[0].strip()}.\n\\boxed{{ {outputs[0].strip()}.0 }}"
    if "ordered pairs" in problem:  # one round that times out, then a wrong answer
        if not outputs:
            code = "import time\nprint('searching', flush=True)\ntime.sleep(60)"
            return _tool_call(code, "Brute force.")
        return "The search timed out; I estimate \\boxed{9}."
    raise AssertionError(f"unexpected problem: {problem[:200]}")


class ScriptedServerManager:
    """Stands in for verl's AsyncLLMServerManager: same ``generate`` signature, scripted token ids out."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None):
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        user = text.split("<|im_start|>user\n", 1)[1]
        outputs = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.DOTALL)
        reply = _policy(user, outputs) + "<|im_end|>"
        return TokenOutput(token_ids=self.tokenizer.encode(reply, add_special_tokens=False))


def _compose_config(tokenizer_dir: str, tool_config: str, reward_kwargs: dict[str, Any]):
    import verl
    from hydra import compose, initialize_config_dir

    overrides = [
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.prompt_length=1024",
        "actor_rollout_ref.rollout.response_length=2048",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=8",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=8",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=2048",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        "data.max_prompt_length=1024",
        "data.return_raw_chat=True",
        "data.filter_overlong_prompts=True",
        "data.custom_cls.path=pkg://recipes.retool.dataset",
        "data.custom_cls.name=ReToolRLDataset",
        f"custom_reward_function.path={REPO_ROOT / 'recipes' / 'retool' / 'reward.py'}",
        "custom_reward_function.name=compute_score",
    ] + [f"+custom_reward_function.reward_kwargs.{k}={v}" for k, v in reward_kwargs.items()]
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


class InProcessRewardWorker:
    """verl's RewardManagerWorker class body, constructed without Ray (``.compute_score.remote`` is awaited)."""

    def __init__(self, config) -> None:
        from verl.experimental.reward.reward_manager import RewardManagerWorker

        cls = RewardManagerWorker.__ray_metadata__.modified_class.__bases__[0]
        self.worker = cls(config, None)
        self.compute_score = SimpleNamespace(remote=self.worker.compute_score)


def run_pipeline(sandbox_url: str, tokenizer_dir: str, work_dir: str) -> dict[str, Any]:
    """Prepare data, build verl's dataset and agent-loop worker, roll out 4 problems, and score them."""
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorkerBase
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.trainer.main_ppo import create_rl_dataset
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import collate_fn

    from recipes.retool import TOOL_CONFIG_PATH, prepare

    work = Path(work_dir)
    parquet = work / "train.parquet"
    assert prepare.main(["rl", "--input", str(FIXTURE), "--output", str(parquet)]) == 0
    tool_yaml = yaml.safe_load(TOOL_CONFIG_PATH.read_text())  # the shipped config, with a short run timeout
    tool_yaml["tools"][0]["config"].update(sandbox_fusion_url=sandbox_url, default_timeout=RUN_TIMEOUT_S)
    tool_config = work / "tool.yaml"
    tool_config.write_text(yaml.safe_dump(tool_yaml))

    config = _compose_config(tokenizer_dir, str(tool_config), {})
    tokenizer = hf_tokenizer(tokenizer_dir)
    dataset = create_rl_dataset([str(parquet)], config.data, tokenizer, None)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))

    sys.modules.pop("custom_module", None)
    ToolAgentLoop._class_initialized = False
    server = ScriptedServerManager(tokenizer)

    async def rollout() -> DataProto:
        worker = object.__new__(AgentLoopWorkerBase)
        worker.config = config
        worker.server_manager = server
        worker.tokenizer = tokenizer
        worker.processor = None
        worker.reward_router_address = None
        worker.reward_manager_worker = InProcessRewardWorker(config)
        return await worker.generate_sequences(batch)

    output = asyncio.run(rollout())
    responses, mask = output.batch["responses"], output.batch["response_mask"]
    attention = output.batch["attention_mask"][:, -responses.shape[1] :]
    tool = ToolAgentLoop.tools["code_interpreter"]
    return {
        "scores": output.batch["rm_scores"].sum(-1).tolist(),
        "num_turns": output.non_tensor_batch["__num_turns__"].tolist(),
        "tool_rounds": output.non_tensor_batch["tool_rounds"].tolist(),
        "acc": output.non_tensor_batch["acc"].tolist(),
        "pred": output.non_tensor_batch["pred"].tolist(),
        "model_text": [tokenizer.decode(r[(m == 1)]) for r, m in zip(responses, mask, strict=True)],
        "tool_text": [
            tokenizer.decode(r[(m == 0) & (a == 1)]) for r, m, a in zip(responses, mask, attention, strict=True)
        ],
        "tool_totals": tool.totals(),
        "generate_calls": server.calls,
        "tool_class": f"{type(tool).__module__}.{type(tool).__name__}",
    }


def check_tool_rounds_counted_end_to_end() -> dict[str, Any]:
    result = run_pipeline(
        os.environ["RETOOL_IT_SANDBOX_URL"], os.environ["RETOOL_IT_TOKENIZER"], os.environ["RETOOL_IT_WORKDIR"]
    )
    # rows: sum of squares (2 rounds, correct), divisors (no tool, correct), smallest n (1 round, "-4.0"),
    # ordered pairs (1 round that timed out, wrong). Default shaping no_tool_penalty: 1, 0.6, 1, -1.
    assert result["num_turns"] == [6, 2, 4, 4], result
    assert result["tool_rounds"] == [2, 0, 1, 1], result
    assert result["acc"] == [True, True, True, False], result
    assert result["pred"] == ["385", "30", "-4", "9"], result
    assert np.allclose(result["scores"], [1.0, 0.6, 1.0, -1.0]), result
    return result


def test_tool_rounds_counted_end_to_end(live_sandbox, qwen_tokenizer_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RETOOL_IT_SANDBOX_URL", live_sandbox.url)
    monkeypatch.setenv("RETOOL_IT_TOKENIZER", str(qwen_tokenizer_dir))
    monkeypatch.setenv("RETOOL_IT_WORKDIR", str(tmp_path))
    result = check_tool_rounds_counted_end_to_end()
    assert result["tool_class"] == "recipes.retool.tool.CodeInterpreterTool"
    assert result["generate_calls"] == 3 + 1 + 2 + 2
    squares, divisors, smallest, pairs = result["tool_text"]
    assert "<tool_response>\n385\n</tool_response>" in squares  # the bare last expression was displayed
    assert "NameError: name 'squares' is not defined" in squares  # each call is a fresh process; traceback shown
    assert divisors == ""
    assert "<tool_response>\n-4\n</tool_response>" in smallest
    assert f"searching\n[timed out after {RUN_TIMEOUT_S} s]" in pairs
    assert all("<tool_call>" not in text for text in result["tool_text"])
    assert "<tool_call>" in result["model_text"][0] and "\\boxed{385}" in result["model_text"][0]
    totals = result["tool_totals"]
    assert totals["calls"] == 4 and totals["errors"] == 1 and totals["timeouts"] == 1 and totals["unavailable"] == 0


def test_fails_on_unpatched_verl(live_sandbox, qwen_tokenizer_dir, tmp_path, monkeypatch, unpatched_verl) -> None:
    monkeypatch.setenv("RETOOL_IT_SANDBOX_URL", live_sandbox.url)
    monkeypatch.setenv("RETOOL_IT_TOKENIZER", str(qwen_tokenizer_dir))
    monkeypatch.setenv("RETOOL_IT_WORKDIR", str(tmp_path))
    out = unpatched_verl.expect_failure(
        __file__, "check_tool_rounds_counted_end_to_end", match="patch series is not applied"
    )
    assert "NumTurnsMissingError" in out


def test_reward_kwargs_reach_compute_score_through_verl(qwen_tokenizer_dir) -> None:
    """custom_reward_function.reward_kwargs choose the shaping (verl merges them into every call)."""
    import pytest
    from verl.trainer.ppo.reward import get_custom_reward_fn

    for kwargs, response, num_turns, expected in [
        ({"shaping": "verl"}, "\\boxed{7}", 4, -0.9),
        ({"shaping": "none"}, "\\boxed{8}", 2, 1.0),
        ({"no_tool_penalty": 0.2}, "\\boxed{8}", 2, 0.8),
        ({}, "\\boxed{7}", 2, -1.4),
    ]:
        sys.modules.pop("custom_module", None)
        fn = get_custom_reward_fn(_compose_config(str(qwen_tokenizer_dir), "null", kwargs))
        result = fn(data_source="x", solution_str=response, ground_truth="8", extra_info={"num_turns": num_turns})
        assert result["score"] == pytest.approx(expected), (kwargs, result)
    sys.modules.pop("custom_module", None)
