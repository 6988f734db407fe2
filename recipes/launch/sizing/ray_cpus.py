"""Ray CPUs an RL plan holds at once, against the ``ray_init.num_cpus`` verl starts its local Ray with.

Why: Ray's CPU count is a scheduling label, and an actor that asks for a CPU no node has left is never scheduled —
verl then waits forever without a word (a 2-worker, 2-replica vLLM run with ``num_cpus=4`` hung until killed). What
holds a CPU, read from verl's code (0.6.1's lines; 0.9.1's where it differs):

* one placement-group bundle ``{"CPU": 1, <device>: 1}`` per trainer rank (``single_controller/ray/base.py:122``,
  ``max_colocate_count=1``; on CPU the bundle is ``{"CPU": 1}``: patch 0003);
* the TaskRunner, as many as the stack's ``VerlFacts.task_runner_cpus`` (0.6.1: ``trainer/main_ppo.py:77``,
  ``num_cpus=1``; 0.9.1's ``TaskRunnerV1`` is a plain ``@ray.remote`` actor, ``main_ppo.py:102``: none);
* each vLLM / SGLang server actor of the async rollout (``vllm_async_server.py:446``,
  ``async_sglang_server.py:50``, ``num_cpus=1``): one per replica, one per node of a replica when it is data
  parallel (``vLLMReplica.launch_servers``); the kit's ``hf`` replica serves from the trainer workers themselves;
* the asynchronous reward task when ``reward_model.launch_reward_fn_async`` is on (``trainer/ppo/reward.py:191``).

Agent-loop and reward-manager workers are plain ``@ray.remote`` actors: they hold no CPU once running (checked on
Ray 2.48: such an actor starts while every CPU is taken by placement groups), so they are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from platforms.cli_errors import UsageError

#: Rollout engines whose async mode starts server actors of their own.
SERVER_ENGINES = ("vllm", "sglang")
NUM_CPUS_KEY = "ray_kwargs.ray_init.num_cpus"


@dataclass(frozen=True)
class Demand:
    """What holds Ray CPUs during the run, as (what, count) rows."""

    rows: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(count for _, count in self.rows)

    def describe(self) -> str:
        return " + ".join(f"{count} {what}" for what, count in self.rows if count)


def rollout_servers(mode: str, name: str, *, tp: int, dp: int, pp: int, world: int, per_node: int) -> int:
    """Server actors of the async rollout: replicas x (nodes per replica when data parallel, else 1)."""
    if mode != "async" or name not in SERVER_ENGINES:
        return 0
    replica_size = tp * dp * pp
    replicas = world // replica_size
    nodes_per_replica = replica_size // min(per_node, replica_size) if dp > 1 else 1
    return replicas * nodes_per_replica


def demand(world: int, engine: str, servers: int, async_reward: bool, *, task_runner: int) -> Demand:
    """What holds Ray CPUs: a bundle per trainer rank, the TaskRunner (``task_runner``: the stack's
    ``VerlFacts.task_runner_cpus``; a row of 0 is left out of :meth:`Demand.describe`), the rollout's servers, the
    async reward."""
    rows = [("trainer worker bundles", world), ("TaskRunner", task_runner), (f"{engine} server actors", servers)]
    if async_reward:
        rows.append(("async reward task", 1))
    return Demand(tuple(rows))


def problems(available: object, nnodes: int, need: Demand) -> list[str]:
    """A single-node plan whose Ray CPU demand exceeds the ``num_cpus`` verl starts Ray with: it would wait forever.

    ``available``: ``ray_kwargs.ray_init.num_cpus``. Multi-node runs join a running cluster
    (``scripts/ray_cluster.sh``), where the nodes' own counts decide; a null ``num_cpus`` lets Ray count the host's
    cores, which an accelerator node has plenty of."""
    if available is None or nnodes > 1:
        return []
    if need.total <= int(available):  # type: ignore[call-overload]
        return []
    return [
        f"{NUM_CPUS_KEY}={available} but the run holds {need.total} Ray CPUs at once ({need.describe()}): Ray would "
        f"never schedule the rest and verl would wait forever; set {NUM_CPUS_KEY}={need.total} or more (a label, not "
        "cores), or fewer trainer ranks or rollout replicas"
    ]


def joins_a_cluster(phase: str, nnodes: int, environ: Mapping[str, str]) -> bool:
    """An RL run that connects to a running Ray (``RAY_ADDRESS``, or ``trainer.nnodes`` > 1: the cluster
    ``scripts/ray_cluster.sh`` started) instead of starting its own. Decided once per plan (``Plan.joins_cluster``)."""
    return phase == "rl" and (nnodes > 1 or bool(environ.get("RAY_ADDRESS", "").strip()))


def for_existing_cluster(device: Sequence[str], user_keys: set[str]) -> list[str]:
    """The platform's overrides without its ``num_cpus``, for a run that joins a cluster: ``ray.init`` refuses
    ``num_cpus`` when it connects ("When connecting to an existing cluster, num_cpus and num_gpus must not be
    provided", ray/_private/worker.py:1834 in Ray 2.48; the CPU platform sets it, and two containers of the CPU
    image running GRPO stopped there, scripts/test_images.sh --two-node). The nodes' own ``ray start
    --num-cpus`` count instead. A user's own value is refused: it cannot take effect."""
    if NUM_CPUS_KEY in user_keys:
        raise UsageError(
            f"{NUM_CPUS_KEY} is set, but this run joins a running Ray cluster (RAY_ADDRESS or trainer.nnodes > 1) and "
            "Ray refuses num_cpus when connecting; drop the override (each node's `ray start --num-cpus` counts)"
        )
    return [item for item in device if item.split("=", 1)[0].lstrip("+~") != NUM_CPUS_KEY]
