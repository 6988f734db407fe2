#!/usr/bin/env bash
# ReTool stage 2 for Qwen2.5-7B: agent-loop RL of the SFT'd model (config recipes/config/retool_qwen2.5_7b_dapo.yaml)
# on one A2 (8 NPUs, the reference's layout) or one A3. Reference: run_qwen2.5_7b_dapo_npu.sh of verl's
# "Ascend Retool Best Practice" (docs/ascend_tutorial/examples/ascend_retool_best_pratice.rst).
#   bash recipes/run_qwen2.5_7b_dapo_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen2.5_7b_dapo "$@"
