#!/usr/bin/env bash
# Score a Hugging Face model (base, merged SFT, merged RL) on the RL recipe's validation set (AIME) with the kit's
# sandbox, verifier and retool-eval: the RL recipe run with trainer.val_only=True through the kit's launcher, then
# retool-eval on its dump; report in $CKPT_ROOT/eval/LABEL/eval.md.
#   bash scripts/eval_model.sh --recipe qwen3_4b --hw a3 --model DIR --name LABEL [--stack S] [--n 30] [--force]
#        [--dry-run] [overrides...]
# The logic lives in recipes/launch/handoffs/eval_model.py (--help lists the defaults).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default) and its interpreter, which must have its verl:
# the evaluation plans the RL recipe (the launcher composes verl's config) before its child, recipes/run_recipe.sh,
# sources the platform's setup scripts and runs verl.
kit_enter --verl required -- "$@"
exec "$KIT_PY" -m recipes.launch.handoffs.eval_model "$@"
