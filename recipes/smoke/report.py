"""What the smoke run reports: one :class:`Stage` row per stage, ``summary.json`` and the final table.

``summary.json`` is the contract with ``tests/smoke`` and CI (field names are kept stable): ``ok``,
``failed_stage``, ``fast``, ``device`` (the platform), ``platform``, ``hardware_profile``, ``rollout_engine``,
``rollout_engine_version``, ``task``, ``seed``, ``scale``, ``python``,
``out``, ``from_sft``, ``seconds``, ``stages``, ``sft_losses``, ``sft_seconds_per_step``, ``rl_seconds_per_step``,
``rl_first_step_s`` (seconds from the RL stage's start to its first finished step), ``rl_startup`` (those seconds
phase by phase, recipes/smoke/startup.py), ``machine`` (the CPU's model,
cores and the flags that decide its fast dtypes: avx512f, avx512_bf16, amx_bf16),
``tool_call_rate``, ``rl_tool_calls``, ``rl_reward_mean``, ``sandbox``; with ``--learn`` also the learning check's
``learn_ok``, ``learn_verdict``, ``val_acc_before``, ``val_acc_after``, ``tool_call_rate_before``,
``tool_call_rate_after``, ``rl_steps`` and ``learning_curve`` (recipes/smoke/learn.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The stages whose outputs (data/, sft/) a later run can start from (``--from-sft``); a run that started from
#: another's has them as its ``reuse`` stage.
SFT_STAGES = ("model", "data", "sft", "merge")
REUSE_STAGE = "reuse"


@dataclass
class Stage:
    """One row of the final table."""

    name: str
    status: str = "skipped"  # ok | failed | skipped
    seconds: float = 0.0
    metric: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunFacts:
    """What the summary says about the run itself, besides its stages."""

    fast: bool
    task: str  # smoke | learn (--learn: the learning check)
    seed: int  # --seed: the tiny model's init and the learning check's data
    platform: str
    rollout_engine: str  # what the RL stage rolled out with: vllm (verl's vLLM async server) or hf
    rollout_engine_version: str | None  # vLLM's version (e.g. 0.11.0+cpu); None for hf
    hardware_profile: str
    scale: str
    python: str
    out: str
    from_sft: str | None = None  # --from-sft: the earlier run whose data and SFT model this one copied
    stack: str = ""  # --stack: the stack the run served (platforms/stacks.py), e.g. 0.9.1
    machine: dict[str, Any] = field(default_factory=dict)  # the CPU: model, cores, flags (platforms/cpu_info.py)


def summary(
    stages: dict[str, Stage], facts: RunFacts, total: float, failed: str | None, env: Stage | None = None
) -> dict[str, Any]:
    """``summary.json``; ``env`` is the row of the environment stage (timed by scripts/smoke.sh), when there was one."""
    rows = [asdict(stage) for stage in stages.values()]
    if env is not None:
        rows.insert(0, asdict(env))
    rl = stages["rl"].details if "rl" in stages else {}
    sft = stages["sft"].details if "sft" in stages else {}
    check = stages["tool-call check"].details if "tool-call check" in stages else {}
    learned = stages["learn"].details if "learn" in stages else {}
    return {
        "ok": failed is None,
        "failed_stage": failed,
        "fast": facts.fast,
        "task": facts.task,
        "seed": facts.seed,
        "device": facts.platform,
        "platform": facts.platform,
        "hardware_profile": facts.hardware_profile,
        "rollout_engine": facts.rollout_engine,
        "rollout_engine_version": facts.rollout_engine_version,
        "scale": facts.scale,
        "python": facts.python,
        "out": facts.out,
        "from_sft": facts.from_sft,
        "stack": facts.stack,
        "machine": facts.machine,
        "seconds": total + (env.seconds if env else 0.0),
        "stages": rows,
        "sft_losses": sft.get("losses", []),
        "sft_seconds_per_step": sft.get("seconds_per_step"),
        "rl_seconds_per_step": rl.get("seconds_per_step"),
        "rl_first_step_s": rl.get("first_step_s"),
        "rl_startup": rl.get("startup", {}),
        # the SFT model's tool-call rate: the check's, else (the learning check, no check stage) its validation's
        "tool_call_rate": check.get("rate", learned.get("tool_call_rate_before")),
        "rl_tool_calls": rl.get("tool_calls_executed", 0),
        "rl_reward_mean": rl.get("reward_mean", []),
        "rollout_traces": rl.get("rollout_traces"),
        "sandbox": stages["sandbox"].details.get("counters") if "sandbox" in stages else None,
        # the learning check (--learn): val_acc_before/after, tool_call_rate_before/after, rl_steps, the curve
        **learned,
    }


def reusable_sft_problem(run: Path, task: str) -> str | None:
    """Why ``run`` (an earlier run's ``--out``) cannot seed ``--from-sft`` for a run of ``task``; None when it can.

    Read from its ``summary.json``: a run killed before writing one, or whose SFT or merge failed, left no model to
    trust (a merge cut short can leave a partial safetensors file)."""
    path = run / "summary.json"
    if not path.is_file():
        return f"{run} holds no summary.json (not the --out of a finished smoke run)"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{path} is unreadable ({exc})"
    if found.get("task") != task:
        return f"{run} ran the {found.get('task')!r} task, this run the {task!r} one (--learn on both or neither)"
    status = {stage.get("name"): stage.get("status") for stage in found.get("stages", [])}
    needed = [REUSE_STAGE] if REUSE_STAGE in status else SFT_STAGES  # a run that itself started --from-sft
    failed = [name for name in needed if status.get(name) != "ok"]
    return f"{run}: stage {', '.join(failed)} not ok there, so it has no SFT model to start from" if failed else None


def val_acc(val: dict[int, dict[str, float]]) -> str:
    """``x@0 -> y@N``: per validation step, the mean over data sources of ``val-core/<source>/acc/mean@k``."""
    parts = []
    for step in sorted(val):
        accs = [v for k, v in val[step].items() if "/acc/mean@" in k]
        if accs:
            parts.append(f"{sum(accs) / len(accs):.2f}@{step}")
    return " -> ".join(parts) or "n/a"


def render_table(summary: dict[str, Any]) -> str:
    rows = [(s["name"], s["status"], f"{s['seconds']:.1f}", s["metric"]) for s in summary["stages"]]
    rows.append(("total", "ok" if summary["ok"] else "FAILED", f"{summary['seconds']:.1f}", ""))
    header = ("stage", "status", "seconds", "key metric")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+-" + "-" * 60
    out = [line, "| " + " | ".join(h.ljust(w) for h, w in zip(header[:3], widths, strict=True)) + " | key metric"]
    out.append(line)
    for row in rows:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + " | " + row[3])
    out.append(line)
    return "\n".join(out)
