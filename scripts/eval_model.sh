#!/usr/bin/env bash
# Score a Hugging Face model (base, merged SFT, merged RL) on the RL recipe's validation set (AIME) with the kit's
# sandbox, verifier and retool-eval: the RL recipe run with trainer.val_only=True through the kit's launcher, then
# retool-eval on its dump; report in $CKPT_ROOT/eval/LABEL/eval.md.
#   bash scripts/eval_model.sh --recipe qwen3_4b --hw a3 --model DIR --name LABEL [--n 30] [--force] [--dry-run] [overrides...]
# The logic lives in recipes/launch/eval_model.py (--help lists the defaults).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$(kit_python)" -m recipes.launch.eval_model "$@"
