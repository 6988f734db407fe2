"""Score a Hugging Face model (scripts/eval_model.sh, recipes/launch/handoffs/eval_model.py), without a run.

The real evaluation (the launcher's validation-only run on vLLM CPU, the sandbox, retool-eval) runs end to end on
a merged RL checkpoint in tests/cpu/test_cpu_rl.py (test_rl_checkpoint_merges_and_scores). Here: the dry run goes
through the launcher with the validation-only overrides, and every bad input ends in one line before anything runs.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from kit_testing import interpreter_stack, run_kit_script

from platforms.cli_errors import EXIT_FAILED, EXIT_USAGE
from recipes.launch.handoffs import eval_model

#: The stack this interpreter's verl serves, as an entry point resolves it without --stack or KIT_STACK.
STACK = interpreter_stack()  # the stack this venv's verl serves


def test_dry_run_plans_a_validation_only_run_through_the_launcher(
    launch_env: dict[str, str], tmp_path: Path, make_model: Callable[..., Path]
) -> None:
    model = make_model(tmp_path / "hf_step_130")
    launch_env["CKPT_ROOT"] = str(tmp_path / "ckpt")
    launch_env["VAL_FILE"] = str(tmp_path / "aime.parquet")
    args = ["--hw", "a3", "--model", str(model), "--name", "rl_130", "--n", "4", "--dry-run", "--no-path-check"]
    proc = run_kit_script("eval_model.sh", [*args, "trainer.logger=[console]"], launch_env, 120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = tmp_path / "ckpt" / "eval" / "rl_130"
    lines = [line.strip().rstrip(" \\") for line in proc.stdout.splitlines()]
    for override in (
        "--config-name retool_qwen3_4b_dapo",
        f"actor_rollout_ref.model.path={model}",
        "trainer.val_only=True",
        "trainer.val_before_train=True",
        "trainer.resume_mode=disable",
        "trainer.save_freq=-1",
        f"trainer.validation_data_dir={folder / 'val_generations'}",
        f"trainer.default_local_dir={folder}",
        f"data.val_files={tmp_path / 'aime.parquet'}",
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "'trainer.logger=[console]'",  # the user's override reaches verl (quoted by the launcher)
    ):
        assert override in lines, override
    assert "dry run OK: nothing was started (no Ray, no torchrun, no model loaded)" in lines
    then = f"then: retool-eval {folder / 'val_generations'} --data={tmp_path / 'aime.parquet'} --tokenizer {model}"
    assert any(line.startswith(then) for line in lines), proc.stdout[-2000:]
    assert lines[-1] == f"report: {folder / 'eval.md'} (dry run: nothing evaluated)"
    assert not folder.exists()


def _main(*argv: str) -> int:
    return eval_model.main(["--hw", "a3", "--dry-run", "--no-path-check", *argv])


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--model", "{tmp}/nope", "--name", "x"], EXIT_USAGE, "--model {tmp}/nope: no such folder"),
        (["--model", "{tmp}", "--name", "x"], EXIT_USAGE, "--model {tmp}: no config.json, not a Hugging Face model"),
        (["--model", "{model}", "--name", "a/b"], EXIT_USAGE, "--name 'a/b': use letters, digits"),
        (["--model", "{model}", "--name", "x", "trainer.val_only=False"], EXIT_USAGE, "trainer.val_only: set by this"),
        (
            ["--model", "{model}", "--name", "x", "--n", "2", "actor_rollout_ref.rollout.val_kwargs.n=3"],
            EXIT_USAGE,
            "--n and actor_rollout_ref.rollout.val_kwargs.n: give one",
        ),
        (["--model", "{model}", "--name", "x", "nokey"], EXIT_USAGE, "'nokey' is not a Hydra override"),
        (["--model", "{model}", "--name", "old"], EXIT_FAILED, "eval/old already holds an evaluation (eval.md)"),
        (["--recipe", "qwen3_8b", "--model", "{model}", "--name", "x"], EXIT_USAGE, "--recipe: unknown recipe"),
    ],
)
def test_bad_inputs_end_in_one_line_before_the_launcher(
    launch_environ: Path,
    tmp_path: Path,
    make_model: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    message: str,
) -> None:
    model = make_model(tmp_path / "model")
    monkeypatch.setenv("CKPT_ROOT", str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / "eval" / "old").mkdir(parents=True)
    (tmp_path / "ckpt" / "eval" / "old" / "eval.md").write_text("an earlier score")
    launched = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: launched.append(a))
    assert _main(*(word.format(tmp=tmp_path, model=model) for word in argv)) == code
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and len(err.strip().splitlines()) == 1, err
    assert not launched, "nothing may start on a bad input"
    assert (tmp_path / "ckpt" / "eval" / "old" / "eval.md").read_text() == "an earlier score"


def test_force_clears_the_earlier_evaluation_before_the_run(
    launch_environ: Path, tmp_path: Path, make_model: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed re-run under the same label must not leave the earlier report looking like the new one's."""
    folder = tmp_path / "eval" / "sft"
    (folder / "val_generations").mkdir(parents=True)
    for name in ("eval.md", "eval.json", "val_generations/0.jsonl"):
        (folder / name).write_text("earlier")
    monkeypatch.setenv("CKPT_ROOT", str(tmp_path))
    args = argparse.Namespace(
        recipe="qwen3_4b", hw="a3", model=str(make_model(tmp_path / "m")), name="sft", n=None, force=True, overrides=[]
    )
    evaluation = eval_model.plan(args, STACK, {"CKPT_ROOT": str(tmp_path), "HOME": str(tmp_path)})
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1))
    with pytest.raises(eval_model.EvalError, match=r"the validation run failed \(exit 1\)"):
        eval_model.run(evaluation, force=True)
    assert not any(folder.rglob("*.*")), sorted(folder.rglob("*"))


def test_the_val_files_given_as_an_override_are_the_reports_data(
    launch_environ: Path, tmp_path: Path, make_model: Callable[..., Path]
) -> None:
    args = argparse.Namespace(
        recipe="qwen2.5_32b",
        hw="a3",
        model=str(make_model(tmp_path / "m")),
        name="base",
        n=30,
        force=False,
        overrides=["data.val_files=[/d/aime_2025.parquet,/d/aime_2024.parquet]"],
    )
    evaluation = eval_model.plan(args, STACK, {"HOME": str(tmp_path)})
    assert evaluation.rl.name == "qwen2.5_32b_dapo"
    assert evaluation.val_files == ["/d/aime_2025.parquet", "/d/aime_2024.parquet"]
    assert "--data=/d/aime_2024.parquet" in evaluation.eval_argv()
    assert [o for o in evaluation.overrides if o.startswith("data.val_files")] == args.overrides  # given once
    assert evaluation.folder == tmp_path / "checkpoints" / "retool" / "eval" / "base"
