"""The kit's launch recipes as data: which Hydra config, which stage, which base model, which data files.

Why a table next to the YAML: the launcher needs a few facts before (or without) composing a config — the stage
decides the environment preset and the entry point, the base model decides the default MODEL_PATH and the head
counts that bound sequence and tensor parallelism when the model itself is not on this machine (a dry run on a
laptop), and the RL recipe must know which SFT recipe feeds it (its default MODEL_PATH is that stage's merged model).
Everything trainable (batch sizes, lengths, parallelism) stays in ``recipes/config/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = KIT_ROOT / "recipes" / "config"

#: The sub-folder of an SFT checkpoint directory that scripts/sft_to_rl.sh merges into, and that an RL recipe's
#: default MODEL_PATH points at.
MERGED_DIR_NAME = "hf_merged"


@dataclass(frozen=True)
class ModelFacts:
    """What bounds parallelism: Ulysses SP and vLLM TP must divide the attention heads (or KV heads)."""

    hf_name: str
    num_attention_heads: int
    num_key_value_heads: int
    tiny_arch: str  # the architecture of the kit's tiny stand-in on the cpu profile (recipes.smoke.tiny_model)


@dataclass(frozen=True)
class Recipe:
    """One model x stage: ``name`` is also the folder under ``recipes/config/scaling/`` with its hardware deltas."""

    name: str
    config_name: str
    phase: str  # "sft" or "rl": the platform's environment for the phase and the verl entry point
    model: ModelFacts
    train_file: str  # default file names under DATA_DIR, as ``python -m recipes.retool.prepare`` writes them
    val_file: str
    sft_recipe: str | None = None  # RL only: the stage whose merged checkpoint is the default MODEL_PATH
    reference: str = ""

    @property
    def script(self) -> str:
        return f"recipes/run_{self.name}_npu.sh"

    def experiment_name(self, hw: str) -> str:
        """The convention every scaling file follows (tests check it): one experiment, one checkpoint dir per hw."""
        return f"{self.name}_{hw}"


QWEN3_4B = ModelFacts("Qwen/Qwen3-4B-Instruct-2507", 32, 8, "qwen3")
QWEN25_32B = ModelFacts("Qwen/Qwen2.5-32B-Instruct", 40, 8, "qwen2")

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "qwen3_4b_sft",
            "retool_qwen3_4b_sft",
            "sft",
            QWEN3_4B,
            "retool_sft.parquet",
            "retool_sft.parquet",
            reference="cann-recipes-train qwen3_tool_agent run_qwen3_4b_sft_npu.sh (1 x A3)",
        ),
        Recipe(
            "qwen3_4b_dapo",
            "retool_qwen3_4b_dapo",
            "rl",
            QWEN3_4B,
            "dapo_math_17k.parquet",
            "aime_2025.parquet",
            sft_recipe="qwen3_4b_sft",
            reference="cann-recipes-train qwen3_tool_agent run_qwen3_4b_dapo_npu.sh (1 x A3)",
        ),
        Recipe(
            "qwen2.5_32b_sft",
            "retool_qwen2.5_32b_sft",
            "sft",
            QWEN25_32B,
            "retool_sft.parquet",
            "retool_sft.parquet",
            reference="verl 0.6.1 recipe/retool/run_qwen2-32b_sft.sh (2 x 8 GPUs)",
        ),
        Recipe(
            "qwen2.5_32b_dapo",
            "retool_qwen2.5_32b_dapo",
            "rl",
            QWEN25_32B,
            "dapo_math_17k.parquet",
            "aime_2025.parquet",
            sft_recipe="qwen2.5_32b_sft",
            reference="verl 0.6.1 recipe/retool/run_qwen2-32b_dapo.sh (2 x 8 GPUs)",
        ),
    )
}


def get(name: str) -> Recipe:
    """A recipe by name; accepts the config name (``retool_...``) too."""
    key = name.removeprefix("retool_")
    if key not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[key]
