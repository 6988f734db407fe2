"""``retool-plot`` on a small synthetic tensorboard log written with the SummaryWriter verl's tracker uses."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT, kit_env

from recipes.retool.plot import main, panel_series, read_scalars

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(logdir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for step in range(0, 4):
        writer.add_scalar("val-core/aime_2025/acc/mean@2", 0.1 * step, step)
        writer.add_scalar("val-core/smoke_val/acc/mean@2", 0.2 * step, step)
        writer.add_scalar("val-aux/smoke_val/tool_rounds/mean@2", 0.5 + 0.1 * step, step)
        if step == 0:
            continue
        writer.add_scalar("critic/score/mean", -1.4 + 0.3 * step, step)
        writer.add_scalar("critic/rewards/mean", -1.4 + 0.3 * step, step)  # same as score: not drawn twice
        writer.add_scalar("response_length/mean", 40.0 + step, step)
        writer.add_scalar("num_turns/mean", 3.0 + step / 4, step)
        writer.add_scalar("actor/entropy", 2.0 - 0.1 * step, step)
        writer.add_scalar("timing_s/step", 20.0 - step, step)
    writer.close()


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_plots_from_a_synthetic_run(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    _write_run(logdir)
    scalars = read_scalars(logdir)
    assert scalars["critic/score/mean"][0] == (1, pytest.approx(-1.1))
    assert len(scalars["val-core/smoke_val/acc/mean@2"]) == 4
    from recipes.retool.plot import PANELS

    reward = next(p for p in PANELS if p.name == "reward")
    assert list(panel_series(reward, scalars)) == ["critic/score/mean"]

    out = tmp_path / "plots"
    assert main([str(logdir), "--out", str(out)]) == 0
    expected = {"val_acc", "reward", "response_length", "turns", "entropy", "step_time", "overview"}
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


def test_plot_cli_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.retool.plot", "--help"],
        capture_output=True,
        text=True,
        env=kit_env(),
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0 and "val_acc" in proc.stdout and "tensorboard" in proc.stdout
