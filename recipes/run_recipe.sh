#!/usr/bin/env bash
# Launch one of the kit's ReTool recipes with verl: the shared body of recipes/run_<recipe>_npu.sh.
#   bash recipes/run_recipe.sh RECIPE [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [HYDRA_OVERRIDES...]
# This script only sources the platform's setup scripts (CANN, ATB: they must precede any process that loads
# torch_npu) and hands everything to `python -m recipes.launch run`, which picks the profile, applies its
# environment for the recipe's phase, composes and checks the config, prints the table and execs the verl command.
# --help lists the options and the environment inputs (MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL, ...).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib/stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
# --stack picks the stack's pins and venv (.venv or .venv-<stack>); Python checks the option again and says more.
kit_use_stack "$(kit_stack_option "$@")" || exit 2
# shellcheck source=../scripts/lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
# shellcheck source=../scripts/lib/platform_env.sh
source "$KIT_ROOT/scripts/lib/platform_env.sh"

kit_source_setup_scripts
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
python=$(kit_python)
[[ " $* " == *" --help "* || " $* " == *" -h "* ]] || kit_require_verl "$python" || exit 2
exec "$python" -m recipes.launch run "$@"
