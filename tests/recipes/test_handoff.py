"""SFT -> RL hand-off (scripts/sft_to_rl.sh): find the step, check the shards, merge with verl, say what RL uses.

The real merge runs verl.model_merger on a one-rank FSDP checkpoint of the kit's tiny Qwen3, written the way verl's
checkpoint manager lays it out (``model_world_size_1_rank_0.pt``, ``fsdp_config.json``, ``huggingface/``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, run_kit_script

from platforms.cli_errors import EXIT_FAILED
from recipes.launch.handoffs import handoff


def fake_checkpoint(root: Path, step: int, world: int = 2) -> Path:
    """The file layout of a verl SFT checkpoint (empty shards: enough for everything but the merge itself)."""
    step_dir = root / f"global_step_{step}"
    (step_dir / "huggingface").mkdir(parents=True)
    (step_dir / "huggingface" / "config.json").write_text("{}")
    (step_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    for rank in range(world):
        (step_dir / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return step_dir


def run_script(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_kit_script("sft_to_rl.sh", args, env, timeout)


def test_help(launch_env: dict[str, str]) -> None:
    proc = run_script(["--help"], launch_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for word in ("--recipe", "--step", "--target", "--force", "--dry-run", "verl.model_merger", "hf_merged"):
        assert word in proc.stdout, word


def test_dry_run_finds_the_latest_step_of_the_recipe_default_dir(launch_env: dict[str, str], tmp_path: Path) -> None:
    launch_env["CKPT_ROOT"] = str(tmp_path)
    ckpt = tmp_path / "qwen3_4b_sft_a2"
    fake_checkpoint(ckpt, 31)
    step_dir = fake_checkpoint(ckpt, 62)
    proc = run_script(["--recipe", "qwen3_4b", "--hw", "a2", "--dry-run"], launch_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    target = ckpt / "hf_merged"
    assert lines[0] == f"SFT checkpoint: {step_dir} (step 62)"
    merge = f"-m recipes.launch.handoffs.merger merge --backend fsdp --local_dir {step_dir} --target_dir {target}"
    assert lines[1].endswith(merge)
    assert lines[2:] == [
        f"model for RL: {target}",
        f"  run:      MODEL_PATH={target} bash recipes/run_qwen3_4b_dapo_npu.sh --hw a2",
        f"  override: actor_rollout_ref.model.path={target}",
        "  (recipes/run_qwen3_4b_dapo_npu.sh --hw a2 uses this path by default)",
        "dry run: nothing merged",
    ]
    assert not target.exists()


def test_dry_run_refuses_a_target_the_merge_would_refuse(launch_env: dict[str, str], tmp_path: Path) -> None:
    """Issue 21, finding 4: the dry run passed (rc 0) where the real merge then refused the folder."""
    launch_env["CKPT_ROOT"] = str(tmp_path)
    fake_checkpoint(tmp_path / "qwen3_4b_sft_a2", 62)
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("the user's")
    args = ["--recipe", "qwen3_4b", "--hw", "a2", "--target", str(target), "--dry-run"]
    proc = run_script(args, launch_env, timeout=60)
    assert proc.returncode == EXIT_FAILED, proc.stdout + proc.stderr
    assert f"{target} holds files no earlier merge wrote (no kit_merge.json)" in proc.stderr, proc.stderr
    # issue 33, finding 2: --force replaced any folder, the user's own weights among them; it may replace a merge only
    forced = run_script([*args[:-1], "--force"], launch_env, timeout=60)
    assert forced.returncode == EXIT_FAILED and "--force replaces only a merge this script made" in forced.stderr
    assert (target / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("none", "latest_checkpointed_iteration.txt not found"),
        ("missing_rank", "is incomplete (missing model_world_size_2_rank_1.pt)"),
        ("no_hf", "is incomplete (missing huggingface/config.json)"),
    ],
)
def test_incomplete_checkpoints_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    if setup != "none":
        step_dir = fake_checkpoint(ckpt, 5)
        if setup == "missing_rank":
            (step_dir / "model_world_size_2_rank_1.pt").unlink()
        else:
            shutil.rmtree(step_dir / "huggingface")
    rc = handoff.main(["--recipe", "qwen2.5_32b_sft", "--hw", "a3", "--ckpt-dir", str(ckpt), "--dry-run"])
    assert rc == EXIT_FAILED
    assert message in capsys.readouterr().err


def _one_rank_checkpoint(root: Path) -> tuple[Path, dict]:
    """A real world-size-1 checkpoint of the tiny Qwen3 (plain tensors, as the merger accepts without DTensors)."""
    import torch
    from transformers import AutoModelForCausalLM

    from recipes.smoke.tiny_model import build_tiny_qwen

    model_dir = build_tiny_qwen(Path(os.environ.get("KIT_TINY_MODEL_DIR", REPO_ROOT / "build" / "tiny-qwen3")))
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.25)  # "trained": distinguishable from the initial weights
    step_dir = root / "global_step_3"
    hf_dir = step_dir / "huggingface"
    hf_dir.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors"):
            shutil.copy(item, hf_dir / item.name)
    torch.save(model.state_dict(), step_dir / "model_world_size_1_rank_0.pt")
    (step_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (root / "latest_checkpointed_iteration.txt").write_text("3")
    return step_dir, {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}


def test_real_merge_is_atomic_idempotent_and_guarded(launch_env: dict[str, str], tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    step_dir, expected = _one_rank_checkpoint(ckpt)
    launch_env["CKPT_DIR"] = str(ckpt)
    proc = run_script(["--hw", "cpu"], launch_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    target = ckpt / "hf_merged"
    assert f"merged: {target}" in proc.stdout
    assert f"  override: actor_rollout_ref.model.path={target}" in proc.stdout
    assert json.loads((target / handoff.MARKER).read_text())["step_dir"] == str(step_dir)
    assert not list(ckpt.glob(".hf_merged.tmp-*"))
    merged = AutoModelForCausalLM.from_pretrained(target, torch_dtype=torch.bfloat16).state_dict()
    for name in ("model.layers.0.mlp.up_proj.weight", "model.norm.weight"):
        assert torch.equal(merged[name], expected[name]), name

    again = run_script(["--hw", "cpu"], launch_env, timeout=60)
    assert again.returncode == 0 and f"already merged: {target}" in again.stdout

    fake_checkpoint(ckpt, 4, world=1)  # a newer step: the old merge must not be replaced silently
    for dry_run in (["--dry-run"], []):  # the dry run refuses what the merge refuses
        refused = run_script(["--hw", "cpu", *dry_run], launch_env, timeout=60)
        assert refused.returncode == 1, (dry_run, refused.stdout)
        assert f"{target} already holds a merge of {step_dir}; pass --force" in refused.stderr
