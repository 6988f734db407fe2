"""verl 0.9.1's TaskRunnerV1 holds no Ray CPU, as ``VerlFacts.task_runner_cpus`` of the 0.9.1 stack says.

Why: the launcher's Ray CPU count (recipes/launch/sizing/ray_cpus.py) and the two-node test's head slots
(docker/two_node.py) add the stack's TaskRunner CPUs. 0.9.1's main_ppo runs ``TaskRunnerV1``, a plain
``@ray.remote`` actor (verl/trainer/main_ppo.py:102, chosen by trainer.use_v1 at :183-184, started with
``task_runner_class.remote()`` at :92): its options hold no ``num_cpus``, so once running it holds none. Counting one
(0.6.1's ``ray.remote(num_cpus=1)(TaskRunner)``, main_ppo.py:77) left a spare slot on the head of the two-container
run, and Ray put both trainer ranks there (docs/images.md).
"""

from __future__ import annotations

from kit_testing import needs_verl_09

from platforms import stacks

pytestmark = needs_verl_09()


def test_the_installed_task_runner_holds_the_stacks_cpus() -> None:
    from verl.trainer import main_ppo

    held = main_ppo.TaskRunnerV1._default_options.get("num_cpus") or 0
    assert held == stacks.STACKS["0.9.1"].verl.task_runner_cpus == 0
