"""What the learning check's time goes to, per stage and per RL step phase, with the compute each phase achieves.

Why: issue 42 asked for the learning check in 10 minutes on 2 cores, near what the hardware can do, and for numbers
a user can compare with theirs. This module reads one finished run (``smoke.sh --learn --out DIR``): the stage table
(``summary.json``), the RL trainer's per-step timings (``logs/rl.log``: verl's ``timing_s/*`` and
``perf/total_num_tokens``), the SFT trainer's (``logs/sft.log``: ``train/time(s)``) and the model's shape, and turns
them into seconds and achieved GFLOPS:

* RL update: ``(8 if activations are recomputed else 6) x parameters x tokens`` (forward 2, backward 4, the
  recomputed forward 2) over ``timing_s/update_actor``, the run's own resolved config saying whether they were
  (``actor_recomputes``); the old log-prob pass ``2 x parameters x tokens``;
* SFT step: ``6 x parameters x tokens`` (the learn task's SFT keeps no recomputation) over ``train/time(s)``, its
  tokens counted from the SFT parquet with the model's chat template;
* generation: ``2 x parameters x response tokens`` over ``timing_s/gen`` (the agent loop's tool calls and the
  prompt's prefill are in the time, not in the count: a lower bound).

Attention's own FLOPs (4 x layers x hidden x tokens per token of context, ~3% at these ~150-token sequences) are left
out, so every figure is a slight underestimate. ``scripts/bench_learn_speed.py`` runs the check with the previous
settings and the current ones, on one stack or on every stack, in one run and prints both with their ratio.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recipes.smoke.progress import RL_STEP_TIME, SFT_STEP_TIME, step_metrics

#: RL step phases, verl's timing keys.
RL_PHASES = ("gen", "old_log_prob", "update_actor", "testing")
TOKENS = "perf/total_num_tokens"
#: The resolved config main_ppo prints: the actor's model block comes before the critic's (verl's ppo_trainer.yaml
#: order), so the first occurrence is the actor's.
CHECKPOINTING = re.compile(r"'enable_gradient_checkpointing': (True|False)")


@dataclass
class RunSpeed:
    """One run's figures: stage seconds, per-step medians of each RL phase, and the GFLOPS they achieve."""

    label: str
    stages: dict[str, float] = field(default_factory=dict)
    rl_first_step_s: float | None = None
    rl_startup: dict[str, float | None] = field(default_factory=dict)  # the first step's seconds by phase
    rl_phase_s: dict[str, float] = field(default_factory=dict)  # median seconds per step (the first step left out)
    rl_gflops: dict[str, float] = field(default_factory=dict)
    sft_step_s: float | None = None
    sft_gflops: float | None = None
    total_s: float = 0.0
    val_acc: tuple[float | None, float | None] = (None, None)
    learned: bool | None = None
    machine: dict[str, Any] = field(default_factory=dict)


def parameters(model_dir: Path) -> int:
    """The model's parameters from its config.json (the kit's shape formula,
    recipes.launch.run_inputs.catalog.ModelFacts)."""
    from recipes.launch.run_inputs.catalog import RECIPES
    from recipes.launch.sizing.memory import facts_for

    fallback = RECIPES["qwen3_4b_sft"].model
    shape = facts_for(str(model_dir), fallback)
    if shape is fallback:
        raise ValueError(f"{model_dir}/config.json does not give the model's shape")
    return shape.parameters


def _median(values: list[float]) -> float | None:
    """The median, the first value left out when there are more (it carries one-off warm-up)."""
    kept = values[1:] if len(values) > 1 else values
    return statistics.median(kept) if kept else None


def rl_figures(
    rl_log: str, params: int, recompute: bool, trajectories: int
) -> tuple[dict[str, float], dict[str, float]]:
    """(median seconds per step of each phase, GFLOPS of the phases that compute) from the RL trainer's log;
    ``trajectories``: a step's (prompts x samples)."""
    steps = [m for _, m in sorted(step_metrics(rl_log).items()) if RL_STEP_TIME in m]
    seconds: dict[str, float] = {}
    gflops: dict[str, float] = {}
    for phase in (*RL_PHASES, "step"):
        found = _median([m[f"timing_s/{phase}"] for m in steps if f"timing_s/{phase}" in m])
        if found is not None:
            seconds[phase] = found
    factors = {"update_actor": 8 if recompute else 6, "old_log_prob": 2}
    for phase, factor in factors.items():
        rates = [factor * params * m[TOKENS] / m[f"timing_s/{phase}"] / 1e9 for m in steps if _has(m, phase)]
        if rates:
            gflops[phase] = _median(rates) or 0.0
    generated = [
        2 * params * m["response_length/mean"] * trajectories / m["timing_s/gen"] / 1e9
        for m in steps
        if m.get("timing_s/gen", 0) > 0 and "response_length/mean" in m
    ]
    if generated:
        gflops["gen"] = _median(generated) or 0.0
    return seconds, gflops


def _has(metrics: dict[str, float], phase: str) -> bool:
    return TOKENS in metrics and metrics.get(f"timing_s/{phase}", 0) > 0


def sft_figures(
    sft_log: str, params: int, tokens_per_step: float, measured: float | None = None
) -> tuple[float | None, float | None]:
    """(median seconds per SFT step, its GFLOPS) from the SFT trainer's log; ``measured`` (the pipeline's own figure,
    from the gaps between step lines) where the trainer logs no step time (verl 0.9.1's)."""
    times = [m[SFT_STEP_TIME] for _, m in sorted(step_metrics(sft_log).items()) if SFT_STEP_TIME in m]
    step = _median(times) or measured
    if step is None or step <= 0:
        return step, None
    return step, 6 * params * tokens_per_step / step / 1e9


def sft_tokens_per_step(parquet: Path, model_dir: Path, batch: int) -> float:
    """Tokens a step of the learn SFT trains on: the mean tokenized row (chat template, the tool schema in the
    system prompt, as verl's multi-turn SFT dataset renders it) times the batch."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from recipes.retool.schema import TOOL_SCHEMA

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except ValueError:  # saved by another stack's transformers (5.x names its class TokenizersBackend): same files
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
        tokenizer.chat_template = (model_dir / "chat_template.jinja").read_text()
    rows = pq.read_table(parquet).to_pylist()
    lengths = []
    for row in rows:
        messages = row["messages"] if isinstance(row["messages"], list) else json.loads(row["messages"])
        ids = tokenizer.apply_chat_template(messages, tools=[TOOL_SCHEMA], tokenize=True)
        lengths.append(len(ids))
    return statistics.mean(lengths) * batch


def actor_recomputes(rl_log: str) -> bool:
    """Whether the run's actor recomputed activations in its update: the learning check turned it off (recipes/smoke/
    learn.py), the runs before had the recipe's on; the run's printed config says which, whatever it was."""
    found = CHECKPOINTING.search(rl_log)
    if found is None:
        raise ValueError("the RL log has no resolved config (enable_gradient_checkpointing): not a main_ppo log?")
    return found.group(1) == "True"


def read_run(out: Path, label: str, *, sft_batch: int = 8, trajectories: int = 32) -> RunSpeed:
    """A finished ``smoke.sh --learn --out OUT`` run's figures (the learn task's sizes: recipes/smoke/learn.py)."""
    summary = json.loads((out / "summary.json").read_text())
    speed = RunSpeed(label, machine=summary.get("machine", {}), total_s=float(summary.get("seconds", 0.0)))
    speed.stages = {s["name"]: float(s["seconds"]) for s in summary["stages"] if s["status"] == "ok"}
    speed.rl_first_step_s = summary.get("rl_first_step_s")
    speed.rl_startup = summary.get("rl_startup") or {}
    speed.val_acc = (summary.get("val_acc_before"), summary.get("val_acc_after"))
    speed.learned = summary.get("learn_ok")
    model = out / "sft" / "hf_merged"
    params = parameters(model)
    rl_log = (out / "logs" / "rl.log").read_text(errors="replace")
    speed.rl_phase_s, speed.rl_gflops = rl_figures(rl_log, params, actor_recomputes(rl_log), trajectories)
    sft_log = out / "logs" / "sft.log"
    if sft_log.is_file():
        tokens = sft_tokens_per_step(out / "data" / "learn_sft.parquet", model, sft_batch)
        measured = summary.get("sft_seconds_per_step")
        speed.sft_step_s, speed.sft_gflops = sft_figures(sft_log.read_text(errors="replace"), params, tokens, measured)
    return speed


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


def _ratio(before: float | None, after: float | None) -> str:
    """How many times faster ``after`` is than ``before`` (seconds), or how much more it achieves (GFLOPS)."""
    if not before or not after:
        return "-"
    return f"x{before / after:.2f}"


def _seconds(run: RunSpeed) -> list[tuple[str, float | None]]:
    """A run's time figures, in the table's order."""
    figures: list[tuple[str, float | None]] = [(f"stage {name} (s)", value) for name, value in run.stages.items()]
    figures += [("RL first step ends (s into the stage)", run.rl_first_step_s)]
    figures += [(f"  of it: {phase} (s)", seconds) for phase, seconds in run.rl_startup.items()]
    figures += [("SFT step (s)", run.sft_step_s)]
    figures += [(f"RL {phase} (s/step)", run.rl_phase_s.get(phase)) for phase in (*RL_PHASES, "step")]
    return [*figures, ("total (s)", run.total_s)]


def _rates(run: RunSpeed) -> list[tuple[str, float | None]]:
    figures = [("SFT step (GFLOPS)", run.sft_gflops)]
    return figures + [
        (f"RL {phase} (GFLOPS)", run.rl_gflops.get(phase)) for phase in ("update_actor", "old_log_prob", "gen")
    ]


def _merged(names: list[str], others: list[str]) -> list[str]:
    """``names`` with each of ``others`` it lacks inserted after the name it follows in ``others``."""
    merged = list(names)
    for i, name in enumerate(others):
        if name not in merged:
            merged.insert(merged.index(others[i - 1]) + 1 if i and others[i - 1] in merged else 0, name)
    return merged


def render(previous: RunSpeed | None, current: RunSpeed) -> str:
    """The table: one row per stage, per RL phase (seconds per step) and per computing phase (GFLOPS), the baseline's
    figure (``previous``: the previous settings, or the reference stack's run), the ``current`` one and the speed-up
    (baseline / current seconds, current / baseline GFLOPS). Columns are headed by the runs' labels; a stage only one
    run has (the tool-call check before issue 51) keeps its row."""
    head = previous.label if previous else "previous"
    rows: list[tuple[str, str, str, str]] = [("figure", head, current.label, "speed-up")]
    before = dict(_seconds(previous) + _rates(previous)) if previous else {}
    now = dict(_seconds(current))
    names = _merged(list(now), [name for name, _ in _seconds(previous)] if previous else [])
    for name in names:
        rows.append((name, _cell(before.get(name)), _cell(now.get(name)), _ratio(before.get(name), now.get(name))))
    for name, value in _rates(current):
        rows.append((name, _cell(before.get(name)), _cell(value), _ratio(value, before.get(name))))
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)) for row in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def as_json(previous: RunSpeed | None, current: RunSpeed) -> dict[str, Any]:
    return {"previous": asdict(previous) if previous else None, "current": asdict(current)}
