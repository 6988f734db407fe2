#!/usr/bin/env bash
# ReTool stage 1 at paper scale: multi-turn SFT of Qwen2.5-32B-Instruct (config
# recipes/config/retool_qwen2.5_32b_sft.yaml) on 2 x A3 or 4 x A2; run it on every node with MASTER_ADDR (node 0)
# and NODE_RANK set. Reference: verl's recipe/retool/run_qwen2-32b_sft.sh.
#   bash recipes/run_qwen2.5_32b_sft_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen2.5_32b_sft "$@"
