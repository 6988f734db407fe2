"""The main job's ``--help`` epilog (``bash scripts/smoke.sh [--stack NAME] --help``): what runs, where it runs, what
it leaves, and how long it takes on the stack asked for, each time naming its record in docs/measurements/
(tests/test_measurements.py holds them equal; tests/smoke/test_cli.py checks the epilog of every stack).

Also the dry run's text (:func:`describe`, every command with its environment). Apart from :mod:`recipes.smoke.cli`
so that module stays about options and checks. Standard library only: check-args
answers ``--help`` with whatever python3 the machine has.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from platforms.stacks import CURRENT, ENV_VAR, REFERENCE, Stack


@dataclass(frozen=True)
class Timings:
    """What the main job took on one stack, as its records say: the learning check's wall time (with its record) and
    the --fast pipeline check's paragraph (its figures, each followed by the record it comes from)."""

    learn: str
    fast: str


#: The records per stack object (docs/measurements/: one file per run measured). A stack without one quotes the
#: reference's, saying so.
TIMINGS = {
    REFERENCE: Timings(
        learn="585.8 s as shipped on 2 AVX-512 Intel Xeon cores, both stacks in one run, "
        "docs/measurements/learn_prewarm.yaml; 618.5 s in the run before, before the RL driver imported while the "
        "launcher checked the run, docs/measurements/learn_head_starts.yaml; 623.5 s before the short stages were "
        "begun ahead, docs/measurements/learn_both_stacks_xeon.yaml; earlier: "
        "10.4 min on 2 AMD EPYC cores, docs/measurements/learn_both_stacks.yaml; 9.9 min on the 2 Intel Xeon "
        "cores it was tuned on, docs/measurements/learn_speed.yaml; both before patch 0032, which took its SFT stage "
        "from 306.4 s to 271.4 s on 2 AVX2-only cores, docs/measurements/sft_dataloader_workers.yaml; all with 64 "
        "validation samples, 128 since: 1,101.4 s on 2 AVX2-only cores, docs/measurements/learn_val_samples.yaml; "
        "773.1 s with the RL update in small micro-batches without activation checkpointing, on a day that machine ran "
        "faster, docs/measurements/learn_update_micro_batches.yaml",
        fast="""\
Measured with --fast on 2 Intel Xeon cores with AVX-512 (fp32): 317.7 s, of which SFT 169.3 s (96 steps, 1.4 s/step)
and RL 121.5 s (vLLM's CPU build, first step 108 s into the stage, then ~10.8 s a step:
docs/measurements/fast_both_stacks.yaml); the learning check: 9.8 min (docs/measurements/learn_prewarm.yaml;
docs/main-job.md).""",
    ),
    CURRENT: Timings(
        learn="559.4 s as shipped on 2 AVX-512 Intel Xeon cores, docs/measurements/learn_shipped_091.yaml; 566.3 s "
        "with the short stages begun ahead and one reward worker, docs/measurements/learn_head_starts.yaml; 580.6 s in "
        "the next run, with the RL driver importing while the "
        "launcher checked the run and a patch since dropped, where the reference took 585.8 s, "
        "docs/measurements/learn_prewarm.yaml; 605.1 s before, its vLLM servers up in 52.1 s with the stack's own "
        "vLLM cache folder, docs/measurements/learn_both_stacks_cache.yaml; earlier: "
        "11.8 min on 2 AVX-512 AMD EPYC cores with --stack 0.9.1 before prefix caching, "
        "docs/measurements/learn_both_stacks.yaml; 15.4 min with it on 2 AVX2-only cores, where the reference took "
        "16.7 min, docs/measurements/learn_both_stacks_avx2.yaml; both with 64 validation samples, 128 since: "
        "1,106.4 s on 2 AVX2-only cores, 981.1 s since vLLM's own CPU batch limits, "
        "docs/measurements/learn_val_samples.yaml; 773.7 s with the RL update in small micro-batches without "
        "activation checkpointing, on a day that machine ran faster, docs/measurements/learn_update_micro_batches.yaml",
        fast="""\
Measured on stack 0.9.1 with --fast on 2 Intel Xeon cores with AVX-512 (fp32): 433.7 s, of which SFT 239.5 s (96
steps, 2.0 s/step) and RL 167.2 s (vLLM 0.23's CPU build, one trainer rank, first step 151 s into the stage, then
~10.8 s a step: docs/measurements/fast_both_stacks.yaml); the learning check: 9.3 min
(docs/measurements/learn_shipped_091.yaml; docs/stacks.md).""",
    ),
}

BODY = """\
Stages: model -> data -> SFT -> merge (-> tool-call check) -> sandbox -> RL -> eval -> plots (-> learn), with the
real trainers; the tool-call check only with --fast/--tiny (the learning check's validation before RL measures it).
Default: the learning check on SmolLM2-135M-Instruct (built from the pinned PyPI wheel once;
{learn}),
judged: exit 1 with "did NOT learn" when validation accuracy and tool use do not rise (a run that rose short of the
bar, or whose training rollouts cleared it whatever its validation did, both witnesses clean, gets one second RL try
from its SFT model in OUT/try2, which decides: docs/main-job.md, docs/measurements/learn_second_try.yaml).
--fast/--tiny: the pipeline check on a tiny random model (no downloads). After RL it says where the seconds before
its first step went (the launcher, verl's driver and Ray, the trainer ranks, the rollout servers, the validation,
step 1: summary.json's rl_startup, docs/main-job.md). Prints a final table (stage, ok/failed, seconds, key metric)
and writes OUT/summary.json; exits non-zero naming the failed stage. The sandbox and every trainer are stopped at
the end whatever happens, and die with the run even if it is killed.

Platform: auto detects it (KIT_DEVICE forces one). On cpu the run uses the stack's venv ({venv}, built or updated
first), or inside the kit's CPU image (docker/run_cpu.sh) the image's Python; on npu or cuda it uses this
interpreter (the image's Python: KIT_PYTHON, else python3) with the platform's own hardware profile (KIT_HW, else
this machine's), environment and one device, at the tiny "smoke" scale: a "does my stack work" check. --dry-run
prints every command and its environment (the stack's KIT_STACK among it) and starts nothing.

Artifacts: OUT/logs/<stage>.log, OUT/data/*.parquet, OUT/sft/{{ckpt,hf_merged,tensorboard}},
OUT/rl/{{ckpt,tensorboard,val_generations,rollouts}}, OUT/eval/eval.{{md,json}}, OUT/plots/*.png, OUT/summary.json.
{fast}
"""


def epilog(stack: Stack) -> str:
    """The epilog for ``stack``: its own measured times, or, where nothing was measured on it, the reference's
    times said to be the reference's."""
    timings = TIMINGS.get(stack)
    if timings is None:
        reference = TIMINGS[REFERENCE]
        note = f"Not measured on stack {stack.name}; on the reference stack {REFERENCE.name}:\n"
        timings = Timings(f"on stack {REFERENCE.name}: {reference.learn}", note + reference.fast)
    return BODY.format(learn=timings.learn, fast=timings.fast, venv=stack.venv_name)


def describe(smoke: Any) -> str:
    """The dry run: every command, with what its environment changes against this one, quoted (issue 44: pasted)."""
    lines = [
        f"[smoke] dry run: platform {smoke.profile.platform.name}, hardware profile {smoke.profile.name}, scale "
        f"smoke, rollout {smoke.rollout_engine().label()}, python {sys.executable}; out {smoke.out}; nothing is "
        "started",
        f"[smoke] in-process stages: model ({_model_label(smoke)})"
        + (", tool-call check (sampling on CPU)" if smoke.sizes.check_samples else "")
        if smoke.from_sft is None
        else f"[smoke] in-process stage: reuse (copies data/, sft/hf_merged/ and sft/tensorboard/ of {smoke.from_sft})",
    ]
    previous: dict[str, str] | None = None
    for cmd in smoke.commands():
        lines.append(f"== {cmd.stage}")
        if cmd.env == previous:
            lines.append("  (environment as above)")
        else:
            # the stack is always shown: pasted into a fresh shell, the command runs on the stack it was planned for
            changed = {k: v for k, v in cmd.env.items() if os.environ.get(k) != v or k == ENV_VAR}
            lines += [f"  env {k}={shlex.quote(v)}" for k, v in sorted(changed.items())]
            lines += [f"  env -u {k}" for k in sorted(os.environ) if k not in cmd.env]
        previous = cmd.env
        lines.append("  $ " + shlex.join(cmd.argv))
    return "\n".join(lines)


def _model_label(smoke: Any) -> str:
    if smoke.user_model is not None:
        return f"yours, used as it is: {smoke.model_dir}"
    if smoke.task.model == "smollm2":
        return f"SmolLM2-135M-Instruct, built or reused at {smoke.model_dir}"
    return "tiny Qwen3 + Qwen tokenizer"
