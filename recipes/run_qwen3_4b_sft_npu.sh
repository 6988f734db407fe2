#!/usr/bin/env bash
# ReTool stage 1: multi-turn SFT of Qwen3-4B-Instruct-2507 (config recipes/config/retool_qwen3_4b_sft.yaml).
# Reference: the Ascend sample on one Atlas A3; --hw PROFILE for the other profiles (--help lists them).
#   bash recipes/run_qwen3_4b_sft_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
# Inputs: MODEL_PATH, DATA_DIR / TRAIN_FILE / VAL_FILE, CKPT_DIR (see --help).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen3_4b_sft "$@"
