"""The launcher's Ray CPU count holds the TaskRunner's CPUs of the plan's stack, not verl 0.6.1's on every stack.

Why: verl 0.6.1's TaskRunner is ``ray.remote(num_cpus=1)`` (verl/trainer/main_ppo.py:77), verl 0.9.1's TaskRunnerV1 a
plain ``@ray.remote`` actor (main_ppo.py:102) that holds none once running; the count (``ray cpus:`` of the dry run,
and the refusal of a too-small ``ray_init.num_cpus``) and the two-node test's slots (docker/two_node.py) read it from
``VerlFacts.task_runner_cpus``. The plan composes with this interpreter's verl config, so it is built for this
venv's stack: run under .venv and .venv-0.9.1 for both.
"""

from __future__ import annotations

from kit_testing import interpreter_stack

from platforms import stacks
from recipes.launch.planning import plan
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.launch.sizing import ray_cpus

#: the CPU profile's trainer ranks and vLLM server actors; rollout.name=vllm whatever this venv carries
OVERRIDES = ["actor_rollout_ref.rollout.name=vllm", "ray_kwargs.ray_init.num_cpus=8"]


def test_each_stack_says_what_its_task_runner_holds() -> None:
    assert {name: stack.verl.task_runner_cpus for name, stack in stacks.STACKS.items()} == {"0.6.1": 1, "0.9.1": 0}


def test_the_plans_ray_cpus_count_its_stacks_task_runner() -> None:
    stack = interpreter_stack()
    built = plan.build(
        RECIPES["qwen3_4b_dapo"], "cpu", stack, OVERRIDES, path_check=False, environ={"HOME": "/nonexistent/kit-home"}
    )
    need = built.facts.ray_demand
    assert need is not None, built.errors
    runner = stack.verl.task_runner_cpus
    assert dict(need.rows)["TaskRunner"] == runner
    assert need.total == built.facts.layout.world + runner + dict(need.rows)["vllm server actors"]
    assert ("TaskRunner" in need.describe()) == bool(runner), need.describe()


def test_a_task_runner_without_cpus_leaves_the_line_and_the_refusal() -> None:
    reference = ray_cpus.demand(2, "vllm", 2, False, task_runner=1)
    current = ray_cpus.demand(2, "vllm", 2, False, task_runner=0)
    assert reference.describe() == "2 trainer worker bundles + 1 TaskRunner + 2 vllm server actors"
    assert current.describe() == "2 trainer worker bundles + 2 vllm server actors"
    assert ray_cpus.problems(4, 1, current) == []  # 4 Ray CPUs are enough where the TaskRunner holds none
    assert "holds 5 Ray CPUs at once" in ray_cpus.problems(4, 1, reference)[0]
