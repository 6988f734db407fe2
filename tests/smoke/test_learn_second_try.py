"""The learning check's second try (recipes/smoke/learn.py ``second_try_warranted``, recipes/smoke/pipeline.py
``Smoke._second_try``): a first try that learned short of the bar, both witnesses clean, runs RL once more from the
same SFT model with its training prompts reshuffled, and that try decides; nothing else earns one.

What would fail: no second try after CI's near miss (docs/measurements/learn_second_try.yaml); a second try for a
sabotage the records show (a broken weight sync or loss mask rises in accuracy but fails its witness, a flipped
reward falls); a third try; a second try in the first's prompt order; the first try's verdict lost from summary.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kit_testing import REPO_ROOT

from platforms import PROFILES
from platforms.stacks import CURRENT
from recipes.smoke import learn, mask_witness, sync_witness
from recipes.smoke.learn import LEARN, LEARN_TASK, ValPoint
from recipes.smoke.pipeline import Smoke
from recipes.smoke.report import Stage

RECORDS = REPO_ROOT / "docs" / "measurements"
CLEAN_GAPS = {1: 1.5e-06, 2: 1.3e-06, 3: 1.2e-06, 4: 1.1e-06}  # CI's near miss: learn_second_try.yaml
CLEAN_MASK = mask_witness.Reading(tool=25.7, tool_trained=0.0, trained=60.0, least=30.0)


def _curve(acc: tuple[float, float], tools: tuple[float, float], samples: int = 128) -> list[ValPoint]:
    return [ValPoint(step, samples, a, a, t, 2 * a - 1, 150.0) for step, a, t in zip((0, 4), acc, tools, strict=True)]


def _warranted(curve: list[ValPoint], gaps: dict[int, float], mask: mask_witness.Reading) -> bool:
    witness = sync_witness.judge(gaps)
    masked = mask_witness.judge(dict.fromkeys(gaps, mask))
    return learn.second_try_warranted(curve, learn.judge(curve, witness, masked), witness, masked)


def _numbers(name: str) -> dict[str, object]:
    return yaml.safe_load((RECORDS / name).read_text())["numbers"]


def _pair(text: object) -> tuple[float, float]:
    first, last = (float(x.rstrip("%")) / (100 if x.endswith("%") else 1) for x in str(text).split(" → "))
    return first, last


def _cis_near_misses() -> dict[str, list[ValPoint]]:
    """Every CI run the learning check failed (ci_history.yaml: ``failed run of <commit>, the <stack>'s val acc``),
    as a curve on today's 128 samples."""
    numbers = _numbers("ci_history.yaml")
    runs = {}
    for key, value in numbers.items():
        run = re.fullmatch(r"failed run of (\w+), the (.+)'s val acc", key)
        if run:
            tools = numbers[f"failed run of {run[1]}, the {run[2]}'s tool calls"]
            runs[f"{run[1]} {run[2]}"] = _curve(_pair(value), _pair(tools))
    return runs


def test_cis_near_misses_earn_a_second_try() -> None:
    runs = _cis_near_misses()
    assert {"6815cfb reference", "6abf5f3 current stack"} <= set(runs), sorted(runs)
    for name, curve in runs.items():
        assert not learn.judge(curve).ok, f"{name}: the record is a near miss, it fails the bar"
        assert _warranted(curve, CLEAN_GAPS, CLEAN_MASK), f"{name} earned no second try"


def _recorded_sabotages() -> list[tuple[str, list[ValPoint], dict[int, float], mask_witness.Reading]]:
    """Every sabotage run at 128 samples in learn_val_samples.yaml, with its witness readings as recorded (the weight
    sync's gap at step 2, the loss mask's tool share at step 1); tool calls rise in each, the case that could pass."""
    numbers = _numbers("learn_val_samples.yaml")
    found = []
    for key, value in numbers.items():
        run = re.fullmatch(r"(\w+) (weight-sync|reward-sign|loss-mask) val acc", key)
        if not run:
            continue
        stack, sabotage = run.groups()
        gaps, mask = dict(CLEAN_GAPS), CLEAN_MASK
        if sabotage == "weight-sync":
            gaps[2] = float(numbers[f"{stack} weight-sync gap at step 2"])
        if sabotage == "loss-mask":
            share = float(numbers[f"{stack} loss-mask tool share at step 1"])
            mask = mask_witness.Reading(tool=25.7, tool_trained=share * 60.0, trained=60.0, least=30.0)
        found.append((f"{stack} {sabotage}", _curve(_pair(value), (0.6, 0.9)), gaps, mask))
    return found


def test_no_recorded_sabotage_earns_a_second_try() -> None:
    sabotages = _recorded_sabotages()
    assert len(sabotages) == 6, [name for name, *_ in sabotages]  # three sabotages on each stack
    for name, curve, gaps, mask in sabotages:
        assert not learn.judge(curve).ok or name.endswith(("weight-sync", "loss-mask")), name
        assert not _warranted(curve, gaps, mask), f"{name} earned a second try"


@pytest.mark.parametrize(
    ("acc", "tools", "samples"),
    [
        ((0.65, 0.95), (0.67, 0.98), 128),  # learned: nothing to try again
        ((0.65, 0.60), (0.68, 0.90), 128),  # accuracy fell
        ((0.65, 0.77), (0.68, 0.68), 128),  # tool calls did not rise
        ((0.65, 0.77), (0.68, 0.78), 64),  # too few samples to judge at all
    ],
)
def test_nothing_else_earns_one(acc: tuple[float, float], tools: tuple[float, float], samples: int) -> None:
    assert not _warranted(_curve(acc, tools, samples), CLEAN_GAPS, CLEAN_MASK)


@pytest.mark.parametrize(
    ("extra", "override"),
    [
        ((), "data.seed=1"),
        (("data.seed=5",), "data.seed=6"),
        (("+data.seed=-2", "trainer.total_epochs=1"), "data.seed=-1"),
        (("data.seed=null",), "data.seed=1"),
    ],
)
def test_the_second_try_reshuffles_the_training_prompts(extra: tuple[str, ...], override: str) -> None:
    assert learn.second_try_override(extra) == override


# ------------------------------------------------------------------------------------- the pipeline's two tries


class _Tries(Smoke):
    """A learning check whose RL stage writes what a run with these accuracies leaves (validation dumps, a trainer
    log with both witnesses' readings): ``RESULTS`` by the training prompts' order (``data.seed``, None the first)."""

    RESULTS: dict[str | None, tuple[float, float]] = {}

    def stage_sandbox(self, st: Stage) -> None:
        return None

    def stage_eval(self, st: Stage) -> None:
        return None

    def stage_plots(self, st: Stage) -> None:
        return None

    def stage_rl(self, st: Stage) -> None:
        seed = next((word.split("=", 1)[1] for word in self.rl_extra if word.startswith("data.seed=")), None)
        after = self.RESULTS[seed]
        dumps = self.rl_dir / "val_generations"
        dumps.mkdir(parents=True)
        for step, acc in ((0, 0.65), (4, after[0])):
            tools = 0.68 if step == 0 else after[1]
            rows = [
                {"acc": i < round(acc * 128), "acc_strict": i < round(acc * 128), "used_tool": i < round(tools * 128)}
                for i in range(128)
            ]
            (dumps / f"{step}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        lines = [
            f"(TaskRunnerV1 pid=1) step:{step} - critic/score/mean:0.5 - training/rollout_probs_diff_mean:{gap} - "
            "reward_extra/tool_tokens/mean:25.7 - reward_extra/tool_tokens_trained/mean:0.0 - "
            "reward_extra/trained_tokens/mean:60.0 - reward_extra/trained_tokens/min:30.0"
            for step, gap in CLEAN_GAPS.items()
        ]
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / "rl.log").write_text("\n".join(lines) + "\n")


def _earlier(root: Path) -> Path:
    """An earlier run's data and merged SFT model (tiny files standing in), for ``--from-sft``."""
    for part in ("data", "sft/hf_merged", "sft/tensorboard"):
        (root / "earlier" / part).mkdir(parents=True)
    (root / "earlier" / "sft" / "hf_merged" / "model.safetensors").write_bytes(b"weights")
    return root / "earlier"


def _run(tmp_path: Path, results: dict[str | None, tuple[float, float]]) -> tuple[int, dict, Path]:
    _Tries.RESULTS = results
    smoke = _Tries(tmp_path / "run", LEARN, PROFILES["cpu"], CURRENT, task=LEARN_TASK, from_sft=_earlier(tmp_path))
    smoke.out.mkdir()
    code = smoke.run()
    return code, json.loads((smoke.out / "summary.json").read_text()), smoke.out


def test_a_near_miss_then_a_learned_try_passes_and_keeps_both(tmp_path: Path) -> None:
    code, summary, out = _run(tmp_path, {None: (0.77, 0.78), "1": (0.95, 0.98)})
    assert code == 0 and summary["ok"] and summary["learn_ok"] is True, summary["learn_verdict"]
    assert summary["tries"] == 2 and summary["val_acc_after"] == pytest.approx(122 / 128)
    first = summary["first_try"]
    assert first["learn_ok"] is False and "did NOT learn" in first["learn_verdict"] and first["out"] == str(out)
    learn_row = next(stage for stage in summary["stages"] if stage["name"] == "learn")
    assert (
        learn_row["metric"].startswith("try 1: val acc 0.65 -> 0.77")
        and "try 2: val acc 0.65 -> 0.95" in learn_row["metric"]
    )
    second = json.loads((out / learn.SECOND_TRY_DIR / "summary.json").read_text())
    assert second["from_sft"] == str(out) and second["learn_ok"] is True
    assert (out / "rl" / "val_generations" / "4.jsonl").is_file(), "the first try's files stay where they were"


def test_two_near_misses_fail_with_both_verdicts_and_no_third_try(tmp_path: Path) -> None:
    code, summary, out = _run(tmp_path, {None: (0.77, 0.78), "1": (0.78, 0.80)})
    assert code == 1 and summary["failed_stage"] == "learn" and summary["learn_ok"] is False
    error = next(stage for stage in summary["stages"] if stage["name"] == "learn")["error"]
    assert "try 1: val acc 0.65 -> 0.77" in error and "try 2: val acc 0.65 -> 0.78" in error, error
    assert not (out / learn.SECOND_TRY_DIR / learn.SECOND_TRY_DIR).exists(), "a second try never tries again"


def test_a_run_that_learned_runs_once(tmp_path: Path) -> None:
    code, summary, out = _run(tmp_path, {None: (0.95, 0.98)})
    assert code == 0 and "tries" not in summary and not (out / learn.SECOND_TRY_DIR).exists()


def test_the_override_is_a_key_of_the_reference_rl_config() -> None:
    """Hydra's struct rule refuses a key the config lacks: ``data.seed`` is verl 0.6.1's (tests/stack091/
    test_stack_rules_091.py checks 0.9.1's)."""
    from platforms.stacks import REFERENCE
    from recipes.smoke.commands import check_rl_overrides

    check_rl_overrides(PROFILES["cpu"], REFERENCE, [learn.second_try_override(())])


def test_a_second_try_that_stops_early_fails_the_check_naming_its_stage(tmp_path: Path) -> None:
    code, summary, out = _run(tmp_path, {None: (0.77, 0.78)})  # the second try's RL stage finds no result: it fails
    assert code == 1 and summary["learn_ok"] is False and summary["tries"] == 2
    error = next(stage for stage in summary["stages"] if stage["name"] == "learn")["error"]
    assert "try 2 failed at rl" in error and str(out / learn.SECOND_TRY_DIR) in error, error
    assert summary["val_acc_after"] == pytest.approx(99 / 128), "the first try's figures stand"
