"""``smoke.sh --from-sft DIR`` (what the sensitivity bench's sabotage runs use) and the sabotage switches themselves,
without training.

What would fail: a run that starts from an earlier one's SFT but still runs data/SFT/merge, or links instead of
copying (a later run could change the earlier one's model), or accepts a source without a finished merge, a source of
the other task, or folders that nest (``--force`` would wipe the source); a sabotage switch that acts while its
variable is unset, does not act when set, or leaves no line in the log.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from kit_testing import kit_env

from platforms import PROFILES
from platforms.cli_errors import UsageError
from platforms.stacks import REFERENCE
from recipes.smoke import cli, sabotage
from recipes.smoke.commands import FAST, SMOKE_TASK
from recipes.smoke.learn import LEARN, LEARN_TASK
from recipes.smoke.pipeline import Smoke
from recipes.smoke.report import Stage, reusable_sft_problem
from recipes.smoke.supervisor import StageError

SFT_STAGES = ("model", "data", "sft", "merge")  # the learning check has no tool-call check


def _earlier_run(root: Path, task: str = "learn", failed: str | None = None) -> Path:
    """An earlier run's folder as the shipped learning check leaves it (tiny files standing in for the model)."""
    run = root / "earlier"
    for part in ("data/src", "sft/hf_merged", "sft/tensorboard", "sft/ckpt"):
        (run / part).mkdir(parents=True)
    (run / "data" / "learn_train.parquet").write_bytes(b"PAR1")
    (run / "data" / "src" / "learn_train.jsonl").write_text("{}\n")
    (run / "sft" / "hf_merged" / "model.safetensors").write_bytes(b"weights")
    (run / "sft" / "hf_merged" / "config.json").write_text("{}")
    (run / "sft" / "tensorboard" / "events.out").write_bytes(b"tb")
    stages = [{"name": n, "status": "failed" if n == failed else "ok"} for n in SFT_STAGES]
    (run / "summary.json").write_text(json.dumps({"task": task, "stages": stages}))
    return run


def test_a_source_needs_a_finished_merge_of_the_same_task(tmp_path: Path) -> None:
    assert "no summary.json" in reusable_sft_problem(tmp_path, "learn")
    run = _earlier_run(tmp_path)
    assert reusable_sft_problem(run, "learn") is None
    assert "ran the 'learn' task, this run the 'smoke' one" in reusable_sft_problem(run, "smoke")
    failed = _earlier_run(tmp_path / "b", failed="merge")
    assert "stage merge not ok there" in reusable_sft_problem(failed, "learn")
    (run / "summary.json").write_text("{not json")
    assert "unreadable" in reusable_sft_problem(run, "learn")


def test_the_command_line_refuses_nested_folders_and_a_missing_source(tmp_path: Path) -> None:
    run = _earlier_run(tmp_path)
    assert cli.check_from_sft(None, tmp_path / "new", "learn") is None
    assert cli.check_from_sft(run, tmp_path / "new", "learn") == run.resolve()
    for out in (run, run / "inside", tmp_path):
        with pytest.raises(UsageError, match="nest: the earlier run must stay as it is"):
            cli.check_from_sft(run, out.resolve(), "learn")
    with pytest.raises(UsageError, match="no such folder"):
        cli.check_from_sft(tmp_path / "missing", tmp_path / "new", "learn")
    proc = subprocess.run(
        # --fast: the pipeline check's task, so the earlier learning-check run cannot seed it
        [
            sys.executable,
            "-m",
            "recipes.smoke",
            "check-args",
            "--fast",
            "--from-sft",
            str(run),
            "--out",
            str(tmp_path / "n"),
        ],
        capture_output=True,
        text=True,
        env=kit_env(),
        timeout=60,
    )
    assert proc.returncode == 2 and "this run the 'smoke' one" in proc.stderr, proc.stderr


def _smoke(tmp_path: Path, source: Path) -> Smoke:
    return Smoke(tmp_path / "new", LEARN, PROFILES["cpu"], REFERENCE, task=LEARN_TASK, from_sft=source)


def test_from_sft_copies_the_earlier_runs_files_and_skips_its_stages(tmp_path: Path) -> None:
    source = _earlier_run(tmp_path)
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    smoke = _smoke(tmp_path, source)
    assert [name for name, _ in smoke.steps()] == ["reuse", "sandbox", "rl", "eval", "plots", "learn"]
    assert [cmd.stage for cmd in smoke.commands()] == ["sandbox", "rl", "eval", "plots"]
    for name in ("sandbox", "rl", "eval", "plots", "learn"):  # the stages after reuse, stubbed: no training here
        setattr(smoke, f"stage_{name}", lambda st: None)
    smoke.out.mkdir()
    assert smoke.run() == 0
    summary = json.loads((smoke.out / "summary.json").read_text())
    assert summary["from_sft"] == str(source) and summary["ok"]
    assert [stage["name"] for stage in summary["stages"]] == ["reuse", "sandbox", "rl", "eval", "plots", "learn"]
    assert "copied" in summary["stages"][0]["metric"]
    merged = smoke.out / "sft" / "hf_merged" / "model.safetensors"
    assert merged.read_bytes() == b"weights" and not merged.is_symlink()
    assert (smoke.out / "data" / "learn_train.parquet").is_file() and not (smoke.out / "sft" / "ckpt").exists()
    assert smoke.rl_command("http://x").env["MODEL_PATH"] == str(smoke.out / "sft" / "hf_merged")
    merged.write_bytes(b"changed by a later run")
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before, "the earlier run is untouched"
    assert reusable_sft_problem(smoke.out, "learn") is None, "a run started --from-sft can seed another"


def test_from_sft_fails_its_stage_on_a_source_without_a_model(tmp_path: Path) -> None:
    source = _earlier_run(tmp_path)
    (source / "sft" / "hf_merged" / "model.safetensors").unlink()
    smoke = _smoke(tmp_path, source)
    smoke.out.mkdir()
    with pytest.raises(StageError, match="no \\*.safetensors"):
        smoke.stage_reuse(Stage("reuse"))


# --------------------------------------------------------------------------------------- the switches


def _hooks_installed(**env: str) -> bool:
    code = (
        "import sys; import recipes.smoke.sabotage.hooks as h; "
        "print(any(isinstance(f, h._PatchOnImport) for f in sys.meta_path))"
    )
    clean = {k: v for k, v in kit_env().items() if k not in sabotage.SWITCHES}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**clean, **env}, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip() == "True"


def test_the_switches_are_off_unless_their_variables_are_set() -> None:
    assert not _hooks_installed()
    assert not _hooks_installed(KIT_TEST_WEIGHT_SYNC="all", KIT_TEST_LOSS_MASK="")
    assert _hooks_installed(KIT_TEST_WEIGHT_SYNC="first-only")
    assert _hooks_installed(KIT_TEST_LOSS_MASK="tool-tokens")


def test_the_weight_sync_switch_passes_only_the_first_update(capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.smoke.sabotage import hooks

    class Rollout:
        def __init__(self) -> None:
            self.applied: list[str] = []

        async def update_weights(self, weights, **kwargs):
            self.applied.append(weights)

    for module, name in hooks.ROLLOUTS.items():  # 0.6.1's vLLMAsyncRollout, 0.9.1's ServerAdapter
        cls = type(name, (Rollout,), {})
        hooks._sync_first_only(types.SimpleNamespace(**{name: cls}))
        rollout = cls()
        for weights in ("initial", "step 1", "step 2"):
            asyncio.run(rollout.update_weights(weights))
        assert rollout.applied == ["initial"], module
        out = capsys.readouterr().out
        assert out.count(sabotage.WEIGHT_SYNC.marker) == 2 and "update 3 skipped" in out


def test_the_weight_sync_switch_targets_the_installed_verls_rollout() -> None:
    """Issue 51: the class the switch patches exists, with ``update_weights``, in this venv's verl (0.9.1 has no
    vllm_rollout_spmd: a switch aimed only there never acted on the current stack)."""
    import importlib
    import importlib.util

    from recipes.smoke.sabotage import hooks

    found = [(m, n) for m, n in hooks.ROLLOUTS.items() if importlib.util.find_spec(m) is not None]
    assert found, hooks.ROLLOUTS
    for module, name in found:
        assert callable(getattr(getattr(importlib.import_module(module), name), "update_weights", None)), module


def test_the_loss_mask_switch_trains_on_tool_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    from recipes.smoke.sabotage import hooks

    class Loop:
        async def _handle_processing_tools_state(self, agent_data):
            agent_data.response_mask += [0, 0, 0]  # what verl appends for the tool's response
            return "next"

    hooks._mask_tool_tokens(types.SimpleNamespace(ToolAgentLoop=Loop))
    data = types.SimpleNamespace(response_mask=[1, 1])
    assert asyncio.run(Loop()._handle_processing_tools_state(data)) == "next"
    assert asyncio.run(Loop()._handle_processing_tools_state(data)) == "next"
    assert data.response_mask == [1] * 8
    assert capsys.readouterr().out.count(sabotage.LOSS_MASK.marker) == 1, "announced once per process"


def test_the_flipped_reward_negates_the_score_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from recipes.smoke.sabotage import reward

    monkeypatch.setattr(reward, "kit_compute_score", lambda *a, **k: {"score": 1.0, "acc": True, "used_tool": True})
    monkeypatch.setattr(reward, "_announced", [])
    assert reward.compute_score("src", "answer", "7", shaping="none") == {"score": -1.0, "acc": True, "used_tool": True}
    reward.compute_score("src", "answer", "7")
    assert capsys.readouterr().out.count(sabotage.REWARD_SIGN.marker) == 1
    assert os.path.samefile(reward.__file__, sabotage.REWARD_FILE)


def test_the_learning_check_has_no_tool_call_check_stage(tmp_path: Path) -> None:
    """Issue 51: the learning check's validation before RL measures the SFT model's tool-call rate on all its held-out
    prompts, so the 16-prompt HF sampling stage is left out there; the pipeline check on the tiny model keeps it."""
    learn = Smoke(tmp_path / "learn", LEARN, PROFILES["cpu"], REFERENCE, task=LEARN_TASK)
    names = [name for name, _ in learn.steps()]
    assert names == ["model", "data", "sft", "merge", "sandbox", "rl", "eval", "plots", "learn"]
    fast = Smoke(tmp_path / "fast", FAST, PROFILES["cpu"], REFERENCE, task=SMOKE_TASK)
    assert "tool-call check" in [name for name, _ in fast.steps()]
