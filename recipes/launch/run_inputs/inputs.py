"""Run inputs that come from the environment (MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL, ...), with defaults.

Why environment variables and not YAML: paths differ per cluster and per user, while the recipe YAML is shared and
versioned; and a shell user expects ``MODEL_PATH=... bash recipes/run_...sh``. The launcher turns each input into an
explicit Hydra override (absolute path) so the printed command is complete and copy-pasteable, and so Ray workers on
other nodes never depend on this shell's environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from platforms.base import RL_JOB_ENV_KEY
from platforms.stacks import Stack
from recipes.launch.run_inputs.catalog import KIT_ROOT, MERGED_DIR_NAME, Recipe
from recipes.retool.folders import DEFAULT_CKPT_ROOT, DEFAULT_DATA_DIR, DEFAULT_MODELS_DIR

DEFAULT_SANDBOX_URL = "http://127.0.0.1:8080/run_code"
#: The scale (config group ``scale``) whose default model is the kit's tiny stand-in, not a hub checkpoint.
SMOKE_SCALE = "smoke"

RL_ENV_KEY = RL_JOB_ENV_KEY
"""Job-wide environment of an RL run: Ray applies it to every worker on every node (a worker otherwise inherits its
raylet's environment, which on a multi-node cluster was fixed when ``ray start`` ran)."""

#: Every environment variable the launcher reads, with what it means (``--help`` prints this; docs/recipes.md).
ENV_DOC: dict[str, str] = {
    "MODEL_PATH": "model to train: SFT: the base model (default ~/models/<name>); RL: the merged SFT model "
    f"(default <CKPT_ROOT>/<sft experiment>/{MERGED_DIR_NAME}, what scripts/sft_to_rl.sh writes)",
    "DATA_DIR": f"folder of the prepared parquet files (default {DEFAULT_DATA_DIR})",
    "TRAIN_FILE": "training data (default $DATA_DIR/<recipe's file>)",
    "VAL_FILE": "validation data (default $DATA_DIR/<recipe's file>)",
    "MODELS_DIR": f"where base models live (default {DEFAULT_MODELS_DIR})",
    "CKPT_ROOT": f"root of all checkpoint dirs (default {DEFAULT_CKPT_ROOT})",
    "CKPT_DIR": "this run's checkpoint dir (default $CKPT_ROOT/<experiment_name>)",
    "RETOOL_SANDBOX_URL": f"code sandbox /run_code endpoint, RL only (default {DEFAULT_SANDBOX_URL})",
    "TENSORBOARD_DIR": "tensorboard event dir (default $CKPT_DIR/tensorboard)",
    "MASTER_ADDR, NODE_RANK": "torchrun rendezvous of a multi-node SFT run, on every node",
    "MASTER_PORT": "torchrun rendezvous port (default 29500)",
}


@dataclass(frozen=True)
class Input:
    """One run input: where it goes in the config, its value, and where the value came from."""

    env: str
    key: str
    value: str
    source: str  # "env" (set by the user), "default", or "override" (a Hydra override on the command line won)
    hint: str  # how to produce the thing when it is missing
    add: bool = False  # the key is not in verl's config: the override needs Hydra's "+"

    @property
    def override_key(self) -> str:
        return f"+{self.key}" if self.add else self.key


def _path(value: str, environ: Mapping[str, str]) -> str:
    """Absolute, with ``~`` taken from ``environ``'s HOME (so a plan is a function of the environment it is given)."""
    if value == "~" or value.startswith("~/"):
        value = environ.get("HOME", str(Path.home())) + value[1:]
    return str(Path(value).expanduser().absolute())


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def ckpt_root(environ: Mapping[str, str]) -> Path:
    return Path(_path(_env(environ, "CKPT_ROOT") or DEFAULT_CKPT_ROOT, environ))


def default_model_path(recipe: Recipe, hw: str, environ: Mapping[str, str], scale: str = "full") -> str:
    """SFT: the base model (at the smoke scale the kit's tiny stand-in); RL: the SFT stage's merged checkpoint."""
    if recipe.phase == "rl":
        assert recipe.sft_recipe is not None
        return str(ckpt_root(environ) / f"{recipe.sft_recipe}_{hw}" / MERGED_DIR_NAME)
    if scale == SMOKE_SCALE:
        return str(KIT_ROOT / "build" / f"tiny-{recipe.model.tiny_arch}")
    models = _path(_env(environ, "MODELS_DIR") or DEFAULT_MODELS_DIR, environ)
    return str(Path(models) / recipe.model.hf_name.split("/")[-1])


def _model_hint(recipe: Recipe, hw: str, stack: Stack, scale: str) -> str:
    if recipe.phase == "rl":
        return f"run the SFT stage, then scripts/sft_to_rl.sh --recipe {recipe.sft_recipe} --hw {hw}{stack.cli_option}"
    if scale == SMOKE_SCALE:
        arch = recipe.model.tiny_arch
        return f"python -m recipes.smoke.tiny_model --arch {arch} --out build/tiny-{arch}"
    name = recipe.model.hf_name
    return f"hf download {name} --local-dir ~/models/{name.split('/')[-1]}"


def _data_hint(recipe: Recipe, which: str) -> str:
    if recipe.phase == "sft":
        return "retool-prepare sft --input JoeYing/ReTool-SFT --output <file>"
    if which == "train":
        return "retool-prepare rl --input BytedTsinghua-SIA/DAPO-Math-17k --output <file>"
    return "retool-prepare val --input yentinglin/aime_2025 --output <file>"


def model_key(recipe: Recipe, stack: Stack) -> str:
    """The model's config key: SFT's is the stack's (0.6.1 model.partial_pretrain, 0.9.1 model.path)."""
    return stack.verl.sft_key("model_path") if recipe.phase == "sft" else "actor_rollout_ref.model.path"


def resolve(
    recipe: Recipe, hw: str, stack: Stack, environ: Mapping[str, str] | None = None, scale: str = "full"
) -> list[Input]:
    """The environment-derived inputs of a run on ``stack`` (all but CKPT_DIR, which needs the composed experiment
    name)."""
    environ = os.environ if environ is None else environ
    data_dir = _path(_env(environ, "DATA_DIR") or DEFAULT_DATA_DIR, environ)
    model = _env(environ, "MODEL_PATH")
    train = _env(environ, "TRAIN_FILE")
    val = _env(environ, "VAL_FILE")
    inputs = [
        Input(
            "MODEL_PATH",
            model_key(recipe, stack),
            _path(model, environ) if model else default_model_path(recipe, hw, environ, scale),
            "env" if model else "default",
            _model_hint(recipe, hw, stack, scale),
        ),
        Input(
            "TRAIN_FILE",
            "data.train_files",
            _path(train, environ) if train else str(Path(data_dir) / recipe.train_file),
            "env" if train else "default",
            _data_hint(recipe, "train"),
        ),
        Input(
            "VAL_FILE",
            "data.val_files",
            _path(val, environ) if val else str(Path(data_dir) / recipe.val_file),
            "env" if val else "default",
            _data_hint(recipe, "val"),
        ),
    ]
    if recipe.phase == "rl":
        url = _env(environ, "RETOOL_SANDBOX_URL")
        inputs.append(
            Input(
                "RETOOL_SANDBOX_URL",
                f"{RL_ENV_KEY}.RETOOL_SANDBOX_URL",
                url or DEFAULT_SANDBOX_URL,
                "env" if url else "default",
                "retool-sandbox serve --host 127.0.0.1 --port 8080 (or point it at a SandboxFusion)",
                add=True,
            )
        )
    return inputs


def ckpt_input(experiment_name: str, environ: Mapping[str, str] | None = None) -> Input:
    """CKPT_DIR, defaulting to ``$CKPT_ROOT/<experiment_name>`` of the composed config."""
    environ = os.environ if environ is None else environ
    value = _env(environ, "CKPT_DIR")
    return Input(
        "CKPT_DIR",
        "trainer.default_local_dir",
        _path(value, environ) if value else str(ckpt_root(environ) / experiment_name),
        "env" if value else "default",
        "a writable folder (created by the trainer)",
    )
