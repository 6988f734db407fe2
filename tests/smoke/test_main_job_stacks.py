"""Issue 43: the main job on either stack, as composed (no trainer runs here; tests/stack091 runs them on 0.9.1).

What differs between the stacks in the main job's commands: the reward settings of the learning task and of the
sabotage bench go to the key the stack's verl reads; RL on CPU runs one rank on 0.9.1 (a vLLM 0.23 CPU replica holds
~5 GB); the tiny model is 128 wide on 0.9.1 (vLLM 0.23's CPU attention refuses head_dim 16); SmolLM2 is cached per
stack; the SFT -> RL merge drops the trainer-only attention that verl 0.9.1 saves into the checkpoint's config.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from platforms import PROFILES, stacks, verl_selectors
from platforms.cli_errors import UsageError
from recipes.launch.handoffs.merger import forget_trainer_attention
from recipes.smoke import cli, commands
from recipes.smoke.commands import FULL, SmokeCommands
from recipes.smoke.learn import LEARN_TASK
from recipes.smoke.sabotage import REWARD_FILE, REWARD_SIGN

SHAPING = "reward_kwargs.shaping=none"


@pytest.mark.parametrize("name", ["0.6.1", "0.9.1"])
def test_the_learning_tasks_reward_goes_where_the_stacks_verl_reads_it(name: str, tmp_path: Path) -> None:
    """The stack is handed to the commands (issue 49), whatever this process's KIT_STACK: both in one process."""
    stack = stacks.get(name)
    key, ignored = stack.verl.reward_key, stack.verl.ignored_reward_key
    smoke = SmokeCommands(tmp_path, FULL, PROFILES["cpu"], stack, task=LEARN_TASK)
    argv = smoke.rl_command("http://x").argv
    assert f"{key}.{SHAPING}" in argv
    assert not [word for word in argv if word.startswith(f"{ignored}.")], argv
    assert REWARD_SIGN.rl_overrides(stack) == [f"{key}.path={REWARD_FILE}", f"{key}.name=compute_score"]
    assert smoke.rl_command("http://x").env["KIT_STACK"] == smoke.sft_command().env["KIT_STACK"] == name


def test_rl_on_cpu_runs_one_rank_on_091_only() -> None:
    assert "trainer.n_gpus_per_node=1" in verl_selectors.rl_overrides(True)
    assert verl_selectors.rl_overrides(False) == []
    current, reference = stacks.get("0.9.1"), stacks.get("0.6.1")
    assert "trainer.n_gpus_per_node=1" in PROFILES["cpu"].verl_overrides("rl", current)
    assert "trainer.n_gpus_per_node=1" not in PROFILES["cpu"].verl_overrides("rl", reference)
    assert not [o for o in PROFILES["cpu"].verl_overrides("sft", current) if o.startswith("trainer.n_gpus_per_node")]


def test_each_stack_keeps_its_own_smollm2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIT_SMOLLM2_DIR", raising=False)
    reference = commands.smollm2_dir(stacks.get("0.6.1"))
    current = commands.smollm2_dir(stacks.get("0.9.1"))
    assert reference == REPO_ROOT / "build" / "models" / "smollm2-135m-instruct"
    assert current == REPO_ROOT / "build" / "models" / "smollm2-135m-instruct-0.9.1"


def test_the_tiny_models_head_dim_per_stack() -> None:
    from recipes.smoke.tiny_model import NUM_HEADS

    assert stacks.get("0.6.1").tiny_hidden_size // NUM_HEADS == 16  # what the reference's numbers were measured on
    assert stacks.get("0.9.1").tiny_hidden_size // NUM_HEADS == 32  # vLLM 0.23 CPU_ATTN's smallest head size


def test_the_merge_drops_the_trainers_own_attention() -> None:
    from transformers import Qwen3Config

    config = Qwen3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    config._attn_implementation = "kit_packed_sdpa"  # what verl 0.9.1's engine saved into huggingface/config.json
    forget_trainer_attention(config)
    assert config._attn_implementation is None
    assert "kit_packed_sdpa" not in config.to_json_string()
    config._attn_implementation = "eager"  # a library attention the user chose stays
    forget_trainer_attention(config)
    assert config._attn_implementation == "eager"


def test_the_091_dry_run_prints_commands_that_run_on_091(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: ``smoke.sh --stack 0.9.1 --dry-run`` printed stage commands without the stack (KIT_STACK was this
    process's, so no `env` line named it): pasted into a fresh shell they ran as 0.6.1. Every stage's environment now
    shows KIT_STACK and the trainers' scripts get ``--stack 0.9.1``; the default stack's get no option."""
    for name, option in (("0.9.1", ["--stack", "0.9.1"]), ("0.6.1", [])):
        # the caller's KIT_STACK says 0.6.1 (restored after: the entry point exports the stack it serves); --stack wins
        monkeypatch.setenv("KIT_STACK", "0.6.1")
        out = tmp_path / name
        assert cli.main(["run", "--dry-run", "--platform", "cpu", "--fast", "--out", str(out), *option]) == 0
        text = capsys.readouterr().out
        sections = text.split("\n== ")[1:]
        assert sections and all(
            f"env KIT_STACK={name}" in section or "(environment as above)" in section for section in sections
        ), text
        trainers = [s for s in sections if s.startswith(("sft", "rl"))]
        assert len(trainers) == 2
        for section in trainers:
            assert f"_npu.sh {' '.join([*option, '--hw'])} cpu --scale smoke" in section, section
        merge = next(s for s in sections if s.startswith("merge"))
        assert f"--recipe qwen3_4b {' '.join([*option, '--hw'])} cpu" in merge, merge


def test_the_help_quotes_the_chosen_stacks_own_times() -> None:
    """Issue 49: ``smoke.sh --stack 0.9.1 --help`` quoted the reference's times only. Each stack's epilog quotes its
    own records, every figure one of the numbers of the record its paragraph names (tests/test_measurements.py's
    rule); a stack without records says the times are the reference's."""
    from test_measurements import help_disagreements

    from recipes.smoke.cli import build_run_parser
    from recipes.smoke.help_text import epilog

    # issue 51: both stacks measured in one run (learn_prewarm, fast_both_stacks); each stack's own latest record
    both = ("learn_both_stacks", "learn_prewarm", "fast_both_stacks")
    for name, records in (("0.6.1", (*both, "learn_speed")), ("0.9.1", (*both, "learn_shipped_091"))):
        text = build_run_parser(stacks.get(name)).format_help()
        assert help_disagreements(text, f"smoke.sh --stack {name} --help") == []
        missing = [record for record in records if f"docs/measurements/{record}.yaml" not in text]
        assert missing == [], f"smoke.sh --stack {name} --help names no {missing}"
    assert "learn_speed.yaml" not in epilog(stacks.get("0.9.1"))
    assert "learn_shipped_091.yaml" not in epilog(stacks.get("0.6.1"))
    unmeasured = dataclasses.replace(stacks.get("0.9.1"), name="0.10.0")
    assert "Not measured on stack 0.10.0; on the reference stack 0.6.1:" in epilog(unmeasured)


def test_the_sabotage_bench_runs_on_its_stack(tmp_path: Path) -> None:
    from recipes.smoke import bench_learn

    current = stacks.get("0.9.1")
    runs = {run.name: run for run in bench_learn.plan(tmp_path, 0, current)}
    assert all(run.argv[2:4] == ["--stack", "0.9.1"] for run in runs.values())
    reward = runs[REWARD_SIGN.name].argv
    assert f"{current.verl.reward_key}.path={REWARD_FILE}" in reward
    reference = bench_learn.plan(tmp_path, 0, stacks.get("0.6.1"))
    assert not any("--stack" in run.argv for run in reference)


def _speed_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_learn_speed", REPO_ROOT / "scripts" / "bench_learn_speed.py")
    assert spec and spec.loader
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    return speed


def test_the_speed_bench_takes_the_stacks_tree_and_series(tmp_path: Path) -> None:
    """scripts/bench_learn_speed.py read KIT_VERL_TREE from its environment; now its stack's tree and series. The
    previous settings' verl is each series less its old-log-prob skip (found by name: 0.6.1's 0030, 0.9.1's 0014,
    issue 51); a series without one has no previous run: one line before anything runs."""
    speed = _speed_bench()
    reference, current = stacks.get("0.6.1"), stacks.get("0.9.1")
    assert speed.previous_patch(reference) == next(reference.patch_dir.glob("0030-*.patch"))
    assert speed.previous_patch(current) == next(current.patch_dir.glob("0014-*.patch"))
    bare = dataclasses.replace(current, patch_subdir=os.path.relpath(tmp_path, REPO_ROOT))
    with pytest.raises(UsageError, match="stack 0.9.1's series .* has no patch named"):
        speed.previous_patch(bare)
    assert speed.command("current", Path("/o"), 0, current)[2:4] == ["--stack", "0.9.1"]
    assert "--stack" not in speed.command("current", Path("/o"), 0, reference)


def test_the_speed_bench_runs_every_stack_in_one_run(tmp_path: Path) -> None:
    """Issue 51: --all-stacks plans each stack's runs, the reference first, each under OUT/<stack>/; with --stack too
    it is refused in one line."""
    proc = subprocess.run(
        [sys.executable, "scripts/bench_learn_speed.py", "--all-stacks", "--dry-run", "--out", str(tmp_path)],
        cwd=REPO_ROOT, env=kit_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "0.6.1 previous",
        "0.6.1 current",
        "0.9.1 previous",
        "0.9.1 current",
    ]
    assert f"--out {tmp_path / '0.6.1' / 'current'} " in lines[1] and "--stack" not in lines[1]
    assert f"--stack 0.9.1 --learn --seed 0 --out {tmp_path / '0.9.1' / 'current'} " in lines[3]
    assert "0014-ppo-v1-trainer-skip-the-old-log-prob-pass" in lines[2] and "0030-" in lines[0]
    both = [sys.executable, "scripts/bench_learn_speed.py", "--all-stacks", "--stack", "0.9.1", "--dry-run"]
    refused = subprocess.run(both, cwd=REPO_ROOT, env=kit_env(), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "name the stacks twice" in refused.stderr, refused.stderr
