"""``python -m verl.trainer.main_ppo`` on CPU for the end-to-end tests (tests/cpu/): the overrides, environment and
launch they share (importable as ``kit_cpu_ppo``, like kit_testing, also in a check run outside pytest by
``UnpatchedVerl.run``). Imports neither torch nor verl: main_ppo runs in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from kit_testing import interpreter_stack, trainer_env

from platforms import CPU


def common_overrides(assets: Mapping[str, Path], ckpt: Path) -> list[str]:
    """GRPO on the tiny model, 2 worker processes, 2 prompts a step: ``assets`` names the ``data`` parquet, the
    ``reward`` file (``compute_score``) and the ``model``; checkpoints go to ``ckpt``."""
    return [
        # the platform's own settings (device, FSDP2, sdpa, fp32 compute, no torch.compile, Ray CPUs)
        *CPU.verl_overrides("rl", interpreter_stack()),
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={assets['data']}",
        f"data.val_files={assets['data']}",
        "data.train_batch_size=2",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={assets['model']}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        f"custom_reward_function.path={assets['reward']}",
        "custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=2",
        "trainer.nnodes=1",
        "trainer.logger=['console']",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={ckpt}",
        "trainer.project_name=kit-cpu-rl",
        "trainer.experiment_name=tiny",
    ]


def ppo_env(pythonpath: Path, **env_extra: str) -> dict[str, str]:
    """What main_ppo runs with here: the kit's environment (the kit first on PYTHONPATH, so verl can import the
    sabotage switches of ``recipes.smoke.sabotage`` where ``env_extra`` turns one on) and the test's tool/reward
    folder."""
    env = trainer_env("rl", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(pythonpath)])
    return env


def run_ppo(overrides: list[str], log: Path, pythonpath: Path, timeout: float = 420, **env_extra: str) -> float:
    """One main_ppo run, its output in ``log``; fails with the log's tail unless it exits 0. Returns its wall time."""
    env = ppo_env(pythonpath, **env_extra)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            env=env,
            cwd=log.parent,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, f"main_ppo failed (rc={proc.returncode}):\n{log.read_text()[-8000:]}"
    return wall
