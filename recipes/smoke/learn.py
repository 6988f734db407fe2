"""The learning check (``scripts/smoke.sh --learn``): does RL here raise accuracy on a task that needs the tool?

Why: the pipeline check (``--fast``/``--tiny``, the random tiny model) proves the pipeline runs. A sign error in the
advantage, a reward that never reaches the trainer, weights that never reach the rollout or a loss mask over tool
output each leave it green; they do not leave this check green (``scripts/bench_learn.sh`` shows each failing it;
the last two also fail a direct witness: :mod:`recipes.smoke.sync_witness`, :mod:`recipes.smoke.mask_witness`). It
trains a real pretrained model, SmolLM2-135M-Instruct from PyPI (:mod:`recipes.smoke.smollm2`), on a question only
the code interpreter answers (:mod:`recipes.smoke.learn_data`: 4-digit products): SFT on a mix of tool and guessed
trajectories, then GRPO through the platform's rollout engine with the kit's reward, tool and sandbox, validating on
held-out problems before training and every few steps. It passes when the last validation beats the first by
:data:`TARGET_GAIN` and by a factor :data:`TARGET_RATIO` (or, where that asks more, with :data:`TARGET_ERROR_CUT` of
its errors gone: :func:`needed_acc`), on at least :data:`MIN_VAL_SAMPLES` samples, and the tool-call rate rose:
ReTool's claim (RL raises tool use and accuracy together) in miniature.

History: the random 64-wide, 2-layer model this check first ran on (issue 19) never learned to copy the prompt's
digits into a call (teacher-forced digit accuracy 0.12-0.17 after 96 SFT steps); SmolLM2 copies an 8-digit number
from a few-shot prompt as it comes, so the check measures RL, not the model's limits.

This module reads what the trainer dumped (``trainer.validation_data_dir``: one ``<step>.jsonl`` per validation, a
row per sample with the kit reward's ``acc``, ``acc_strict``, ``used_tool``, ``score``) into the curve and judges it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from recipes.smoke import learn_data
from recipes.smoke.commands import DataJob, Sizes, Task
from recipes.smoke.mask_witness import MaskVerdict
from recipes.smoke.sync_witness import SyncVerdict

TARGET_GAIN = 0.15
TARGET_RATIO = 1.5
#: The share of the first validation's errors the last must have fixed where x1.5 asks more: above a first accuracy
#: of 0.5, x1.5 asks more than half the errors gone, and above 0.67 more than every answer right. The current stack's
#: shipped run on seed 1 learned 0.62 -> 0.88 (tool calls 64% -> 92%, both witnesses clean) and failed x1.5's 0.93
#: (docs/measurements/learn_seeds_091.yaml).
TARGET_ERROR_CUT = 0.5
#: Validation samples, each a held-out problem asked once (learn_data.Sizes.val): enough that a policy RL left
#: unchanged clears the bar by chance in under 1% of runs over the first accuracies seen (0.44-0.66: bench_seeds.yaml),
#: the bar at least 2.33 standard deviations of two validations' difference (tests/smoke/test_learn_units.py). At 64
#: that was as little as 1.85 (a first of 0.70), and a shipped run could miss by one sample: CI's run of stop 60, the
#: reference 0.58 -> 0.78 against 0.79 (tool calls 59% -> 78%, both witnesses clean; ci_history.yaml).
MIN_VAL_SAMPLES = learn_data.Sizes().val

#: The longest learn SFT row, in SmolLM2 tokens, with the tool schema in the system prompt (tests/smoke/
#: test_learn_units.py checks the bound).
LEARN_SFT_MAX_LENGTH = 192
#: 96 SFT rows, batch 8: 12 steps an epoch, 16 steps. RL: 4 GRPO steps of 8 prompts x 4 samples, validating on the
#: held-out products (MIN_VAL_SAMPLES) before training and after the last step: the judge reads those two (a validation
#: after step 2 as well cost 36 s of a 10-minute run: issue 42, docs/main-job.md). Measured (seed 0, 2 cores, 6 steps
#: then): val acc 0.52 -> 0.94 after 2 steps -> 0.98 after 4 and 6, at ~140 s a step; 6 steps made the run 24 minutes.
#: No tool-call check stage (check_samples 0, issue 51): the validation before RL measures the SFT model's tool-call
#: rate on all the held-out prompts through the rollout engine (tool_call_rate_before); the check's HF sampling of 16
#: prompts measured it again in 43-54 s of each run (docs/measurements/learn_091.yaml, 2 cores).
LEARN = Sizes(sft_steps=16, sft_epochs=2, rl_steps=4, rl_test_freq=4, check_samples=0)
LEARN_SFT_OVERRIDES = (
    f"data.max_length={LEARN_SFT_MAX_LENGTH}",
    "data.truncation=error",
    "data.train_max_samples=-1",
    "data.val_max_samples=8",
    "data.train_batch_size=8",
    "data.micro_batch_size_per_gpu=4",
    "optim.lr=1e-4",  # a pretrained model: a fine-tuning rate, not the random tiny model's 2e-2
    "optim.lr_warmup_steps_ratio=0.05",
    "model.enable_gradient_checkpointing=false",
    # the trainer pads rows to max_length: compute only the real tokens. The recipes' stack-neutral key: verl_sft/
    # <stack>.yaml places it at the stack's (0.6.1 use_remove_padding, 0.9.1 model.use_remove_padding)
    "sft.use_remove_padding=true",
)
LEARN_TASK = Task(
    "learn",
    None,  # written into OUT/data/src by learn_data.write(folder, seed)
    (
        DataJob("sft", "learn_sft.jsonl", "learn_sft.parquet", ("--keep-prompts",)),
        DataJob("rl", "learn_train.jsonl", "learn_train.parquet"),
        DataJob("val", "learn_val.jsonl", "learn_val.parquet"),
    ),
    "learn_sft.parquet",
    "learn_train.parquet",
    ("learn_val.parquet",),
    LEARN_SFT_OVERRIDES,
    (
        "data.train_max_samples=-1",
        "data.val_max_samples=-1",
        "data.max_prompt_length=128",  # the compact tool block + the question: ~85 SmolLM2 tokens
        "data.max_response_length=96",  # call ~30 tokens + tool turn ~25 + answer ~20
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.rollout.n=4",  # GRPO groups: a tool call and a guess in the same group
        "actor_rollout_ref.actor.optim.lr=3e-5",
        "actor_rollout_ref.actor.use_kl_loss=False",
        # the rollout returns its tokens' log-probs: the weight sync's direct witness (recipes/smoke/sync_witness.py)
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        # the update without activation checkpointing, in micro-batches of at most 1,024 tokens (the smoke size's):
        # SmolLM2's update of 5,600 tokens on 2 AVX2 cores took 46.4 s and held 13.0 GB with checkpointing in one
        # 8,192-token micro-batch, 35.8 s and 4.7 GB without it in 1,024-token ones (docs/measurements/
        # learn_update_micro_batches.yaml). One 8,192-token micro-batch without checkpointing held 8 GB a rank and
        # was killed by Ray's memory monitor on a 24 GB machine
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=8192",
        "actor_rollout_ref.model.use_remove_padding=True",
        # validation samples the policy itself (n 1 per held-out problem): the rates are the policy's
        "actor_rollout_ref.rollout.val_kwargs.n=1",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        "trainer.val_before_train=True",  # the RL stage saves its last step (commands.last_checkpoint_overrides)
        "trainer.logger=['console','tensorboard']",
    ),
    generate=learn_data.write,
    reward_settings=(("reward_kwargs.shaping", "none"),),  # ReTool's reward: +1 right, -1 wrong, no tool bonus
    judges_learning=True,
    model="smollm2",
)


@dataclass(frozen=True)
class ValPoint:
    """One validation: accuracy (kit verifier and verl's strict rule), tool use, reward, response length."""

    step: int
    samples: int
    acc: float
    acc_strict: float
    tool_call_rate: float
    reward: float
    response_chars: float


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(float(row.get(key) or 0) for row in rows) / len(rows)


def read_point(dump: Path) -> ValPoint:
    """A validation dump (``<step>.jsonl``) as one point of the curve."""
    rows = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{dump} holds no validation samples")
    return ValPoint(
        step=int(dump.stem),
        samples=len(rows),
        acc=_mean(rows, "acc"),
        acc_strict=_mean(rows, "acc_strict"),
        tool_call_rate=_mean(rows, "used_tool"),
        reward=_mean(rows, "score"),
        response_chars=sum(len(str(row.get("output", ""))) for row in rows) / len(rows),
    )


def read_curve(val_dir: Path) -> list[ValPoint]:
    """Every validation of the run, in step order (step 0: before training)."""
    dumps = [path for path in val_dir.glob("*.jsonl") if path.stem.isdigit()]
    return [read_point(path) for path in sorted(dumps, key=lambda path: int(path.stem))]


@dataclass(frozen=True)
class Verdict:
    ok: bool
    line: str  # one line: what was measured against the target


def judge(curve: list[ValPoint], witness: SyncVerdict | None = None, mask: MaskVerdict | None = None) -> Verdict:
    """The first validation against the last: both targets, on enough samples; and, given the direct witnesses,
    that the rollout received every update (recipes/smoke/sync_witness.py: accuracy alone rose by +0.14 on a rollout
    that kept the SFT weights) and that no tool output was trained on (recipes/smoke/mask_witness.py: a loss mask
    over it was judged "did NOT learn" by only 0.03), issue 51."""
    verdict = _judge_curve(curve)
    failed = "; ".join(w.line for w in (witness, mask) if w is not None and not w.ok)
    if not failed:
        return verdict
    if not verdict.ok:  # both failed: the witness names the step the break shows at
        return Verdict(False, f"{verdict.line}; {failed}")
    return Verdict(False, f"{verdict.line.split(': learned')[0]}: did NOT learn ({failed})")


def needed_acc(before: float) -> float:
    """The accuracy the last validation must reach from a first of ``before``: +TARGET_GAIN, and xTARGET_RATIO or
    TARGET_ERROR_CUT of the errors gone, whichever asks less (the same bar as x1.5 up to a first accuracy of 0.5)."""
    return max(before + TARGET_GAIN, min(TARGET_RATIO * before, before + TARGET_ERROR_CUT * (1 - before)))


def _judge_curve(curve: list[ValPoint]) -> Verdict:
    if len(curve) < 2 or curve[0].step != 0:
        steps = [point.step for point in curve]
        return Verdict(False, f"learn: need a validation before training and one after; got steps {steps}")
    before, after = curve[0], curve[-1]
    few = min(before.samples, after.samples)
    if few < MIN_VAL_SAMPLES:
        return Verdict(False, f"learn: {few} validation samples, the check needs at least {MIN_VAL_SAMPLES}")
    gain, needed = after.acc - before.acc, needed_acc(before.acc)
    text = (
        f"val acc {before.acc:.2f} -> {after.acc:.2f} ({gain:+.2f}) over {after.step} RL steps, {after.samples} "
        f"samples; tool calls {before.tool_call_rate:.0%} -> {after.tool_call_rate:.0%}"
    )
    if after.acc >= needed and after.tool_call_rate > before.tool_call_rate:
        return Verdict(True, f"learn: {text}: learned (target: acc >= {needed:.2f}, more tool calls)")
    why = (
        f"acc target >= {needed:.2f}: +{TARGET_GAIN}, and x{TARGET_RATIO} of the first or {TARGET_ERROR_CUT:.0%} of "
        "its errors gone, whichever is lower"
    )
    if after.acc >= needed:
        why = "tool calls did not rise"
    return Verdict(False, f"learn: {text}: did NOT learn ({why})")


#: Where a second try runs, inside the first's ``--out`` (:func:`second_try_warranted`).
SECOND_TRY_DIR = "try2"


#: verl's step metric of the training rollouts' accuracy: the mean of the kit's reward's ``acc`` (recipes/retool/
#: reward.py ``compute_score``: the answer's truth, whatever score the reward gives it).
TRAINING_ACC_KEY = "reward_extra/acc/mean"


def training_accuracy(steps: dict[int, dict[str, float]]) -> dict[int, float]:
    """Each RL step's training-rollout accuracy, from the trainer log's step metrics (recipes.smoke.progress
    ``step_metrics``)."""
    return {step: metrics[TRAINING_ACC_KEY] for step, metrics in sorted(steps.items()) if TRAINING_ACC_KEY in metrics}


def training_cleared_the_bar(training_acc: dict[int, float]) -> bool:
    """Whether the training rollouts' accuracy at the last step reached the validation's bar from the first step's
    (:func:`needed_acc`): the rollouts learned, whatever the last update then did."""
    if len(training_acc) < 2:
        return False
    first, *_, last = (training_acc[step] for step in sorted(training_acc))
    return last >= needed_acc(first)


def second_try_warranted(
    curve: list[ValPoint],
    verdict: Verdict,
    witness: SyncVerdict | None,
    mask: MaskVerdict | None,
    training_acc: dict[int, float] | None = None,
) -> bool:
    """Whether a failed first try earns one more RL run from the same SFT model: both direct witnesses clean, on
    enough samples, and it learned short of the bar (validation accuracy and tool calls both rose) or its training
    rollouts cleared the bar (:func:`training_cleared_the_bar`), whatever its validation did (a collapse after the last
    update: validation fell).

    Why: four GRPO steps of 32 trajectories end in a spread of policies; the same run that learned 0.65 -> 0.95
    here learned 0.65 -> 0.77 in CI, its witnesses clean and its training reward at +0.94 (docs/measurements/
    learn_second_try.yaml); and once the current stack's policy broke in its last update (val 0.66 -> 0.00, every
    tool call's JSON left unclosed) after its training rollouts rose 0.69 -> 0.94, witnesses clean (ci_history.yaml,
    the replica of 89e829f). None of the sabotages earns one: a flipped reward lowers accuracy, training and
    validation alike, and a weight sync or loss mask that breaks fails its witness (learn_val_samples.yaml,
    bench_seeds_128.yaml, bench_seeds_128_seed2.yaml). A broken run gets the same bar twice, not a lower one."""
    if verdict.ok or len(curve) < 2 or witness is None or mask is None or not (witness.ok and mask.ok):
        return False
    before, after = curve[0], curve[-1]
    if min(before.samples, after.samples) < MIN_VAL_SAMPLES:
        return False
    rose = after.acc > before.acc and after.tool_call_rate > before.tool_call_rate
    return rose or training_cleared_the_bar(training_acc or {})


def second_try_override(rl_extra: tuple[str, ...]) -> str:
    """The second try's one change: its training prompts in another order (verl's ``data.seed`` seeds the train
    sampler's generator: verl 0.6.1 ``trainer/main_ppo.py:432-434``, 0.9.1 ``trainer/ppo/utils.py:160-162``). The
    first try's own seed plus one (``--rl-override data.seed=S``), else 1: unset, the generator keeps torch's
    default seed. A different order alone would do on a machine that repeats a run exactly."""
    seeds = [value for key, _, value in (word.partition("=") for word in rl_extra) if key.lstrip("+") == "data.seed"]
    last = seeds[-1].strip() if seeds else ""
    return f"data.seed={int(last) + 1 if last.lstrip('-').isdigit() else 1}"


def summary_fields(
    curve: list[ValPoint],
    verdict: Verdict,
    witness: SyncVerdict | None = None,
    mask: MaskVerdict | None = None,
    training_acc: dict[int, float] | None = None,
) -> dict[str, Any]:
    """The keys ``summary.json`` carries for a learning check (``training_acc``: :func:`training_accuracy`)."""
    before, after = (curve[0], curve[-1]) if curve else (None, None)
    return {
        "weight_sync_ok": witness.ok if witness else None,
        "weight_sync_verdict": witness.line if witness else None,
        "weight_sync_gaps": {str(step): gap for step, gap in witness.gaps.items()} if witness else {},
        "loss_mask_ok": mask.ok if mask else None,
        "loss_mask_verdict": mask.line if mask else None,
        "loss_mask_shares": {str(step): share for step, share in mask.shares.items()} if mask else {},
        "training_acc": {str(step): acc for step, acc in (training_acc or {}).items()},
        "learn_ok": verdict.ok,
        "learn_verdict": verdict.line,
        "learn_target": {
            "gain": TARGET_GAIN,
            "ratio": TARGET_RATIO,
            "error_cut": TARGET_ERROR_CUT,
            "min_val_samples": MIN_VAL_SAMPLES,
        },
        "val_acc_before": before.acc if before else None,
        "val_acc_after": after.acc if after else None,
        "tool_call_rate_before": before.tool_call_rate if before else None,
        "tool_call_rate_after": after.tool_call_rate if after else None,
        "rl_steps": after.step if after else 0,
        "learning_curve": [asdict(point) for point in curve],
    }


def render_curve(curve: list[ValPoint]) -> str:
    """The curve as a small table (printed after the stage table)."""
    lines = ["step  samples  acc   strict  tool calls  reward  response chars"]
    for p in curve:
        lines.append(
            f"{p.step:>4}  {p.samples:>7}  {p.acc:.2f}  {p.acc_strict:>6.2f}  {p.tool_call_rate:>10.0%}  "
            f"{p.reward:>+6.2f}  {p.response_chars:>14.0f}"
        )
    return "\n".join(lines)
