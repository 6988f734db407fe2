"""The learning check's task and verdict, without training: what the data teach and how the curve is judged."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from recipes.smoke import learn, learn_data


def test_the_task_needs_the_tool_and_splits_never_overlap() -> None:
    sft, train, val = learn_data.split(7, learn_data.Sizes())
    assert not ({p.text for p in sft} & {p.text for p in train}) and not (
        {p.text for p in train} & {p.text for p in val}
    )
    assert not {p.text for p in sft} & {p.text for p in val}
    assert len(val) >= learn.MIN_VAL_SAMPLES
    # the answer is the exact product, and a guess (what the no-tool SFT rows teach) is never it
    problem = learn_data.Problem(4831, 2917)
    assert problem.answer == str(4831 * 2917) and problem.code == "print(4831 * 2917)"
    rng = random.Random(0)
    guesses = {problem.guess(rng) for _ in range(50)}
    assert problem.answer not in guesses and {len(g) for g in guesses} == {len(problem.answer)}
    assert all(g[: -learn_data.GUESSED_DIGITS] == problem.answer[: -learn_data.GUESSED_DIGITS] for g in guesses)


def test_sft_mix_and_determinism() -> None:
    sizes = learn_data.Sizes()
    rows = learn_data.build(3, sizes)
    assert rows == learn_data.build(3, sizes)  # a seed gives the same data
    assert rows != learn_data.build(4, sizes)
    sft = rows["learn_sft.jsonl"]
    with_tool = [r for r in sft if "<code>" in r["messages"][1]["content"]]
    assert len(with_tool) == round(sizes.tool_share * len(sft))
    # the tool rows answer right, the others wrong: RL has tool use left to raise
    for row in sft:
        question, answer = row["messages"][0]["content"], row["messages"][1]["content"]
        a, b = (int(x) for x in question.split("What is ")[1].split("?")[0].split(" * "))
        assert (f"\\boxed{{{a * b}}}" in answer) is ("<code>" in answer), answer
    assert len(rows["learn_val.jsonl"]) == sizes.val and len(rows["learn_train.jsonl"]) == sizes.train


def test_more_validation_rows_leave_a_seeds_training_data_and_first_validation_rows_as_they_were() -> None:
    """The validation set grew from 64 to 128 problems (stop 60's CI): each seed's SFT and RL-train problems, so its
    SFT model and its RL, stay the ones every recorded run trained on, and its first 64 validation problems too."""
    for seed in range(3):
        sft, train, val = learn_data.split(seed, learn_data.Sizes())
        old = learn_data.split(seed, learn_data.Sizes(val=64))
        assert (sft, train, val[:64]) == old and len(val) == 128


def _dump(folder: Path, step: int, acc: list[bool], tool: list[bool]) -> None:
    rows = [
        {"acc": a, "acc_strict": a, "used_tool": t, "score": 1.0 if a else -1.0, "output": "x" * 10}
        for a, t in zip(acc, tool, strict=True)
    ]
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(
    ("before", "after", "ok"),
    [
        (0.20, 0.40, True),  # +0.20 and 2x
        (0.20, 0.30, False),  # +0.10: not enough
        (0.40, 0.56, False),  # +0.16 but 1.4x
        (0.40, 0.20, False),  # worse
        (0.62, 0.88, True),  # x1.5 (0.93) asks more than half the errors gone (0.81): seed 1 on 0.9.1
        (0.70, 0.84, False),  # x1.5 is 1.05: half the errors gone is 0.85
        (0.59, 0.78, False),  # half the errors gone (0.795) is the lower bar, and missed
    ],
)
def test_verdict_needs_both_targets(tmp_path: Path, before: float, after: float, ok: bool) -> None:
    n = 200  # over the check's minimum (learn.MIN_VAL_SAMPLES)
    _dump(tmp_path, 0, [i < round(before * n) for i in range(n)], [i < 50 for i in range(n)])
    _dump(tmp_path, 10, [i < round(after * n) for i in range(n)], [i < 160 for i in range(n)])
    curve = learn.read_curve(tmp_path)
    verdict = learn.judge(curve)
    assert verdict.ok is ok, verdict.line
    assert ("did NOT learn" in verdict.line) is not ok and "\n" not in verdict.line
    fields = learn.summary_fields(curve, verdict)
    assert fields["val_acc_before"] == pytest.approx(before) and fields["val_acc_after"] == pytest.approx(after)
    assert (fields["tool_call_rate_before"], fields["tool_call_rate_after"], fields["rl_steps"]) == (0.25, 0.8, 10)


#: The first validation accuracies the benches saw, rounded out (0.44-0.66: docs/measurements/bench_seeds.yaml).
FIRST_ACCURACIES = [round(0.40 + 0.01 * i, 2) for i in range(31)]


@pytest.mark.parametrize("before", FIRST_ACCURACIES)
def test_a_policy_rl_left_unchanged_clears_the_bar_in_under_one_run_in_a_hundred(before: float) -> None:
    """Two validations of one policy differ by chance: sd sqrt(2 p (1 - p) / n) on n samples each. The bar must sit
    2.33 of them above the first (one-sided 1%) wherever a first validation lands, or a run whose RL did nothing
    passes now and then, and the margin a shipped run has shrinks to noise. At 64 samples it was 1.85 at 0.70 (and
    CI's run of stop 60, which learned 0.58 -> 0.78, missed 0.79 by one sample)."""
    samples = learn_data.Sizes().val
    assert learn.MIN_VAL_SAMPLES == samples  # the verdict asks for what the data hold
    noise = math.sqrt(2 * before * (1 - before) / samples)
    assert (learn.needed_acc(before) - before) / noise >= 2.33, (before, samples)


def test_verdict_refuses_too_few_samples_or_no_baseline(tmp_path: Path) -> None:
    _dump(tmp_path, 0, [False] * 10, [False] * 10)
    _dump(tmp_path, 5, [True] * 10, [True] * 10)
    assert f"at least {learn.MIN_VAL_SAMPLES}" in learn.judge(learn.read_curve(tmp_path)).line
    (tmp_path / "0.jsonl").unlink()
    assert "before training" in learn.judge(learn.read_curve(tmp_path)).line


def test_a_curve_that_learned_on_a_stale_rollout_did_not_learn(tmp_path: Path) -> None:
    """Issue 51: accuracy rose on a rollout that kept the SFT weights; the weight sync's witness fails the verdict."""
    from recipes.smoke import sync_witness

    n = 200  # over the check's minimum (learn.MIN_VAL_SAMPLES)
    _dump(tmp_path, 0, [i < 40 for i in range(n)], [i < 50 for i in range(n)])
    _dump(tmp_path, 4, [i < 120 for i in range(n)], [i < 160 for i in range(n)])
    curve = learn.read_curve(tmp_path)
    stale = sync_witness.judge({1: 0.001, 2: 0.05, 3: 0.08, 4: 0.1})
    verdict = learn.judge(curve, stale)
    assert not verdict.ok and "\n" not in verdict.line
    assert "did NOT learn (weight sync: FAILED at step 2:" in verdict.line, verdict.line
    assert learn.judge(curve, sync_witness.judge({1: 0.001, 2: 0.001})).ok
    flat = tmp_path / "flat"  # accuracy did not rise either: the verdict still names the step the sync broke at
    flat.mkdir()
    _dump(flat, 0, [i < 40 for i in range(n)], [i < 50 for i in range(n)])
    _dump(flat, 4, [i < 40 for i in range(n)], [i < 50 for i in range(n)])
    both = learn.judge(learn.read_curve(flat), stale)
    assert not both.ok and "did NOT learn (acc target" in both.line and "weight sync: FAILED at step 2:" in both.line
    fields = learn.summary_fields(curve, verdict, stale)
    assert fields["weight_sync_ok"] is False and fields["weight_sync_gaps"]["2"] == 0.05


def test_a_curve_that_learned_while_training_on_tool_output_did_not_learn(tmp_path: Path) -> None:
    """Issue 51: a loss mask over the tool's output was judged "did NOT learn" by only 0.03 of accuracy; the loss
    mask's witness fails the verdict whatever the accuracy, naming the step and the share."""
    from recipes.smoke import mask_witness, sync_witness

    n = 200  # over the check's minimum (learn.MIN_VAL_SAMPLES)
    _dump(tmp_path, 0, [i < 40 for i in range(n)], [i < 50 for i in range(n)])
    _dump(tmp_path, 4, [i < 120 for i in range(n)], [i < 160 for i in range(n)])
    curve = learn.read_curve(tmp_path)
    synced = sync_witness.judge({1: 0.001, 2: 0.001})
    clean = mask_witness.Reading(tool=20.0, tool_trained=0.0, trained=50.0, least=30.0)
    trained_on = mask_witness.Reading(tool=20.0, tool_trained=20.0, trained=70.0, least=30.0)
    assert learn.judge(curve, synced, mask_witness.judge({1: clean, 2: clean})).ok
    mask = mask_witness.judge({1: trained_on, 2: trained_on})
    verdict = learn.judge(curve, synced, mask)
    assert not verdict.ok and "\n" not in verdict.line
    assert "did NOT learn (loss mask: FAILED at step 1: 28.6% of the trained tokens" in verdict.line, verdict.line
    fields = learn.summary_fields(curve, verdict, synced, mask)
    assert fields["loss_mask_ok"] is False and fields["loss_mask_shares"] == {"1": 20 / 70, "2": 20 / 70}
    assert fields["loss_mask_verdict"] == mask.line and fields["weight_sync_ok"] is True
    stale = sync_witness.judge({1: 0.001, 2: 0.05})  # both witnesses failed: both lines
    both = learn.judge(curve, stale, mask).line
    assert "(weight sync: FAILED at step 2:" in both and "; loss mask: FAILED at step 1:" in both
    assert learn.summary_fields(curve, verdict)["loss_mask_ok"] is None  # no witness given
