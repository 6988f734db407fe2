"""What a CPU run of a verl with a platform registry (>= 0.9) needs from the kit: the env that selects the kit's CPU
platform and verl's FSDP engine, the module verl must import first, the overrides, and how to tell such a verl.

Why apart from :mod:`platforms.verl_platform`: that module registers the platform with verl when it is imported (it is
the plugin ``VERL_USE_EXTERNAL_MODULES`` names), which imports verl; the platform layer (platforms/cpu.py) asks these
questions in every process, verl or not, and must not import verl to answer them.
"""

from __future__ import annotations

from platforms.pins import installed_verl as verl_version  # noqa: F401  (the plugin's name for it)

#: What ``VERL_USE_EXTERNAL_MODULES`` names to load this plugin (platforms/cpu.py puts it first in that list).
MODULE = "platforms.verl_platform"
#: The registry name and ``VERL_PLATFORM`` value (the registry lower-cases names: platform_manager.py:61).
PLATFORM_NAME = "cpu"
#: verl writes the platform's visibility variable into each worker's env (verl/single_controller/base/worker.py:172-179,
#: 213-214; vllm_async_server.py:135) and so needs a name; on CPU nothing reads it, so it is the kit's own, inert one.
VISIBLE_DEVICES_ENV = "KIT_CPU_VISIBLE_DEVICES"
#: The device whose engines (FSDP, FSDP2) a CPU run uses: they are device-agnostic and registered for cuda.
ENGINE_DEVICE = "cuda"
#: The first verl with ``verl.plugin.platform`` (0.6.1 has only verl/utils/device.py's name checks).
FIRST_REGISTRY_VERSION = (0, 9)


def has_platform_registry(version: str | None) -> bool:
    """Whether this verl version has the platform registry (>= 0.9); False for None or an unparsable version."""
    if not version:
        return False
    parts = version.split(".")[:2]
    try:
        return (int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)) >= FIRST_REGISTRY_VERSION
    except (ValueError, IndexError):
        return False


def verl_env(registry: bool) -> dict[str, str]:
    """The env a CPU run adds on a verl with the platform registry (``registry``: the stack's
    ``verl.has_platform_registry``): the platform and engine selectors; none on a verl without one.

    platforms/cpu.py merges this into its env table for the RL and SFT phases and puts :data:`MODULE` first in
    ``VERL_USE_EXTERNAL_MODULES`` (see :func:`external_modules`): verl 0.9.1 reads ``VERL_PLATFORM`` once, at the
    first ``get_platform()`` (platform_manager.py:92-96), in each process; Ray workers inherit the driver's env.
    """
    if not registry:
        return {}
    # kit: the engine registry keys engines by device and registers FSDP for cuda/npu only (verl/workers/engine/fsdp/
    # transformer_impl.py:1143,1594), so "cpu" finds none ("No engine registered for device='cpu'"); verl's own
    # override (verl/workers/engine/base.py:404-408) selects the FSDP engine, whose code asks the platform for devices.
    return {"VERL_PLATFORM": PLATFORM_NAME, "VERL_ENGINE_DEVICE": ENGINE_DEVICE}


#: verl 0.9.1's default (V1) PPO trainer keeps a batch in TransferQueue storage actors, 8 by default, each holding a
#: Ray CPU (verl/trainer/config/transfer_queue/*.yaml); with the controller and the TaskRunner that is more than the
#: cpu profile's 8 Ray CPUs, and the run waits for CPUs forever without a word. One unit holds a CPU run's batches.
TRANSFER_QUEUE_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"


#: One trainer rank (and so one vLLM replica) for RL on CPU, where the recipes' cpu scaling has two: a vLLM 0.23 CPU
#: replica holds ~5 GB (server, engine core, worker) beside its ~2 GB trainer rank, and two of each were killed by
#: Ray's memory monitor in step 2 on a 24 GB machine while one of each trained (tests/stack091/
#: test_cpu_runtime_091.py's docstring has the runs; tests/stack091/test_main_job_091.py runs RL so). A user with the
#: memory sets ``trainer.n_gpus_per_node=2`` back.
CPU_RL_RANKS_KEY = "trainer.n_gpus_per_node"
CPU_RL_RANKS = 1


def rl_threads(registry: bool, cores: int) -> int | None:
    """The OpenMP/torch threads of each RL process on a verl with the platform registry: the node's cores over its
    :data:`CPU_RL_RANKS` trainer rank(s), where the table's one per process (platforms/cpu.py) is for two ranks on two
    cores. With one thread the lone rank left a core idle: update_actor took 85 s of a 128 s step on 2 cores, two
    ranks' 44 s on 0.6.1 (the learning check, issue 51). None on a verl without the registry (the table's 1 stays)."""
    return max(1, cores // CPU_RL_RANKS) if registry else None


#: verl 0.9.1 scores rewards in ``reward.num_workers`` RewardLoopWorker actors, 8 by default
#: (verl/trainer/config/reward/reward.yaml:5), each a Python process with verl and the reward's imports: 0.74 GB
#: apiece (PSS; 1.07 GB RSS), 5.9 GB for the 8 (measured in the 0.9.1 two-container run, docs/images.md), which
#: pushed that run past Ray's memory threshold before its first step; with two the same run peaked at 21.9 GB of 23.5.
#: A CPU run's rule-based reward needs one: the agent loop hands each finished trajectory to a worker
#: (experimental/agent_loop/agent_loop.py:969) and the kit's reward takes 1.1 ms a call on average
#: (scripts/bench_reward.py, 256 responses, 2-core Xeon, 2026-12-01), under 0.2 s a step for 160 trajectories. A second
#: worker only started another Python process (verl, torch) beside the servers' start; 0.6.1 scores in the trainer.
REWARD_WORKERS_KEY = "reward.num_workers"
CPU_REWARD_WORKERS = 1


def rl_overrides(registry: bool) -> list[str]:
    """The RL overrides a CPU run needs on a verl with the platform registry beyond the reference's (none there)."""
    if not registry:
        return []
    return [
        f"{TRANSFER_QUEUE_UNITS_KEY}=1",
        f"{CPU_RL_RANKS_KEY}={CPU_RL_RANKS}",
        f"{REWARD_WORKERS_KEY}={CPU_REWARD_WORKERS}",
    ]


def external_modules(registry: bool) -> list[str]:
    """The modules to put first in ``VERL_USE_EXTERNAL_MODULES``: this plugin on a verl with the platform registry."""
    return [MODULE] if registry else []
