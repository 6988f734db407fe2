"""The launcher's reading of a checkpoint folder on the reference stack: the same code that reads verl 0.9.1's trees
(tests/stack091/test_launcher_checkpoints_091.py) against verl 0.6.1's own, with the kit's series.

The RL trees come from 0.6.1's ``RayPPOTrainer._save_checkpoint`` (kit_testing.checkpoint_trainer: the actor's files
by the real FSDPCheckpointManager), and what the launcher predicts is held against the trainer's own
``_load_checkpoint`` (patch 0017: the newest complete step). The SFT layout's one difference, its ``data.pt``, is
held to 0.6.1's fsdp_sft_trainer.
"""

from __future__ import annotations

import inspect
import io
import shutil
from pathlib import Path

import pytest
from kit_testing import checkpoint_trainer, gloo_world_of_one, installed_verl

from platforms import stacks
from recipes.launch.supervision import restart

pytestmark = pytest.mark.skipif(
    not (installed_verl() or "").startswith("0.6."), reason="the reference stack's trainers (verl 0.6.1's venv)"
)
REFERENCE = stacks.get("0.6.1")
RL = REFERENCE.verl.checkpoint("rl")


@pytest.fixture
def rl_tree(tmp_path: Path) -> Path:
    """Steps 1-3 saved by 0.6.1's PPO trainer with max_actor_ckpt_to_keep=2: global_step_1 keeps only data.pt."""
    root = tmp_path / "rl"
    with gloo_world_of_one():
        trainer = checkpoint_trainer(root, ["trainer.max_actor_ckpt_to_keep=2"])
        for step in (1, 2, 3):
            trainer.global_steps = step
            trainer._save_checkpoint()
    return root


def _verl_resumes(root: Path) -> int:
    with gloo_world_of_one():
        trainer = checkpoint_trainer(root)
        trainer._load_checkpoint()
        return trainer.global_steps


def test_the_launcher_resumes_where_061s_ppo_trainer_does(rl_tree: Path) -> None:
    assert RL.saved_steps(rl_tree) == [1, 2, 3] and RL.complete_steps(rl_tree) == [2, 3]
    assert restart.resume_point(rl_tree, RL) == (3, "") and _verl_resumes(rl_tree) == 3
    (rl_tree / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt").unlink()
    step, note = restart.resume_point(rl_tree, RL)
    assert (step, _verl_resumes(rl_tree)) == (2, 2)
    assert note == "global_step_3, the tracker's, is incomplete (missing actor/optim_world_size_1_rank_0.pt)"
    shutil.rmtree(rl_tree / "global_step_2")
    step, note = restart.resume_point(rl_tree, RL)
    assert step is None and "no complete checkpoint: the trainer refuses to start over" in note
    with pytest.raises(RuntimeError, match="found no complete checkpoint"):
        _verl_resumes(rl_tree)


def test_a_restart_and_the_doctor_read_a_061_tree(rl_tree: Path) -> None:
    from platforms import CPU
    from platforms.doctor.cli import run_checks
    from platforms.doctor.probes import Options, Probes

    lines = io.StringIO()
    restart.supervise(["false"], {}, rl_tree, 1, lines, io.StringIO(), layout=RL)
    assert "resuming from global_step_3 (lost 0 steps of work)" in lines.getvalue()
    opts = Options(profile="cpu", only=frozenset({"disk"}), ckpt_dir=rl_tree, stack=REFERENCE, min_free_gb=0.0)
    results = run_checks(opts, Probes(env={}, dev_root=rl_tree, detect_platform=lambda: CPU)).results
    [found] = [r for r in results if r.check == "disk.checkpoints"]
    assert found.status == "OK" and "resumes from global_step_3 (2 of 3 saved RL steps complete)" in found.summary


def test_the_sft_layout_is_what_061s_sft_trainer_writes() -> None:
    """fsdp_sft_trainer saves the shards in global_step_N itself and rank 0's ``data.pt`` there (0.9.1's engine
    trainer: data_<dp rank>.pt), and resumes by the tracker (find_latest_ckpt_path)."""
    from verl.trainer import fsdp_sft_trainer

    source = inspect.getsource(fsdp_sft_trainer.FSDPSFTTrainer.save_checkpoint)
    sft = REFERENCE.verl.checkpoint("sft")
    assert f'os.path.join(local_global_step_folder, "{sft.loader_state}")' in source
    assert "local_path=local_global_step_folder" in source and not sft.role and not sft.skips_incomplete
    assert "find_latest_ckpt_path" in inspect.getsource(fsdp_sft_trainer.FSDPSFTTrainer)
