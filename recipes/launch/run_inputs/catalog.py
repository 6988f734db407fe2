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

KIT_ROOT = Path(__file__).resolve().parents[3]
CONFIG_DIR = KIT_ROOT / "recipes" / "config"

#: The sub-folder of an SFT checkpoint directory that scripts/sft_to_rl.sh merges into, and that an RL recipe's
#: default MODEL_PATH points at.
MERGED_DIR_NAME = "hf_merged"


@dataclass(frozen=True)
class ModelFacts:
    """The base model as its config.json describes it, for plans made where the model is not (a laptop's dry run):
    heads bound Ulysses SP and vLLM TP (they must divide them); the shape gives the parameter count, hence the size
    of a checkpoint and of the weights per device."""

    hf_name: str
    num_attention_heads: int
    num_key_value_heads: int
    tiny_arch: str  # the architecture of the kit's tiny stand-in at the smoke scale (recipes.smoke.tiny_model)
    hidden_size: int
    num_layers: int
    intermediate_size: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool  # Qwen2/Qwen2.5 attention has q/k/v biases; Qwen3 has none but normalises q and k per head

    @property
    def parameters(self) -> int:
        """Parameters of the dense decoder: embeddings (+ an untied lm_head), attention, SwiGLU MLP, norms."""
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        attention = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        attention += (q + 2 * kv) if self.qkv_bias else 2 * self.head_dim  # biases, or q_norm + k_norm weights
        layer = attention + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embeddings + self.hidden_size


@dataclass(frozen=True)
class ReferenceResult:
    """The published number a recipe reproduces, and the training step it was reported at."""

    metric: str
    value: float
    step: int
    source: str


@dataclass(frozen=True)
class Recipe:
    """One model x stage: ``name`` is also the folder under ``recipes/config/scaling/`` with its hardware deltas."""

    name: str
    config_name: str
    phase: str  # "sft" or "rl": the platform's environment for the phase and the verl entry point
    model: ModelFacts
    train_file: str  # default file names under DATA_DIR, as ``retool-prepare`` writes them
    val_file: str
    sft_recipe: str | None = None  # RL only: the stage whose merged checkpoint is the default MODEL_PATH
    reference: str = ""
    reference_result: ReferenceResult | None = None  # RL only: what a faithful run should reach, and when

    @property
    def script(self) -> str:
        return f"recipes/run_{self.name}_npu.sh"

    def experiment_name(self, hw: str) -> str:
        """The convention every scaling file follows (tests check it): one experiment, one checkpoint dir per hw."""
        return f"{self.name}_{hw}"


# Shapes from the checkpoints' config.json (Qwen3-4B: hidden 2560, 36 layers, intermediate 9728, head_dim 128,
# vocab 151936, tied embeddings; Qwen2.5-32B: hidden 5120, 64 layers, intermediate 27648, 128-wide heads, vocab
# 152064, untied, QKV bias): 4.02B and 32.76B parameters (tests/recipes/test_budget.py).
# Qwen2.5-7B-Instruct: hidden 3584, 28 layers, intermediate 18944, 28 query / 4 KV heads of 128, vocab 152064,
# untied, QKV bias (its config.json; the same shape transformers prints for Qwen2-7B-Instruct in
# Retruth/deontic nlp_models/qwen2/README.md: q_proj 3584->3584 and k/v_proj 3584->512 with bias): 7.62B parameters
# (tests/recipes/test_configs.py).
QWEN3_4B = ModelFacts("Qwen/Qwen3-4B-Instruct-2507", 32, 8, "qwen3", 2560, 36, 9728, 128, 151936, True, False)
QWEN25_7B = ModelFacts("Qwen/Qwen2.5-7B-Instruct", 28, 4, "qwen2", 3584, 28, 18944, 128, 152064, False, True)
QWEN25_32B = ModelFacts("Qwen/Qwen2.5-32B-Instruct", 40, 8, "qwen2", 5120, 64, 27648, 128, 152064, False, True)

#: Published results: the Ascend sample (hicann/cann-recipes-train agent_rl/qwen3_tool_agent/README.md, "训练结果":
#: val-core/aime_2025/acc/mean@30 0.29 at step 0, 0.57 after 130 steps) and verl's (recipe/retool/README.md of verl
#: v0.6.1: Qwen2.5-32B 0.24 after SFT, 0.60 after 150 GRPO steps, as quoted in the kit's research notes).
QWEN3_4B_RESULT = ReferenceResult("AIME-2025 mean@30", 0.57, 130, "Ascend sample qwen3_tool_agent README")
QWEN25_32B_RESULT = ReferenceResult("AIME-2025 mean@30", 0.60, 150, "verl recipe/retool README")

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
            reference_result=QWEN3_4B_RESULT,
        ),
        Recipe(
            "qwen2.5_7b_sft",
            "retool_qwen2.5_7b_sft",
            "sft",
            QWEN25_7B,
            "retool_sft.parquet",
            "retool_sft.parquet",
            reference="verl 0.6.1 recipe/retool/run_qwen2_7b_sft_npu.sh (1 x 8 NPUs)",
        ),
        Recipe(
            "qwen2.5_7b_dapo",
            "retool_qwen2.5_7b_dapo",
            "rl",
            QWEN25_7B,
            "dapo_math_17k.parquet",
            "aime_2025.parquet",
            sft_recipe="qwen2.5_7b_sft",
            # No result is published for it (the doc gives the script only), hence no reference_result.
            reference="verl docs ascend_retool_best_pratice.rst run_qwen2.5_7b_dapo_npu.sh (1 x Atlas 900 A2)",
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
            reference_result=QWEN25_32B_RESULT,
        ),
    )
}


def get(name: str) -> Recipe:
    """A recipe by name; accepts the config name (``retool_...``) too."""
    key = name.removeprefix("retool_")
    if key not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[key]
