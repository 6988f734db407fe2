"""End to end on CPU (patch 0024): an SFT run killed right after its epoch-boundary checkpoint and relaunched by the
kit's restart supervisor trains every step of every epoch.

``torchrun --standalone --nproc_per_node 2 -m verl.trainer.fsdp_sft_trainer`` on the kit's tiny Qwen3, 8 short rows,
4 per step: 2 steps per epoch, 3 epochs, ``save_freq`` 2 (one save per epoch, as the kit's 4B and 32B SFT configs).
A test-only module loaded through ``model.external_lib`` SIGKILLs rank 0 right after the checkpoint of step 2 (the end
of epoch 1) is saved, once; torchrun exits non-zero and ``recipes.launch.supervision.restart.supervise``
(``--max-restarts``) relaunches the run with ``trainer.resume_mode=auto``. The logged ``step:N`` lines must cover steps
1-6 with no gap: the first attempt 1-2, the resumed one 3-6. Without the patch the resumed attempt starts in epoch 2 on
the restored, exhausted iterator of epoch 1 and trains epoch 3 only: steps 3-4, then stops. Unpatched 0.6.1 cannot run
SFT on CPU at all, so the comparison runs the kit's verl less patch 0024 (``kit_verl_without``; opt-in, ``-m
unpatched_e2e``: tests/conftest.py). That the resumed epochs get the batches of an uninterrupted run is checked by
tests/patches/test_sft_resume_epoch_boundary.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kit_testing import interpreter_stack, tiny_model_dir, trainer_env

from platforms import CPU
from recipes.launch.supervision import restart

pytestmark = pytest.mark.slow

ROWS, BATCH, EPOCHS = 8, 4, 3
STEPS_PER_EPOCH = ROWS // BATCH
KILL_AFTER = STEPS_PER_EPOCH  # the checkpoint that ends epoch 1

FAULT_PY = '''
"""Test-only fault: SIGKILL rank 0 right after the checkpoint of step KIT_SFT_KILL_AFTER is saved, the first time."""
import os
import signal
import sys
from pathlib import Path

# the trainer runs as ``-m verl.trainer.fsdp_sft_trainer``: its class is __main__'s
trainer_class = sys.modules["__main__"].FSDPSFTTrainer
save = trainer_class.save_checkpoint


def save_checkpoint(self, step):
    save(self, step)
    marker = Path(os.environ["KIT_SFT_KILL_MARKER"])
    if step == int(os.environ["KIT_SFT_KILL_AFTER"]) and self.device_mesh.get_rank() == 0 and not marker.exists():
        marker.write_text(f"killed rank 0 (pid {os.getpid()}) after the checkpoint of step {step}")
        os.kill(os.getpid(), signal.SIGKILL)


trainer_class.save_checkpoint = save_checkpoint
'''


def _write_data(path: Path) -> Path:
    import pandas as pd

    rows = [{"question": f"What is {i} + {i + 3}?", "answer": f"It is {2 * i + 3}."} for i in range(ROWS)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _command(data: Path, ckpt: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "verl.trainer.fsdp_sft_trainer",
        *CPU.verl_overrides("sft", interpreter_stack()),
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.max_length=64",
        f"data.train_batch_size={BATCH}",
        "data.micro_batch_size_per_gpu=2",
        f"model.partial_pretrain={tiny_model_dir()}",
        "model.external_lib=kit_sft_fault",
        f"trainer.default_local_dir={ckpt}",
        "trainer.logger=['console']",
        f"trainer.total_epochs={EPOCHS}",
        f"trainer.save_freq={STEPS_PER_EPOCH}",
        "trainer.project_name=kit-cpu-sft-resume",
        "trainer.experiment_name=tiny",
    ]


def _attempt_steps(text: str) -> list[list[int]]:
    """The training steps each attempt logged (``step:N - train/...`` lines), split at the supervisor's restarts."""
    attempts: list[list[int]] = [[]]
    for line in text.splitlines():
        if line.startswith("restart ") and ": trainer exited with status" in line:
            attempts.append([])
        elif (match := restart.STEP_LINE.search(line)) and "train/loss:" in line:
            attempts[-1].append(int(match.group(1)))
    return attempts


def check_killed_at_an_epoch_end_trains_every_step() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pythonpath").mkdir()
        (root / "pythonpath" / "kit_sft_fault.py").write_text(FAULT_PY)
        marker, ckpt, log = root / "killed", root / "ckpt", root / "sft.log"
        env = trainer_env("sft", PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1", OMP_NUM_THREADS="1")
        env.update(KIT_SFT_KILL_AFTER=str(KILL_AFTER), KIT_SFT_KILL_MARKER=str(marker))
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(root / "pythonpath")])
        t0 = time.perf_counter()
        with open(log, "w") as out:
            rc = restart.supervise(_command(_write_data(root / "sft.parquet"), ckpt), env, ckpt, 1, log=out, out=out)
        text = log.read_text()
        assert rc == 0 and marker.exists(), f"supervised SFT: rc {rc}, fault {marker.exists()}:\n{text[-6000:]}"
        assert f"restart 1/1: trainer exited with status 1 after step {KILL_AFTER}" in text, text[-6000:]
        assert f"resuming from global_step_{KILL_AFTER}" in text, text[-6000:]
        first, resumed = _attempt_steps(text)
        total = EPOCHS * STEPS_PER_EPOCH
        remaining = list(range(KILL_AFTER + 1, total + 1))
        assert first == list(range(1, KILL_AFTER + 1)), f"the first attempt logged steps {first}:\n{text[-6000:]}"
        missing = sorted(set(remaining) - set(resumed))
        assert resumed == remaining, (
            f"the attempt resumed from global_step_{KILL_AFTER} (the end of epoch 1/{EPOCHS}) trained steps {resumed}, "
            f"not {remaining}: steps {missing} missing ({STEPS_PER_EPOCH} steps per epoch)\n{text[-3000:]}"
        )
        assert restart.checkpoint_step(ckpt) == total, restart.checkpoint_step(ckpt)
        print(f"\n[cpu-sft-resume] wall {time.perf_counter() - t0:.1f}s, steps per attempt {first} {resumed}")


def test_patched_killed_at_an_epoch_end() -> None:
    check_killed_at_an_epoch_end_trains_every_step()


@pytest.mark.unpatched_e2e  # opt-in: tests/conftest.py OPT_IN_MARKERS
def test_without_the_patch_an_epoch_is_skipped(kit_verl_without) -> None:
    kit_verl_without("0024").expect_failure(
        __file__,
        "check_killed_at_an_epoch_end_trains_every_step",
        match="trained steps [3, 4], not [3, 4, 5, 6]: steps [5, 6] missing",
    )
