#!/usr/bin/env bash
# SFT -> RL hand-off: merge the last SFT checkpoint (verl FSDP shards) into a Hugging Face model with
# verl.model_merger's FSDP merge (recipes/launch/merger.py: the dtype and tied embeddings kept), and print the MODEL_PATH / Hydra override the RL recipe expects.
#   bash scripts/sft_to_rl.sh --recipe qwen3_4b --hw a3 [--step N] [--ckpt-dir DIR] [--target DIR] [--force] [--dry-run]
# The logic lives in recipes/launch/handoff.py (--help lists the defaults).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${KIT_PYTHON:-} ]]; then
  PY=$KIT_PYTHON
elif [[ -n ${VIRTUAL_ENV:-} && -x $VIRTUAL_ENV/bin/python ]]; then
  PY=$VIRTUAL_ENV/bin/python
elif [[ -x $KIT_ROOT/.venv/bin/python ]]; then
  PY=$KIT_ROOT/.venv/bin/python
else
  PY=python3
fi
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# The merger runs on CPU by design: never let an installed torch_npu auto-load (it needs CANN) just for this.
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
exec "$PY" -m recipes.launch.handoff "$@"
