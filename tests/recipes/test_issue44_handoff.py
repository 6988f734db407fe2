"""Issue 44, findings 1 and 2: the SFT -> RL hand-off (scripts/sft_to_rl.sh).

1. An unwritable ``--target`` (a path under a regular file, a folder nobody may write in) passed ``--dry-run``
   ("nothing merged", exit 0) and the real run failed 30-45 s later in verl's traceback; both now end in one line,
   exit 2, before the merge starts.
2. The merge wrote every tensor in bf16 (the SFT'd model was fp32), an ``lm_head.weight`` beside a tied embedding,
   and ``model.safetensors`` at mode 0600; it keeps the checkpoint's dtype, the tying and the umask's modes now.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from kit_testing import REPO_ROOT

from platforms.cli_errors import EXIT_OK, EXIT_USAGE
from recipes.launch.handoffs import handoff


def _empty_checkpoint(ckpt: Path) -> None:
    """verl's SFT checkpoint layout with empty shards: enough for every check before the merge."""
    step_dir = ckpt / "global_step_5"
    (step_dir / "huggingface").mkdir(parents=True)
    (step_dir / "huggingface" / "config.json").write_text("{}")
    (step_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (step_dir / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (ckpt / handoff.TRACKER).write_text("5")


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_an_unwritable_target_ends_in_one_line_before_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool, where: str
) -> None:
    ckpt = tmp_path / "ckpt"
    _empty_checkpoint(ckpt)
    if where == "under_a_file":
        (tmp_path / "file").write_text("a regular file")
        target = tmp_path / "file" / "m"
    else:
        target = Path("/proc/kit-issue44/m")  # a folder even root cannot write in (chmod does not stop root)
    argv = ["--hw", "a2", "--ckpt-dir", str(ckpt), "--target", str(target)] + (["--dry-run"] if dry_run else [])
    assert handoff.main(argv) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "nothing merged" not in captured.out and "merge command" not in captured.out
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"sft_to_rl: error: --target {target}: "), lines[0]


def _tied_fp32_checkpoint(root: Path) -> dict:
    """A one-rank fp32 checkpoint of the tiny Qwen3 with ``tie_word_embeddings`` on (as SmolLM2's config has)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from recipes.smoke.tiny_model import build_tiny_qwen

    model_dir = build_tiny_qwen(Path(os.environ.get("KIT_TINY_MODEL_DIR", REPO_ROOT / "build" / "tiny-qwen3")))
    config = AutoConfig.from_pretrained(model_dir)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    step_dir = root / "global_step_3"
    hf_dir = step_dir / "huggingface"
    hf_dir.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors") and item.name != "config.json":
            shutil.copy(item, hf_dir / item.name)
    config.save_pretrained(hf_dir)
    state = model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    torch.save(state, step_dir / "model_world_size_1_rank_0.pt")
    (step_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (root / handoff.TRACKER).write_text("3")
    return {k: v.clone() for k, v in state.items()}


def test_the_merge_keeps_dtype_tying_and_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    expected = _tied_fp32_checkpoint(ckpt)
    target = tmp_path / "merged"
    old_umask = os.umask(0o022)
    try:
        assert handoff.main(["--hw", "cpu", "--ckpt-dir", str(ckpt), "--target", str(target)]) == EXIT_OK
    finally:
        os.umask(old_umask)
    assert f"merged: {target}" in capsys.readouterr().out
    with safe_open(str(target / "model.safetensors"), "pt") as weights:
        keys = set(weights.keys())
        dtypes = {weights.get_slice(k).get_dtype() for k in keys}
    assert "lm_head.weight" not in keys, "a tied lm_head was written as its own tensor"
    assert dtypes == {"F32"}, dtypes
    assert json.loads((target / "config.json").read_text())["dtype"] == "float32"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in target.iterdir()}
    assert set(modes.values()) == {0o644}, modes
    merged = AutoModelForCausalLM.from_pretrained(target, torch_dtype=torch.float32)
    assert merged.config.tie_word_embeddings
    state = merged.state_dict()
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.up_proj.weight"):
        assert torch.equal(state[name], expected[name]), name
