"""``retool-plot`` on a small synthetic tensorboard log written with the SummaryWriter verl's tracker uses."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.retool.plot import PANELS, _draw, main, panel_runs, panel_series, read_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(logdir: Path, scale: float = 1.0) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for step in range(0, 4):
        writer.add_scalar("val-core/aime_2025/acc/mean@2", 0.1 * step * scale, step)
        writer.add_scalar("val-aux/aime_2025/acc_strict/mean@2", 0.05 * step * scale, step)
        writer.add_scalar("val-core/smoke_val/acc/mean@2", 0.2 * step, step)
        writer.add_scalar("val-aux/smoke_val/tool_rounds/mean@2", 0.5 + 0.1 * step, step)
        writer.add_scalar("val-aux/smoke_val/used_tool/mean@2", 0.25 + 0.2 * step, step)
        if step == 0:
            continue
        writer.add_scalar("critic/score/mean", -1.4 + 0.3 * step, step)
        writer.add_scalar("critic/rewards/mean", -1.4 + 0.3 * step, step)  # same as score: not drawn twice
        writer.add_scalar("response_length/mean", 40.0 + step, step)
        writer.add_scalar("num_turns/mean", 3.0 + step / 4, step)
        writer.add_scalar("actor/entropy", 2.0 - 0.1 * step, step)
        writer.add_scalar("timing_s/step", 20.0 - step, step)
        writer.add_scalar("training/rollout_probs_diff_mean", 0.001 * step, step)
    writer.close()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_plots_from_a_synthetic_run(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    _write_run(logdir)
    runs = read_runs(logdir)
    assert list(runs) == ["tb"], "one folder of event files is one run"
    scalars = runs["tb"]
    assert scalars["critic/score/mean"][0] == (1, pytest.approx(-1.1))
    assert len(scalars["val-core/smoke_val/acc/mean@2"]) == 4

    reward = next(p for p in PANELS if p.name == "reward")
    assert list(panel_series(reward, scalars)) == ["critic/score/mean"]
    val_acc = next(p for p in PANELS if p.name == "val_acc")
    assert list(panel_series(val_acc, scalars)) == [
        "val-core/aime_2025/acc/mean@2",
        "val-core/smoke_val/acc/mean@2",
        "val-aux/aime_2025/acc_strict/mean@2",
    ], "the strict accuracy is drawn beside the kit's"

    out = tmp_path / "plots"
    assert main([str(logdir), "--out", str(out)]) == 0
    expected = {
        "val_acc",
        "reward",
        "response_length",
        "turns",
        "tool_use",
        "entropy",
        "weight_sync",
        "step_time",
        "overview",
    }
    assert {p.stem for p in out.glob("*.png")} == expected  # sft_loss has no data: skipped, not an empty figure
    for png in out.glob("*.png"):
        width, height = _png_size(png)
        assert width >= 300 and height >= 200 and png.stat().st_size > 5000, png


def test_plot_panel_subset_and_errors(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    _write_run(logdir)
    out = tmp_path / "plots"
    assert main([str(logdir), "--out", str(out), "--panels", "entropy"]) == 0
    assert {p.stem for p in out.glob("*.png")} == {"entropy", "overview"}
    assert main([str(logdir), "--out", str(out), "--panels", "nope"]) == 2
    assert main([str(tmp_path / "empty"), "--out", str(out)]) == 2  # no event files
    assert main([str(logdir), "--out", str(tmp_path / "p2"), "--panels", "sft_loss"]) == 1  # files, but no data
    assert not (tmp_path / "p2").exists()  # nothing drawn: no empty folder left behind (issue 21, finding 8)
    assert main([str(tmp_path / "no-such-run"), "--out", str(out)]) == 2  # a missing folder, named as such


def test_a_file_that_is_not_an_event_file_is_named(tmp_path: Path, capsys) -> None:
    """issue 33: a log file, an empty or a cut event file passed as the run exited 1 with "no data for: <every
    panel>"; now each is a usage error naming the file. A real event file, given as itself, still plots."""
    _write_run(tmp_path / "tb")
    (real,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    assert main([str(real), "--out", str(tmp_path / "p")]) == 0
    (tmp_path / "run.log").write_text("step 1 done\n")
    (tmp_path / "events.out.tfevents.1.empty").write_bytes(b"")
    (tmp_path / "events.out.tfevents.2.cut").write_bytes(real.read_bytes()[:20])
    for name, why in (
        ("run.log", "is not a tensorboard event file"),
        ("events.out.tfevents.1.empty", "is a damaged tensorboard event file: empty"),
        ("events.out.tfevents.2.cut", "is a damaged tensorboard event file: its first record does not fit"),
    ):
        assert main([str(tmp_path / name), "--out", str(tmp_path / "q")]) == 2, name
        assert f"{tmp_path / name} {why}" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def test_two_runs_are_two_lines_with_a_legend(tmp_path: Path) -> None:
    """Issue 14: `retool-plot runA runB` used to merge both runs into one curve (the last value per step won)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _write_run(tmp_path / "runA" / "tensorboard", scale=1.0)
    _write_run(tmp_path / "runB" / "tensorboard", scale=2.0)
    runs = read_runs([tmp_path / "runA" / "tensorboard", tmp_path / "runB" / "tensorboard"])
    assert list(runs) == ["runA", "runB"]
    val_acc = next(p for p in PANELS if p.name == "val_acc")
    fig, ax = plt.subplots()
    _draw(ax, val_acc, panel_runs(val_acc, runs))
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    plt.close(fig)
    assert lines["runA: val: aime_2025/acc/mean@2"] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert lines["runB: val: aime_2025/acc/mean@2"] == pytest.approx([0.0, 0.2, 0.4, 0.6])
    assert lines["runB: val: aime_2025/acc_strict/mean@2"] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert len(lines) == 6  # 3 tags x 2 runs, none merged

    # the same through the CLI, and a parent folder holding both runs gives the same two runs
    assert main([str(tmp_path / "runA"), str(tmp_path / "runB"), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "val_acc.png").stat().st_size > 5000
    assert list(read_runs(tmp_path)) == ["runA", "runB"]


def test_list_tags_needs_no_out(tmp_path: Path, capsys) -> None:
    _write_run(tmp_path / "runA")
    _write_run(tmp_path / "runB")
    assert main([str(tmp_path), "--list-tags"]) == 0
    out = capsys.readouterr().out
    assert "run runA:" in out and "run runB:" in out
    assert "  val-aux/aime_2025/acc_strict/mean@2  (4 points)" in out
    assert main([str(tmp_path)]) == 2
    assert "--out DIR is required" in capsys.readouterr().err


def test_plot_cli_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.retool.plot", "--help"],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0 and "val_acc" in proc.stdout and "tensorboard" in proc.stdout
