#!/usr/bin/env bash
# Launch one of the kit's ReTool recipes with verl: the shared body of recipes/run_<recipe>_npu.sh.
#   bash recipes/run_recipe.sh RECIPE [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [HYDRA_OVERRIDES...]
# This script only sources the platform's setup scripts (CANN, ATB: they must precede any process that loads
# torch_npu) and hands everything to `python -m recipes.launch run`, which picks the profile, applies its
# environment for the recipe's phase, composes and checks the config, prints the table and execs the verl command.
# --help lists the options and the environment inputs (MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL, ...).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default), CANN/ATB, the stack's interpreter with its verl.
kit_enter --setup-scripts --verl required -- "$@"
exec "$KIT_PY" -m recipes.launch run "$@"
