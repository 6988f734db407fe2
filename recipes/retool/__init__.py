"""The kit's ReTool recipe: reward, code-interpreter tool, RL dataset class and data preparation.

An importable package (not a loose script like verl's ``recipe/retool/retool.py``) so that Ray workers can import
the tool class named in the tool YAML, and so ``datasets.map(num_proc>1)`` can pickle its row functions by
reference. Keep this file free of heavy imports: the math-verify worker and the CLI import the package too.

Entry points:

* reward: ``custom_reward_function.path=<kit>/recipes/retool/reward.py``, ``name=compute_score``
* tool: ``class_name: recipes.retool.tool.CodeInterpreterTool`` (see ``code_interpreter.yaml``)
* agent loop: ``actor_rollout_ref.rollout.agent.agent_loop_config_path=<kit>/recipes/retool/agent_loop.yaml``
  (``tool_agent``: verl's ToolAgentLoop, counting the tool-output tokens the loss mask trains on)
* dataset: ``data.custom_cls.path=pkg://recipes.retool.dataset``, ``name=ReToolRLDataset``
* data preparation: ``retool-prepare {sft,rl,val}`` (``recipes.retool.prepare:main``)
"""

from pathlib import Path

RECIPE_DIR = Path(__file__).resolve().parent
#: verl's ``custom_reward_function.path`` (a file path, not a module: verl loads it with spec_from_file_location).
REWARD_PATH = RECIPE_DIR / "reward.py"
#: verl's ``actor_rollout_ref.rollout.multi_turn.tool_config_path``.
TOOL_CONFIG_PATH = RECIPE_DIR / "code_interpreter.yaml"
#: verl's ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (registers ``tool_agent`` to the kit's subclass).
AGENT_LOOP_CONFIG_PATH = RECIPE_DIR / "agent_loop.yaml"
