"""``retool-plot``: the training curves people look at in a ReTool run, as PNGs, from its tensorboard event files.

    retool-plot RUN/tensorboard --out RUN/plots
    retool-plot CKPT_DIR --out plots --panels val_acc,reward      # any folder: event files are found recursively
    retool-plot SFT/tensorboard RL/tensorboard --out plots        # several runs' tags together (SFT loss + RL)

Why: a run on a cluster without a tensorboard server (or a CI artifact) should still be readable at a glance, and the
metrics that matter for ReTool are spread over many verl tags. One PNG per panel (and ``overview.png`` with all of
them) for the tags found; a panel without data is skipped and listed, and the exit status is 1 only when no panel
has data at all:

* ``val_acc`` — validation accuracy mean@k per data source (``val-core/<source>/acc/mean@k``);
* ``reward`` — mean training reward (``critic/score/mean``; ``critic/rewards/mean`` when it differs);
* ``response_length`` — ``response_length/mean`` (and ``/max``);
* ``turns`` — ``num_turns/mean`` (training and validation) and tool rounds per response
  (``val-aux/<source>/tool_rounds/mean@k``, logged by the kit's reward);
* ``entropy`` — ``actor/entropy``;
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


@dataclass(frozen=True)
class Panel:
    """One figure: title, y label, and the tag patterns (fnmatch) whose series it draws."""

    name: str
    title: str
    ylabel: str
    patterns: tuple[str, ...]


PANELS: tuple[Panel, ...] = (
    Panel("val_acc", "Validation accuracy (mean@k)", "accuracy", ("val-core/*/acc/mean@*",)),
    Panel("reward", "Training reward", "reward", ("critic/score/mean", "critic/rewards/mean")),
    Panel("response_length", "Response length", "tokens", ("response_length/mean", "response_length/max")),
    Panel(
        "turns",
        "Turns and tool rounds per response",
        "count",
        ("num_turns/mean", "val-aux/num_turns/mean", "val-aux/*/tool_rounds/mean@*"),
    ),
    Panel("entropy", "Policy entropy", "nats/token", ("actor/entropy",)),
    Panel("step_time", "Step time", "seconds", ("timing_s/step", "timing_s/gen")),
    Panel("sft_loss", "SFT loss", "loss", ("train/loss", "val/loss")),
)

Series = dict[str, list[tuple[int, float]]]


def event_files(root: Path) -> list[Path]:
    """Tensorboard event files under ``root`` (itself, or found recursively)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("events.out.tfevents.*") if p.is_file())


def read_scalars(roots: Path | Sequence[Path]) -> Series:
    """Every scalar tag under ``roots``: tag -> [(step, value)], sorted by step; a step logged twice keeps the last."""
    from tensorboard.backend.event_processing import event_accumulator

    roots = [roots] if isinstance(roots, Path) else list(roots)
    by_tag: dict[str, dict[int, float]] = defaultdict(dict)
    for file in (f for root in roots for f in event_files(root)):
        acc = event_accumulator.EventAccumulator(str(file), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for event in acc.Scalars(tag):
                by_tag[tag][int(event.step)] = float(event.value)
    return {tag: sorted(points.items()) for tag, points in by_tag.items()}


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


def _label(tag: str) -> str:
    return re.sub(r"^(val-core|val-aux)/", "val: ", tag)


def _draw(ax, panel: Panel, series: Series) -> None:  # noqa: ANN001 (matplotlib Axes)
    for tag, points in series.items():
        steps, values = zip(*points, strict=True)
        ax.plot(steps, values, marker="o", markersize=3, linewidth=1.5, label=_label(tag))
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

    scalars = read_scalars(root)
    out.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[Panel, Series]] = []
    empty: list[str] = []
    for panel in panels:
        series = panel_series(panel, scalars)
        (drawn.append((panel, series)) if series else empty.append(panel.name))
    files = []
    for panel, series in drawn:
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        _draw(ax, panel, series)
        fig.tight_layout()
        path = out / f"{panel.name}.png"
        fig.savefig(path)
        plt.close(fig)
        files.append(path)
    if drawn:
        cols = min(3, len(drawn))
        rows = (len(drawn) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), dpi=100, squeeze=False)
        for ax, (panel, series) in zip(axes.flat, drawn, strict=False):
            _draw(ax, panel, series)
        for ax in list(axes.flat)[len(drawn) :]:
            ax.axis("off")
        roots = [root] if isinstance(root, Path) else list(root)
        fig.suptitle("ReTool run: " + ", ".join(str(r) for r in roots), fontsize=9)
        fig.tight_layout()
        path = out / "overview.png"
        fig.savefig(path)
        plt.close(fig)
        files.append(path)
    return files, empty


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retool-plot",
        description="Draw a ReTool run's curves (val acc, reward, response length, turns/tool rounds, entropy, "
        "step time, SFT loss) as PNGs from its tensorboard event files.",
        epilog="panels: " + ", ".join(f"{p.name} ({', '.join(p.patterns)})" for p in PANELS),
    )
    parser.add_argument(
        "logdirs", nargs="+", type=Path, help="tensorboard folder(s) (searched recursively) or event file(s)"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs (created)")
    parser.add_argument("--panels", help="comma-separated subset of the panels (default: all)")
    parser.add_argument("--list-tags", action="store_true", help="print the scalar tags found and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not any(event_files(d) for d in args.logdirs):
        print(
            f"retool-plot: error: no tensorboard event files under {', '.join(map(str, args.logdirs))}", file=sys.stderr
        )
        return 2
    if args.list_tags:
        for tag, points in sorted(read_scalars(args.logdirs).items()):
            print(f"{tag}  ({len(points)} points)")
        return 0
    panels = list(PANELS)
    if args.panels:
        names = [n.strip() for n in args.panels.split(",") if n.strip()]
        unknown = sorted(set(names) - {p.name for p in PANELS})
        if unknown:
            print(f"retool-plot: error: unknown panel(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
        panels = [p for p in PANELS if p.name in names]
    files, empty = plot(args.logdirs, args.out, panels)
    for file in files:
        print(f"wrote {file}")
    if empty:
        print(f"no data for: {', '.join(empty)}")
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(main())
