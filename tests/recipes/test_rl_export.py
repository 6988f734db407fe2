"""RL checkpoint -> Hugging Face folder (scripts/rl_to_hf.sh, recipes/launch/handoffs/export.py), without a real merge.

The real merge of an RL run's actor (2 ranks, FSDP2) and the evaluation of the merged folder run end to end in
tests/cpu/test_cpu_rl.py (test_rl_checkpoint_merges_and_scores). Here: the step it picks, the shards it checks,
the target it writes, and every refusal, in one line and with the exit code of docs/troubleshooting.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit_testing import run_kit_script

from platforms.cli_errors import EXIT_FAILED, EXIT_USAGE
from recipes.launch.handoffs import export, handoff


def fake_rl_checkpoint(ckpt: Path, step: int, world: int = 2) -> Path:
    """verl's RL layout: ``global_step_N/actor/`` holds the shards, fsdp_config.json and huggingface/."""
    actor = ckpt / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    for rank in range(world):
        (actor / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


def test_dry_run_merges_the_newest_step_of_the_rl_run(launch_env: dict[str, str], tmp_path: Path) -> None:
    launch_env["CKPT_ROOT"] = str(tmp_path)
    ckpt = tmp_path / "qwen3_4b_dapo_a3"
    fake_rl_checkpoint(ckpt, 10)
    actor = fake_rl_checkpoint(ckpt, 20)
    proc = run_kit_script("rl_to_hf.sh", ["--recipe", "qwen3_4b", "--hw", "a3", "--dry-run"], launch_env, 60)
    assert proc.returncode == 0, proc.stderr
    target = ckpt / "hf_step_20"
    lines = proc.stdout.splitlines()
    assert lines[0] == f"RL checkpoint: {actor} (step 20)"
    assert lines[1].endswith(
        f"-m recipes.launch.handoffs.merger merge --backend fsdp --local_dir {actor} --target_dir {target}"
    )
    assert lines[2:] == [
        f"model of RL step 20: {target}",
        f"  score it: bash scripts/eval_model.sh --recipe qwen3_4b --hw a3 --model {target} --name rl_step_20",
        "dry run: nothing merged",
    ]
    assert not target.exists()


def _main(ckpt: Path, *extra: str) -> int:
    return export.main(["--recipe", "qwen3_4b_dapo", "--hw", "a3", "--ckpt-dir", str(ckpt), "--dry-run", *extra])


def test_step_picks_an_older_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    actor = fake_rl_checkpoint(tmp_path, 10)
    fake_rl_checkpoint(tmp_path, 20)
    assert _main(tmp_path, "--step", "10", "--target", str(tmp_path / "out")) == 0
    out = capsys.readouterr().out
    assert f"RL checkpoint: {actor} (step 10)" in out and f"--target_dir {tmp_path / 'out'}" in out


@pytest.mark.parametrize(
    ("setup", "extra", "code", "message"),
    [
        ("none", [], EXIT_FAILED, "latest_checkpointed_iteration.txt not found: no finished RL checkpoint in"),
        ("ok", ["--step", "7"], EXIT_USAGE, "--step 7: no global_step_7 in {ckpt} (steps saved there: 5)"),
        ("missing_rank", [], EXIT_FAILED, "actor is incomplete (missing model_world_size_2_rank_1.pt)"),
        ("sft_layout", [], EXIT_USAGE, "global_step_5 has no actor/: an SFT checkpoint? (merge it with scripts/sft_to"),
        ("ok", ["--target", "/proc/hf"], EXIT_USAGE, "--target /proc/hf: cannot write in /proc"),
    ],
)
def test_bad_checkpoints_and_targets_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, extra: list[str], code: int, message: str
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    if setup != "none":
        actor = fake_rl_checkpoint(ckpt, 5)
        if setup == "missing_rank":
            (actor / "model_world_size_2_rank_1.pt").unlink()
        elif setup == "sft_layout":  # an SFT checkpoint: the shards directly in global_step_N
            for item in actor.iterdir():
                item.rename(actor.parent / item.name)
            actor.rmdir()
    assert _main(ckpt, *extra) == code
    err = capsys.readouterr().err
    assert message.format(ckpt=ckpt) in err and len(err.strip().splitlines()) == 1, err


def test_a_target_with_other_files_or_another_merge_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SFT hand-off's --force rules (issue 33, finding 2) hold for the RL export too."""
    fake_rl_checkpoint(tmp_path, 5)
    mine = tmp_path / "hf_step_5"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    assert _main(tmp_path, "--force") == EXIT_FAILED
    assert "holds files no earlier merge wrote" in capsys.readouterr().err
    (mine / "notes.txt").unlink()
    (mine / handoff.MARKER).write_text(json.dumps({"step_dir": str(tmp_path / "global_step_4" / "actor")}))
    assert _main(tmp_path) == EXIT_FAILED
    assert "already holds a merge of" in capsys.readouterr().err
    assert _main(tmp_path, "--force") == 0
    (mine / handoff.MARKER).write_text(json.dumps({"step_dir": str(tmp_path / "global_step_5" / "actor")}))
    assert _main(tmp_path) == 0
    assert "already holds this merge: the real run merges nothing" in capsys.readouterr().out


def test_without_hw_the_missing_checkpoint_says_the_profile_was_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --hw, KIT_HW, --ckpt-dir or CKPT_DIR: the folder came from this machine's profile (cpu here), which names
    another run than the RL run on the cluster; the one line says so (shared with sft_to_rl: handoff.py)."""
    for name in ("KIT_HW", "CKPT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CKPT_ROOT", str(tmp_path))
    assert export.main(["--recipe", "qwen3_4b", "--dry-run"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "no finished RL checkpoint" in err and "is this machine's profile: pass the RL run's --hw" in err, err
    assert export.main(["--recipe", "qwen3_4b", "--hw", "a3", "--dry-run"]) == EXIT_FAILED
    assert "this machine's profile" not in capsys.readouterr().err
