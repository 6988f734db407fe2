#!/usr/bin/env bash
# RL checkpoint -> Hugging Face model: merge global_step_N/actor (verl FSDP shards) of an RL run into a plain HF
# folder with verl.model_merger's FSDP merge (recipes/launch/merger.py), for scripts/eval_model.sh or a release.
#   bash scripts/rl_to_hf.sh --recipe qwen3_4b --hw a3 [--step N] [--ckpt-dir DIR] [--target DIR] [--force] [--dry-run]
# The logic lives in recipes/launch/export.py (--help lists the defaults); it shares the SFT hand-off's merge
# (recipes/launch/handoff.py: temporary folder + rename, kit_merge.json, --force rules).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# The merger runs on CPU by design: never let an installed torch_npu auto-load (it needs CANN) just for this.
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
exec "$(kit_python)" -m recipes.launch.export "$@"
