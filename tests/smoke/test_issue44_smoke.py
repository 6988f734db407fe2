"""Issue 44, findings 3, 5 and 6: what the main job (``bash scripts/smoke.sh``) composes and its dry run prints.

3. RL ran with ``trainer.save_freq=-1``: ``OUT/rl/ckpt`` held no checkpoint, so the README's way from a checkpoint
   to a score (scripts/rl_to_hf.sh, scripts/eval_model.sh) could not be followed on the main job's own run.
5. ``--dry-run --out '<a path with a space>'`` printed commands that could not be pasted (unquoted).
6. ``--platform npu --dry-run`` on a CPU host reported this host's vLLM CPU build as the rollout engine.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from platforms import PROFILES
from platforms.stacks import REFERENCE
from recipes.smoke import cli
from recipes.smoke.commands import FAST, FULL, SMOKE_TASK, Sizes, SmokeCommands, Task
from recipes.smoke.learn import LEARN, LEARN_TASK


@pytest.mark.parametrize(("sizes", "task"), [(LEARN, LEARN_TASK), (FAST, SMOKE_TASK), (FULL, SMOKE_TASK)])
def test_rl_keeps_its_last_checkpoint(tmp_path: Path, sizes: Sizes, task: Task) -> None:
    argv = SmokeCommands(tmp_path, sizes, PROFILES["cpu"], REFERENCE, task=task).rl_command("http://127.0.0.1:9").argv
    saves = [word for word in argv if word.startswith("trainer.save_freq=")]
    assert saves[-1] == f"trainer.save_freq={sizes.rl_steps}", saves  # the last override wins in Hydra
    assert f"trainer.total_training_steps={sizes.rl_steps}" in argv
    assert "trainer.max_actor_ckpt_to_keep=1" in argv
    assert "trainer.save_freq=-1" not in argv


def test_the_users_rl_override_still_wins(tmp_path: Path) -> None:
    smoke = SmokeCommands(tmp_path, FAST, PROFILES["cpu"], REFERENCE, rl_extra=("trainer.save_freq=-1",))
    saves = [word for word in smoke.rl_command("http://127.0.0.1:9").argv if word.startswith("trainer.save_freq=")]
    assert saves[-1] == "trainer.save_freq=-1"


def _dry_run(out: Path, *words: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(["run", "--dry-run", "--out", str(out), *words]) == 0
    return capsys.readouterr().out


def test_the_dry_run_quotes_a_path_with_a_space(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "my runs" / "one"
    text = _dry_run(out, "--platform", "cpu", capsys=capsys)
    commands = [line.removeprefix("  $ ") for line in text.splitlines() if line.startswith("  $ ")]
    envs = [line.strip() for line in text.splitlines() if line.startswith("  env ") and str(out) in line]
    assert commands and envs
    for line in commands:
        words = shlex.split(line)
        assert shlex.join(words) == line
        if str(out) in line:  # the path is one word (or inside one), never split at its space
            assert any(str(out) in word for word in words), line
            assert not any(word.endswith(str(out).split(" ")[0]) for word in words), line
    for line in envs:
        name, value = shlex.split(line)[1].split("=", 1)
        assert value.startswith(str(out)), (name, value)


def test_the_npu_dry_run_names_the_npu_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _dry_run(tmp_path / "run", "--platform", "npu", capsys=capsys)
    first = text.splitlines()[0]
    assert f"rollout vllm (vllm-ascend {REFERENCE.pin('VLLM_ASCEND_VERSION')})," in first, first
    assert "+cpu" not in first
