"""The learning check's actor update: no activation checkpointing, micro-batches of at most 1,024 tokens a rank.

Faster and smaller than checkpointing in one micro-batch (docs/measurements/learn_update_micro_batches.yaml); one big
micro-batch without checkpointing was killed by Ray's memory monitor (recipes/smoke/learn.py): the two go together.
"""

from __future__ import annotations

from kit_testing import interpreter_stack

from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.smoke.commands import RL_RECIPE
from recipes.smoke.learn import LEARN_TASK

BUDGET = 1024


def test_the_learning_checks_update_runs_unchecked_in_small_micro_batches() -> None:
    stack = interpreter_stack()
    overrides = [*LEARN_TASK.rl_overrides, *(stack.verl.reward_override(k, v) for k, v in LEARN_TASK.reward_settings)]
    built = plan.build(RECIPES[RL_RECIPE.name], "cpu", stack, overrides, path_check=False, environ={"HOME": "/x"})
    cfg = built.cfg
    assert cfg is not None
    arr = cfg.actor_rollout_ref
    assert arr.model.enable_gradient_checkpointing is False
    # dynamic batch sizes: verl packs trajectories into micro-batches of at most the budget's tokens
    assert arr.actor.use_dynamic_bsz and arr.actor.ppo_max_token_len_per_gpu == BUDGET
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    assert longest <= BUDGET, "verl refuses a budget a single trajectory does not fit in"
    # the step's trajectories do not fit in one: the update is really split (a rank's share on two ranks, too)
    step_tokens = cfg.data.train_batch_size * arr.rollout.n * longest
    assert step_tokens / 2 > BUDGET
