#!/usr/bin/env bash
# ReTool stage 1: multi-turn SFT of Qwen3-4B-Instruct-2507 (config recipes/config/retool_qwen3_4b_sft.yaml).
# Reference: the Ascend sample on one Atlas A3; --hw a2|cuda|cpu for the other profiles.
#   bash recipes/run_qwen3_4b_sft_npu.sh [--hw a2|a3|cuda|cpu] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
# Inputs: MODEL_PATH, DATA_DIR / TRAIN_FILE / VAL_FILE, CKPT_DIR (see --help).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen3_4b_sft "$@"
