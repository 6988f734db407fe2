#!/usr/bin/env bash
# ReTool stage 1 for Qwen2.5-7B-Instruct: multi-turn SFT (config recipes/config/retool_qwen2.5_7b_sft.yaml) on one
# A2 (8 NPUs, the reference's layout) or one A3. Reference: verl 0.6.1 recipe/retool/run_qwen2_7b_sft_npu.sh.
#   bash recipes/run_qwen2.5_7b_sft_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen2.5_7b_sft "$@"
