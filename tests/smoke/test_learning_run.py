"""The main job as a test: ``bash scripts/smoke.sh`` as a user runs it, on SmolLM2-135M-Instruct, must learn.

The main job's default run (recipes/smoke/learn.py): SFT on the product task, GRPO through verl's vLLM async server with
the kit's code tool, sandbox and reward, validation on 128 held-out products (learn.MIN_VAL_SAMPLES) before RL and after
its last step. It passes only when validation accuracy clears learn.needed_acc and the tool-call rate rises; the smoke
itself exits 1 with a ``did NOT learn`` line otherwise, and this test re-checks the numbers from ``summary.json`` so
that a judge that stopped judging would not pass either. What it proves that a pipeline check cannot: the reward reaches
the trainer with its sign, the weights reach vLLM, the loss mask leaves the tool's output out (each sabotaged, the check
fails: ``scripts/bench_learn.sh``, docs/main-job.md).

It is also the default run's pipeline check (tests/kit_main_job.py: every stage ok, SFT learned the call format,
calls executed in the sandbox through the platform's engine, the sandbox stopped, eval and plots written), and,
run with ``--trace``, the end-to-end check of rollout traces; the same checks on the tiny model (``--fast``) run
with ``-m fast_smoke``. Issue 41 made it the default run's only end-to-end proof of the async tool agent loop and
the weight sync (each seen failing this run when broken; the runs that proved them on the tiny model are opt-in:
``-m covered_e2e``).

10.5 minutes inside the suite on 2 cores, the model built from the pinned wheel included (a fresh clone's ``.ci/run``,
docs/testing.md). Marked ``slow`` and ``learn``: ``bash scripts/test.sh -m learn`` runs only it.
"""

from __future__ import annotations

import pytest
from kit_main_job import (
    LEARN_STAGES,
    check_artifacts,
    check_every_stage_ok,
    check_rl_executed_tool_calls_in_the_sandbox,
    check_sandbox_stopped,
    check_sft_learned_the_tool_call_format,
    run_smoke,
)

from recipes.smoke.learn import LEARN, MIN_VAL_SAMPLES, TARGET_GAIN, needed_acc

pytestmark = [pytest.mark.slow, pytest.mark.learn]

#: The shipped run took 18.9 min before the RL start-up cut; the smoke's own stage timeouts bound it too. A near miss's
#: second RL try adds one RL stage (recipes/smoke/learn.py second_try_warranted): the check's 1,014.5 s in CI's run of
#: 6815cfb (ci_history.yaml) and a reference RL stage's 756.2 s on the AVX2 machine (learn_val_samples.yaml) stay under.
TIMEOUT_S = 2700


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The main job with its rollouts traced (``--trace``): the same run, also proving the traces end to end."""
    return run_smoke(tmp_path_factory.mktemp("learn"), "--trace", timeout=TIMEOUT_S)


def test_the_main_job_learns(learned: dict) -> None:
    summary = learned["summary"]
    assert summary, f"no summary.json (rc {learned['rc']}):\n{learned['stdout'][-6000:]}\n{learned['stderr'][-3000:]}"
    failed = summary.get("failed_stage")
    assert failed in (None, "learn"), f"stage {failed} failed:\n{learned['stdout'][-6000:]}"
    before, after = summary["val_acc_before"], summary["val_acc_after"]
    tools_before, tools_after = summary["tool_call_rate_before"], summary["tool_call_rate_after"]
    print(
        f"\n[learn] wall {learned['wall'] / 60:.1f} min; val acc {before:.2f} -> {after:.2f}; tool calls "
        f"{tools_before:.0%} -> {tools_after:.0%}; RL's first step {summary['rl_first_step_s']:.0f} s into its stage"
    )
    assert summary["learn_ok"] is True and learned["rc"] == 0, summary["learn_verdict"]
    # the judge's rule, re-checked from the numbers it reported
    assert after >= needed_acc(before) and after >= before + TARGET_GAIN, (before, after)
    assert tools_after > tools_before, (tools_before, tools_after)


def test_the_rollout_received_every_update(learned: dict) -> None:
    """Issue 51: the weight sync's direct witness (recipes/smoke/sync_witness.py) read every RL step's rollout/trainer
    probability gap, judged it, and the plots show it."""
    summary = learned["summary"]
    gaps = summary["weight_sync_gaps"]
    assert sorted(map(int, gaps)) == list(range(1, LEARN.rl_steps + 1)), summary["weight_sync_verdict"]
    assert summary["weight_sync_ok"] is True, summary["weight_sync_verdict"]
    assert (learned["out"] / "plots" / "weight_sync.png").stat().st_size > 5000


def test_no_tool_output_was_trained_on(learned: dict) -> None:
    """Issue 51: the loss mask's direct witness (recipes/smoke/mask_witness.py) read every RL step's share of trained
    tokens that the tool wrote, from the kit agent loop's counts, and found none."""
    summary = learned["summary"]
    shares = summary["loss_mask_shares"]
    assert sorted(map(int, shares)) == list(range(1, LEARN.rl_steps + 1)), summary["loss_mask_verdict"]
    assert summary["loss_mask_ok"] is True and set(shares.values()) == {0.0}, summary["loss_mask_verdict"]


def test_the_curve_is_judged_on_the_checks_held_out_samples(learned: dict) -> None:
    summary = learned["summary"]
    curve = summary["learning_curve"]
    assert summary["rl_steps"] == LEARN.rl_steps == 4 and [point["step"] for point in curve] == [0, 4], curve
    assert all(point["samples"] >= MIN_VAL_SAMPLES for point in curve), curve


def test_every_stage_ok_and_table_printed(learned: dict) -> None:
    check_every_stage_ok(learned, LEARN_STAGES, LEARN.sft_steps)
    assert (learned["summary"]["fast"], learned["summary"]["task"]) == (False, "learn")
    assert learned["summary"]["stack"] == "0.6.1"  # the reference stack, by default


def test_sft_learned_the_tool_call_format(learned: dict) -> None:
    check_sft_learned_the_tool_call_format(learned)


def test_rl_executed_tool_calls_in_the_sandbox(learned: dict) -> None:
    check_rl_executed_tool_calls_in_the_sandbox(learned, LEARN.rl_steps)


def test_every_rollout_is_traced_with_the_tools_spans(learned: dict) -> None:
    """``--trace``: verl's agent-loop workers (Ray actors) wrote every training rollout to mlflow's file store beside
    the checkpoints, offline, the code tool's spans among them (the opt-in async run of tests/cpu/test_cpu_rl.py
    checked this on the tiny model)."""
    rl = next(s for s in learned["summary"]["stages"] if s["name"] == "rl")["details"]
    rollouts = LEARN.rl_steps * 8 * 4  # train_batch_size 8 x rollout.n 4 a step (recipes/smoke/learn.py)
    assert rl["rollout_traces"] >= rollouts, rl
    assert rl["traces_with_tool_call"] >= 1 and rl["trace_store"].endswith("mlruns"), rl


def test_sandbox_stopped(learned: dict) -> None:
    check_sandbox_stopped(learned)


def test_artifacts(learned: dict) -> None:
    check_artifacts(learned, {"product"})


def test_rl_keeps_its_last_checkpoint_for_the_hand_off(learned: dict) -> None:
    """Issue 44, finding 3: the run's own ``rl/ckpt`` holds its last step, complete, the one checkpoint kept, so
    ``scripts/rl_to_hf.sh --ckpt-dir OUT/rl/ckpt`` and then ``scripts/eval_model.sh`` can follow (README)."""
    ckpt = learned["out"] / "rl" / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(LEARN.rl_steps)
    actor = ckpt / f"global_step_{LEARN.rl_steps}" / "actor"
    assert (actor / "fsdp_config.json").is_file() and (actor / "huggingface" / "config.json").is_file()
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == [f"global_step_{LEARN.rl_steps}"]
