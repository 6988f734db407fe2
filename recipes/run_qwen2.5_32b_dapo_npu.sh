#!/usr/bin/env bash
# ReTool stage 2 at paper scale: agent-loop RL of the SFT'd Qwen2.5-32B (config
# recipes/config/retool_qwen2.5_32b_dapo.yaml) on 2 x A3 or 4 x A2. Start Ray on every node first
# (scripts/ray_cluster.sh head|worker), then run this on the head node. Reference: verl's run_qwen2-32b_dapo.sh.
#   bash recipes/run_qwen2.5_32b_dapo_npu.sh [--hw PROFILE] [--dry-run] [--no-path-check] [--max-restarts N] [hydra overrides...]
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_recipe.sh" qwen2.5_32b_dapo "$@"
