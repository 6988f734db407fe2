#!/usr/bin/env bash
# SFT -> RL hand-off: merge the last SFT checkpoint (verl FSDP shards) into a Hugging Face model with
# verl.model_merger's FSDP merge (recipes/launch/handoffs/merger.py: the dtype and tied embeddings kept), and print
# the MODEL_PATH / Hydra override the RL recipe expects.
#   bash scripts/sft_to_rl.sh --recipe qwen3_4b --hw a3 [--stack S] [--step N] [--ckpt-dir DIR] [--target DIR]
#        [--force] [--dry-run]
# The logic lives in recipes/launch/handoffs/handoff.py (--help lists the defaults).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default) and its interpreter, which must have its verl:
# the merge runs verl's model merger in this interpreter, and the RL stage it hands to reads the stack's layout.
# No setup scripts: the merger runs on CPU by design, and never lets an installed torch_npu auto-load (it needs CANN).
kit_enter --verl required -- "$@"
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
exec "$KIT_PY" -m recipes.launch.handoffs.handoff "$@"
