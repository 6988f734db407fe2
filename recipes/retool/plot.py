"""``retool-plot``: the training curves people look at in a ReTool run, as PNGs, from its tensorboard event files.

    retool-plot RUN/tensorboard --out RUN/plots
    retool-plot CKPT_DIR --out plots --panels val_acc,reward      # any folder: event files are found recursively
    retool-plot SFT/tensorboard RL/tensorboard --out plots        # an SFT and an RL run in one set of figures
    retool-plot runA/tensorboard runB/tensorboard --out cmp       # two runs compared: one line per run and tag
    retool-plot RUN --list-tags                                   # what was logged (no --out needed)

Why: a run on a cluster without a tensorboard server (or a CI artifact) should still be readable at a glance, and the
metrics that matter for ReTool are spread over many verl tags. One PNG per panel (and ``overview.png`` with all of
them) for the tags found; a panel without data is skipped and listed, and the exit status is 1 only when no panel
has data at all.

A run is one folder of event files (a resumed run writes a new file into the same folder: its steps continue the
same curve). Several folders are several runs, each drawn as its own line labelled with the part of its path that
tells it apart (``runA``, ``runB``), never merged into one curve.

* ``val_acc`` — validation accuracy mean@k per data source: the kit's verifier (``val-core/<source>/acc/mean@k``)
  and, beside it, the references' strict rule (``val-aux/<source>/acc_strict/mean@k``, verl's ``math_dapo``);
* ``reward`` — mean training reward (``critic/score/mean``; ``critic/rewards/mean`` when it differs);
* ``response_length`` — ``response_length/mean`` (and ``/max``);
* ``turns`` — ``num_turns/mean`` (training and validation) and tool rounds per response
  (``val-aux/<source>/tool_rounds/mean@k``, logged by the kit's reward);
* ``tool_use`` — the share of validation responses that called the tool (``val-aux/<source>/used_tool/mean@k``,
  logged by the kit's reward: the learning check's tool-call rate);
* ``entropy`` — ``actor/entropy``;
* ``weight_sync`` — ``training/rollout_probs_diff_mean`` (and ``_max``): how far the rollout's token probabilities are
  from the trainer's (verl's training-inference mismatch; it jumps when the rollout misses an update: the learning
  check's witness, recipes/smoke/sync_witness.py);
* ``step_time`` — ``timing_s/step`` (and generation time, ``timing_s/gen``);
* ``sft_loss`` — ``train/loss`` and ``val/loss`` of an SFT run.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from platforms.cli_errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ArgumentParser,
    check_writable,
    entry_point,
    fail,
    input_path,
    output_folder,
)


@dataclass(frozen=True)
class Panel:
    """One figure: title, y label, and the tag patterns (fnmatch) whose series it draws."""

    name: str
    title: str
    ylabel: str
    patterns: tuple[str, ...]


PANELS: tuple[Panel, ...] = (
    Panel(
        "val_acc",
        "Validation accuracy (mean@k): kit verifier and verl strict",
        "accuracy",
        ("val-core/*/acc/mean@*", "val-aux/*/acc_strict/mean@*"),
    ),
    Panel("reward", "Training reward", "reward", ("critic/score/mean", "critic/rewards/mean")),
    Panel("response_length", "Response length", "tokens", ("response_length/mean", "response_length/max")),
    Panel(
        "turns",
        "Turns and tool rounds per response",
        "count",
        ("num_turns/mean", "val-aux/num_turns/mean", "val-aux/*/tool_rounds/mean@*"),
    ),
    Panel("tool_use", "Responses that called the tool (validation)", "share", ("val-aux/*/used_tool/mean@*",)),
    Panel("entropy", "Policy entropy", "nats/token", ("actor/entropy",)),
    Panel(
        "weight_sync",
        "Rollout vs trainer token probabilities (the weight sync's witness)",
        "|p_rollout - p_trainer| (mean, max)",
        ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max"),
    ),
    Panel("step_time", "Step time", "seconds", ("timing_s/step", "timing_s/gen")),
    Panel("sft_loss", "SFT loss", "loss", ("train/loss", "val/loss")),
)

Series = dict[str, list[tuple[int, float]]]


Runs = dict[str, Series]  # run label -> its scalars
PROG = "retool-plot"
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D")


def event_files(root: Path) -> list[Path]:
    """Tensorboard event files under ``root`` (itself, or found recursively)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("events.out.tfevents.*") if p.is_file())


def not_an_event_file(file: Path) -> str | None:
    """Why a file given on the command line is not a tensorboard event file, or None. The name, and the first
    TFRecord's frame (an 8-byte length, its CRC, the record, its CRC): tensorboard's reader skips what it cannot
    parse without a word, so a wrong file used to end in "no data for: <every panel>" (issue 33)."""
    if not fnmatch.fnmatch(file.name, "events.out.tfevents.*"):
        return "is not a tensorboard event file (events.out.tfevents.*)"
    with file.open("rb") as handle:
        head = handle.read(12)
    if len(head) < 12:
        return "is a damaged tensorboard event file: empty or cut short"
    length = int.from_bytes(head[:8], "little")
    if not 0 < length < 1 << 24 or file.stat().st_size < 12 + length + 4:
        return "is a damaged tensorboard event file: its first record does not fit"
    return None


def read_scalars(files: Sequence[Path]) -> Series:
    """Every scalar tag of one run's event files: tag -> [(step, value)] sorted by step; a step logged twice (a
    resumed run) keeps the value of the later file."""
    from tensorboard.backend.event_processing import event_accumulator

    by_tag: dict[str, dict[int, float]] = defaultdict(dict)
    for file in sorted(files, key=lambda f: f.name):  # event file names start with the wall time they were opened
        acc = event_accumulator.EventAccumulator(str(file), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for event in acc.Scalars(tag):
                by_tag[tag][int(event.step)] = float(event.value)
    return {tag: sorted(points.items()) for tag, points in by_tag.items()}


def run_labels(folders: Sequence[Path]) -> list[str]:
    """Short names for run folders: the path parts that differ between them (``a/runA/tb``, ``a/runB/tb`` -> runA,
    runB); a single run is named by its folder."""
    parts = [f.resolve().parts for f in folders]
    if len(parts) == 1:
        return [folders[0].resolve().name]
    lead = 0
    while all(len(p) > lead for p in parts) and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while all(len(p) - lead > trail for p in parts) and len({p[len(p) - 1 - trail] for p in parts}) == 1:
        trail += 1
    labels = ["/".join(p[lead : len(p) - trail]) or Path(*p).name for p in parts]
    return labels if len(set(labels)) == len(labels) else [str(f) for f in folders]


def read_runs(roots: Path | Sequence[Path]) -> Runs:
    """The runs under ``roots``: one per folder holding event files, labelled by :func:`run_labels`."""
    roots = [roots] if isinstance(roots, Path) else list(roots)
    by_folder: dict[Path, list[Path]] = defaultdict(list)
    for file in (f for root in roots for f in event_files(root)):
        by_folder[file.parent.resolve()].append(file)
    folders = sorted(by_folder)
    return {label: read_scalars(by_folder[f]) for label, f in zip(run_labels(folders), folders, strict=True)}


def panel_series(panel: Panel, scalars: Series) -> Series:
    chosen: Series = {}
    for pattern in panel.patterns:
        for tag in sorted(scalars):
            if fnmatch.fnmatchcase(tag, pattern) and tag not in chosen:
                chosen[tag] = scalars[tag]
    if panel.name == "reward" and "critic/rewards/mean" in chosen and "critic/score/mean" in chosen:
        if chosen["critic/rewards/mean"] == chosen["critic/score/mean"]:
            del chosen["critic/rewards/mean"]  # identical without a KL penalty in the reward
    return chosen


def panel_runs(panel: Panel, runs: Runs) -> Runs:
    """``run -> series`` of the panel's tags, for the runs that have any."""
    out = {run: panel_series(panel, scalars) for run, scalars in runs.items()}
    return {run: series for run, series in out.items() if series}


def _label(tag: str) -> str:
    return re.sub(r"^(val-core|val-aux)/", "val: ", tag)


def _draw(ax, panel: Panel, runs: Runs) -> None:  # noqa: ANN001 (matplotlib Axes)
    """One line per (run, tag): a colour per tag, a line style and marker per run (a metric keeps its colour)."""
    tags = sorted({tag for series in runs.values() for tag in series})
    colors = {tag: f"C{i % 10}" for i, tag in enumerate(tags)}
    several = len(runs) > 1
    for r, (run, series) in enumerate(runs.items()):
        for tag, points in series.items():
            steps, values = zip(*points, strict=True)
            label = f"{run}: {_label(tag)}" if several else _label(tag)
            style, marker = LINESTYLES[r % len(LINESTYLES)], MARKERS[r % len(MARKERS)]
            ax.plot(steps, values, style, color=colors[tag], marker=marker, markersize=3, linewidth=1.5, label=label)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def plot(root: Path | Sequence[Path], out: Path, panels: Sequence[Panel] = PANELS) -> tuple[list[Path], list[str]]:
    """Write one PNG per panel with data plus ``overview.png``; returns ``(files, panels without data)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_runs(root)
    drawn: list[tuple[Panel, Runs]] = []
    empty: list[str] = []
    for panel in panels:
        found = panel_runs(panel, runs)
        (drawn.append((panel, found)) if found else empty.append(panel.name))
    if drawn:  # nothing to draw: no empty folder left behind (issue 21, finding 8)
        out.mkdir(parents=True, exist_ok=True)
    files = []
    for panel, found in drawn:
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        _draw(ax, panel, found)
        fig.tight_layout()
        path = out / f"{panel.name}.png"
        fig.savefig(path)
        plt.close(fig)
        files.append(path)
    if drawn:
        cols = min(3, len(drawn))
        rows = (len(drawn) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), dpi=100, squeeze=False)
        for ax, (panel, found) in zip(axes.flat, drawn, strict=False):
            _draw(ax, panel, found)
        for ax in list(axes.flat)[len(drawn) :]:
            ax.axis("off")
        fig.suptitle("ReTool runs: " + ", ".join(runs), fontsize=9)
        fig.tight_layout()
        path = out / "overview.png"
        fig.savefig(path)
        plt.close(fig)
        files.append(path)
    return files, empty


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Draw ReTool runs' curves (val acc by the kit's verifier and by verl's strict rule, reward, "
        "response length, turns/tool rounds, entropy, step time, SFT loss) as PNGs from their tensorboard event "
        "files; several runs are drawn as one line each.",
        epilog="panels: " + ", ".join(f"{p.name} ({', '.join(p.patterns)})" for p in PANELS),
    )
    parser.add_argument(
        "logdirs", nargs="+", type=input_path(), help="tensorboard folder(s) (searched recursively) or event file(s)"
    )
    parser.add_argument(
        "--out", type=output_folder("empty"), help="folder for the PNGs (created; required unless --list-tags)"
    )
    parser.add_argument(
        "--force", action="store_true", help="draw into a non-empty --out (PNGs of the same name are replaced)"
    )
    parser.add_argument("--panels", help="comma-separated subset of the panels (default: all)")
    parser.add_argument("--list-tags", action="store_true", help="print the runs and scalar tags found and exit")
    return parser


def _error(what: str, fix: str = "") -> int:
    return fail(PROG, what, fix, EXIT_USAGE)


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = [str(d) for d in args.logdirs if not Path(d).exists()]
    if missing:
        return _error(f"{', '.join(missing)}: no such folder", "give the run's tensorboard folder, TENSORBOARD_DIR")
    if args.out is not None and not args.list_tags:  # issue 33: these failed after every event file was read
        if args.out.exists() and not args.out.is_dir():
            return _error(f"--out {args.out} is a file, not a folder", "name a folder for the PNGs")
        check_writable("--out", args.out, folder=True)  # /proc, a read-only mount
    for file in (d for d in args.logdirs if d.is_file()):
        why = not_an_event_file(file)
        if why:
            return _error(f"{file} {why}", "give the run's tensorboard folder, TENSORBOARD_DIR, or an event file in it")
    if not any(event_files(d) for d in args.logdirs):
        return _error(f"no tensorboard event files under {', '.join(map(str, args.logdirs))}")
    if args.list_tags:
        for run, scalars in read_runs(args.logdirs).items():
            print(f"run {run}:")
            for tag, points in sorted(scalars.items()):
                print(f"  {tag}  ({len(points)} points)")
        return 0
    if args.out is None:
        return _error("--out DIR is required to draw the panels", "--list-tags only lists what was logged")
    panels = list(PANELS)
    if args.panels:
        names = [n.strip() for n in args.panels.split(",") if n.strip()]
        unknown = sorted(set(names) - {p.name for p in PANELS})
        if unknown:
            return _error(f"--panels: unknown {', '.join(unknown)}", f"choose from {', '.join(p.name for p in PANELS)}")
        panels = [p for p in PANELS if p.name in names]
    files, empty = plot(args.logdirs, args.out, panels)
    for file in files:
        print(f"wrote {file}")
    if empty:
        print(f"no data for: {', '.join(empty)}")
    return EXIT_OK if files else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
