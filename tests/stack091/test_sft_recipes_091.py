"""The SFT recipes compose against verl 0.9.1's engine-based SFT trainer (``sft_trainer_engine.yaml``), on every
profile, with the recipes' stack-neutral ``sft:`` values at the keys 0.9.1 reads (recipes/config/verl_sft/0.9.1.yaml)
and the launcher reading and overriding the same keys (platforms/stacks.py SFT_KEYS). Why: verl 0.7.1 removed
fsdp_sft_trainer (#5382) and renamed its keys; a key left at its 0.6.1 name would either stop Hydra or, worse, be
ignored by verl without a word. Runs under the current stack's interpreter (``bash scripts/test.sh --stack 0.9.1``);
skips under another verl.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dry_run_cases import PROFILES, Case, foreign_patches, run_case
from kit_testing import installed_verl, needs_verl_09
from omegaconf import OmegaConf

from platforms import stacks

VERL = installed_verl()
pytestmark = needs_verl_09()

SFT_RECIPES = ("qwen3_4b_sft", "qwen2.5_7b_sft", "qwen2.5_32b_sft")


def _dry_run(recipe: str, hw: str, tmp_path: Path, *overrides: str) -> tuple[int, str]:
    args = (recipe, "--hw", hw, "--dry-run", "--no-path-check", "--stack", "0.9.1", *overrides)
    return run_case(Case(f"{recipe}__{hw}__091", args, model=hw == "cpu"), tmp_path)


@pytest.mark.parametrize("hw", PROFILES)
@pytest.mark.parametrize("recipe", SFT_RECIPES)
def test_every_sft_recipe_dry_runs_on_the_current_stack(recipe: str, hw: str, tmp_path: Path) -> None:
    rc, out = _dry_run(recipe, hw, tmp_path)
    assert rc == 0, out
    assert "dry run OK" in out
    assert "stack 0.9.1: verl 0.9.1" in out
    assert "entry:           torchrun -m verl.trainer.sft_trainer" in out
    assert foreign_patches(out, stacks.get("0.9.1")) == []  # no credit to the reference's series (issue 52 row 5)
    command = out[out.index("-m verl.trainer.sft_trainer \\") :]
    assert "stack=0.9.1" in command  # picks verl_sft/0.9.1.yaml: sft_trainer_engine
    assert "model.path=" in command
    for old in ("fsdp_sft_trainer", "model.partial_pretrain", "model.strategy", "model.fsdp_config", " use_remove"):
        assert old not in command, old
    if hw == "cpu":  # fp32 + FSDP2 + the kit's attention, at 0.9.1's keys
        for key in ("engine.strategy=fsdp2", "++model.override_config.attn_implementation=kit_packed_sdpa"):
            assert key in command
        for field in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            assert f"++engine.mixed_precision.{field}=fp32" in command
        assert "dtype:           fp32 compute (trainer); parameters fp32" in out


def _composed(recipe: str, hw: str, *overrides: str):  # noqa: ANN202 - a DictConfig
    """The recipe composed as the launcher composes it for the current stack (the stack handed over, not read)."""
    from platforms import stacks
    from recipes.launch.planning import compose
    from recipes.launch.run_inputs import catalog

    entry = catalog.get(recipe)
    return compose.compose(entry, [f"profile={hw}", *compose.stack_overrides(entry, stacks.CURRENT), *overrides])


@pytest.mark.parametrize("recipe", SFT_RECIPES)
def test_the_neutral_values_sit_where_the_launcher_reads_them(recipe: str) -> None:
    """verl_sft/0.9.1.yaml and SFT_KEYS["0.9.1"] name the same keys (the yaml places, the launcher reads)."""
    from platforms import stacks

    cfg = _composed(recipe, "a3")
    verl = stacks.CURRENT.verl
    for role, value in cfg.sft.items():
        assert OmegaConf.select(cfg, verl.sft_key(str(role))) == value, role
    for old in ("ulysses_sequence_parallel_size", "use_remove_padding", "model.partial_pretrain", "data.multiturn"):
        assert OmegaConf.select(cfg, old, default="absent") == "absent", old
    # verl 0.9.1's defaults that would change the reference's run: set back (verl_sft/0.9.1.yaml)
    assert (cfg.optim.lr, cfg.optim.lr_scheduler_type, cfg.optim.lr_warmup_steps_ratio) == (1e-5, "cosine", 0.1)
    assert list(cfg.optim.betas) == [0.9, 0.95] and cfg.data.use_dynamic_bsz is False


@pytest.mark.parametrize("recipe", SFT_RECIPES)
def test_the_smoke_scale_loads_batches_in_the_training_rank(recipe: str) -> None:
    """data.num_workers, 0.9.1's own key (sft_trainer_engine.yaml:40, read at verl/trainer/sft_trainer.py:250) and the
    reference's through patch 0032: 0 at the smoke scale, verl's 8 at the full one
    (docs/measurements/sft_dataloader_workers.yaml)."""
    assert _composed(recipe, "cpu").data.num_workers == 0
    assert _composed(recipe, "a3").data.num_workers == 8


def test_verl_builds_its_engine_and_optimiser_from_the_unresolved_config() -> None:
    """verl resolves the yaml's ``${sft.*}`` interpolations itself when it builds its dataclasses (sft_trainer.py
    :142-143 gets the config as Hydra composed it)."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _composed("qwen2.5_32b_sft", "a3")
    engine, optim = omega_conf_to_dataclass(cfg.engine), omega_conf_to_dataclass(cfg.optim)
    assert (engine.strategy, engine.ulysses_sequence_parallel_size) == ("fsdp", 8)
    assert (optim.lr, optim.lr_scheduler_type) == (1e-5, "cosine")


def test_a_neutral_override_works_and_an_old_key_is_refused(tmp_path: Path) -> None:
    rc, out = _dry_run("qwen3_4b_sft", "cpu", tmp_path, "sft.ulysses_sequence_parallel_size=2")
    assert rc == 0, out
    assert "Ulysses SP 2 -> data-parallel 1" in out
    # 0.6.1's key: refused in one line before any work, naming 0.9.1's (issue 52 row 4, test_stack_rules_091.py)
    rc, out = _dry_run("qwen3_4b_sft", "cpu", tmp_path / "old", "ulysses_sequence_parallel_size=2")
    assert rc == 2 and out == "", out
