#!/usr/bin/env bash
# RL checkpoint -> Hugging Face model: merge global_step_N/actor (verl FSDP shards) of an RL run into a plain HF
# folder with verl.model_merger's FSDP merge (recipes/launch/handoffs/merger.py), for scripts/eval_model.sh or a
# release.
#   bash scripts/rl_to_hf.sh --recipe qwen3_4b --hw a3 [--stack S] [--step N] [--ckpt-dir DIR] [--target DIR]
#        [--force] [--dry-run]
# The logic lives in recipes/launch/handoffs/export.py (--help lists the defaults); it shares the SFT hand-off's
# merge (recipes/launch/handoffs/handoff.py: temporary folder + rename, kit_merge.json, --force rules).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default) and its interpreter, which must have its verl
# (the merge runs verl's model merger in it). No setup scripts: the merger runs on CPU by design, and never lets an
# installed torch_npu auto-load (it needs CANN).
kit_enter --verl required -- "$@"
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
exec "$KIT_PY" -m recipes.launch.handoffs.export "$@"
