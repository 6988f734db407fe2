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


def _warranted(
    curve: list[ValPoint],
    gaps: dict[int, float],
    mask: mask_witness.Reading,
    training: dict[int, float] | None = None,
) -> bool:
    witness = sync_witness.judge(gaps)
    masked = mask_witness.judge(dict.fromkeys(gaps, mask))
    return learn.second_try_warranted(curve, learn.judge(curve, witness, masked), witness, masked, training)


def _by_step(text: object) -> dict[int, float]:
    """A record's ``training acc by step`` (``0.69 0.91 0.97 0.94``) as the pipeline reads it from the log."""
    return {step: float(acc) for step, acc in enumerate(str(text).split(), start=1)}


def _numbers(name: str) -> dict[str, object]:
    return yaml.safe_load((RECORDS / name).read_text())["numbers"]


def _pair(text: object) -> tuple[float, float]:
    first, last = (float(x.rstrip("%")) / (100 if x.endswith("%") else 1) for x in str(text).split(" → "))
    return first, last


def _cis_failed_checks() -> dict[str, tuple[list[ValPoint], dict[int, float] | None]]:
    """Every CI run (or fresh-clone replica of one) whose learning check failed, in ci_history.yaml (``failed run
    of <commit>, the <stack>'s val acc``, ``fresh-clone Xeon run of ...``), as a curve on today's 128 samples, with
    its training rollouts' accuracy by step where recorded."""
    numbers = _numbers("ci_history.yaml")
    runs = {}
    for key, value in numbers.items():
        run = re.fullmatch(r"((?:failed|fresh-clone Xeon) run of \w+), the (.+)'s val acc", key)
        if run:
            tools = numbers[f"{run[1]}, the {run[2]}'s tool calls"]
            training = numbers.get(f"{run[1]}, the {run[2]}'s training acc by step")
            name = f"{run[1].split()[-1]} {run[2]}"
            runs[name] = (_curve(_pair(value), _pair(tools)), _by_step(training) if training else None)
    return runs


def test_cis_failed_learning_checks_earn_a_second_try() -> None:
    """Each learning check CI failed with its witnesses clean: two near misses (accuracy rose short of the bar) and
    the current stack's collapse after its last update (0.66 -> 0.00, its training rollouts at 0.94)."""
    runs = _cis_failed_checks()
    assert {"6815cfb reference", "6abf5f3 current stack", "89e829f current stack"} <= set(runs), sorted(runs)
    for name, (curve, training) in runs.items():
        assert not learn.judge(curve).ok, f"{name}: the record is a failed check, it fails the bar"
        assert _warranted(curve, CLEAN_GAPS, CLEAN_MASK, training), f"{name} earned no second try"


def _either(numbers: dict[str, object], *keys: str) -> object:
    """The value of the first of ``keys`` the record has (the records name a reading in two ways)."""
    return next(numbers[key] for key in keys if key in numbers)


def _recorded_sabotages() -> list[tuple[str, list[ValPoint], dict[int, float], mask_witness.Reading, dict | None]]:
    """Every sabotage run at 128 samples: seed 0's in learn_val_samples.yaml, seeds 1 and 2 in bench_seeds_128*.yaml
    with their training rollouts' accuracy by step, each with its witness readings as recorded (the weight sync's gap
    at step 2, the loss mask's tool share at step 1); tool calls rise in each, the case that could pass."""
    found = []
    for record in ("learn_val_samples.yaml", "bench_seeds_128.yaml", "bench_seeds_128_seed2.yaml"):
        numbers = _numbers(record)
        for key, value in numbers.items():
            run = re.fullmatch(r"(.+) (weight-sync|reward-sign|loss-mask) val acc", key)
            if not run:
                continue
            name, sabotage = run.groups()
            gaps, mask = dict(CLEAN_GAPS), CLEAN_MASK
            if sabotage == "weight-sync":  # learn_val_samples.yaml's words, else the bench's
                gaps[2] = float(
                    _either(numbers, f"{name} weight-sync gap at step 2", f"{name} weight-sync sync gap step 2")
                )
            if sabotage == "loss-mask":
                share = float(
                    _either(numbers, f"{name} loss-mask tool share at step 1", f"{name} loss-mask tool share step 1")
                )
                mask = mask_witness.Reading(tool=25.7, tool_trained=share * 60.0, trained=60.0, least=30.0)
            training = numbers.get(f"{name} {sabotage} training acc by step")
            curve = _curve(_pair(value), (0.6, 0.9))
            found.append((f"{name} {sabotage}", curve, gaps, mask, _by_step(training) if training else None))
    return found


def test_no_recorded_sabotage_earns_a_second_try() -> None:
    sabotages = _recorded_sabotages()
    assert len(sabotages) == 18, [name for name, *_ in sabotages]  # three sabotages, three seeds, two stacks
    assert sum(training is not None for *_, training in sabotages) == 12, "seeds 1 and 2 record the training acc"
    for name, curve, gaps, mask, training in sabotages:
        assert not learn.judge(curve).ok or name.endswith(("weight-sync", "loss-mask")), name
        assert not _warranted(curve, gaps, mask, training), f"{name} earned a second try"


def test_a_flipped_reward_lowers_the_training_accuracy_it_is_judged_by() -> None:
    """The reward-sign sabotage trains on a negated score, but the training accuracy is the answers' truth: it falls
    on every recorded seed, so a collapsed validation after it earns no second try; the shipped runs' rises clear
    the bar (the loss mask's may too: its witness decides)."""
    for name, _, _, _, training in _recorded_sabotages():
        if training is not None and name.endswith("reward-sign"):
            assert not learn.training_cleared_the_bar(training) and training[4] < training[1], name
    for record, seed in (("bench_seeds_128.yaml", 1), ("bench_seeds_128_seed2.yaml", 2)):
        for stack in ("0.6.1", "0.9.1"):
            shipped = _by_step(_numbers(record)[f"{stack} seed {seed} shipped training acc by step"])
            assert learn.training_cleared_the_bar(shipped), (record, stack, shipped)


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


COLLAPSE = ((0.66, 0.00), (0.67, 0.00))  # the replica of 89e829f: validation after the last update (ci_history.yaml)


@pytest.mark.parametrize(
    ("training", "warranted"),
    [
        ({1: 0.69, 2: 0.91, 3: 0.97, 4: 0.94}, True),  # the replica's training rollouts: they learned
        ({1: 0.50, 2: 0.60, 3: 0.70, 4: 0.74}, False),  # rose, short of the bar from 0.50 (0.75)
        ({1: 0.53, 2: 0.00, 3: 0.00, 4: 0.00}, False),  # fell: a flipped reward's
        ({4: 0.94}, False),  # one step: nothing to compare
        ({}, False),  # no training accuracy in the log
    ],
)
def test_a_collapse_earns_one_only_when_the_training_rollouts_learned(
    training: dict[int, float], warranted: bool
) -> None:
    curve = _curve(*COLLAPSE)
    assert _warranted(curve, CLEAN_GAPS, CLEAN_MASK, training) is warranted
    stale = {**CLEAN_GAPS, 2: 1.3e-02}  # a weight sync that broke: its witness fails, whatever the rollouts did
    assert not _warranted(curve, stale, CLEAN_MASK, {1: 0.69, 2: 0.91, 3: 0.97, 4: 0.94})


def test_the_training_accuracy_is_read_from_the_step_metrics() -> None:
    from recipes.smoke.progress import step_metrics

    log = "".join(
        f"(TaskRunner pid=1) step:{step} - critic/score/mean:-0.5 - reward_extra/acc/mean:{acc}\n"
        for step, acc in ((1, 0.6875), (2, 0.90625))
    )
    assert learn.training_accuracy(step_metrics(log)) == {1: 0.6875, 2: 0.90625}
    assert learn.training_accuracy(step_metrics("step:1 - critic/score/mean:0.5\n")) == {}


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
    TRAINING: dict[str | None, tuple[float, ...]] = {}  # the training rollouts' accuracy by step; flat if not given

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
        training = self.TRAINING.get(seed, (0.5,) * len(CLEAN_GAPS))
        lines = [
            f"(TaskRunnerV1 pid=1) step:{step} - critic/score/mean:0.5 - training/rollout_probs_diff_mean:{gap} - "
            f"reward_extra/acc/mean:{acc} - reward_extra/tool_tokens/mean:25.7 - "
            "reward_extra/tool_tokens_trained/mean:0.0 - "
            "reward_extra/trained_tokens/mean:60.0 - reward_extra/trained_tokens/min:30.0"
            for (step, gap), acc in zip(CLEAN_GAPS.items(), training, strict=True)
        ]
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.logs / "rl.log").write_text("\n".join(lines) + "\n")


def _earlier(root: Path) -> Path:
    """An earlier run's data and merged SFT model (tiny files standing in), for ``--from-sft``."""
    for part in ("data", "sft/hf_merged", "sft/tensorboard"):
        (root / "earlier" / part).mkdir(parents=True)
    (root / "earlier" / "sft" / "hf_merged" / "model.safetensors").write_bytes(b"weights")
    return root / "earlier"


def _run(
    tmp_path: Path, results: dict[str | None, tuple[float, float]], training: dict | None = None
) -> tuple[int, dict, Path]:
    _Tries.RESULTS, _Tries.TRAINING = results, training or {}
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


def test_a_collapse_after_rollouts_that_learned_gets_a_second_try_which_decides(tmp_path: Path) -> None:
    """The replica of 89e829f: validation 0.66 -> 0.00 after the last update, the training rollouts 0.69 -> 0.94;
    the second try learns and passes, summary.json keeping the first try's training accuracy."""
    code, summary, out = _run(tmp_path, {None: (0.0, 0.0), "1": (0.95, 0.98)}, {None: (0.69, 0.91, 0.97, 0.94)})
    assert code == 0 and summary["learn_ok"] is True and summary["tries"] == 2, summary["learn_verdict"]
    assert summary["first_try"]["training_acc"] == {"1": 0.69, "2": 0.91, "3": 0.97, "4": 0.94}
    assert summary["first_try"]["val_acc_after"] == 0.0


def test_a_collapse_after_rollouts_that_did_not_learn_fails_at_once(tmp_path: Path) -> None:
    code, summary, out = _run(tmp_path, {None: (0.0, 0.0)}, {None: (0.53, 0.0, 0.0, 0.0)})
    assert code == 1 and summary["learn_ok"] is False and "tries" not in summary
    assert summary["training_acc"] == {"1": 0.53, "2": 0.0, "3": 0.0, "4": 0.0}
    assert not (out / learn.SECOND_TRY_DIR).exists()


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
