#!/usr/bin/env bash
# ReTool stage 2: agent-loop RL (GRPO, DAPO clip-higher, no KL) of the SFT'd Qwen3-4B with the code sandbox
# (config recipes/config/retool_qwen3_4b_dapo.yaml). Reference: the Ascend sample on one Atlas A3.
#   bash recipes/run_qwen3_4b_dapo_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
# Inputs: MODEL_PATH (default: the merged SFT model), DATA_DIR / TRAIN_FILE / VAL_FILE, CKPT_DIR,
# RETOOL_SANDBOX_URL (see --help).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen3_4b_dapo "$@"
