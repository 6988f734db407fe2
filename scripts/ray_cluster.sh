#!/usr/bin/env bash
# Multi-node Ray for the kit's RL recipes: start the head, join workers, check that every node joined with its
# devices, optionally one code sandbox per node (--with-sandbox). Everything but sourcing the platform's setup
# scripts (CANN's and ATB's set_env.sh on Ascend hosts: Ray then counts NPUs with pyACL, vllm-ascend finds
# libatb.so, and every Ray worker inherits that environment from the raylet) happens in Python:
# `python -m recipes.launch.cluster --help` (recipes/launch/cluster.py) parses the options, applies the hardware
# profile's RL environment, sets the socket-interface variables and runs `ray start`.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
# shellcheck source=lib/platform_env.sh
source "$KIT_ROOT/scripts/lib/platform_env.sh"

# Every platform's scripts present here (only NPU has any); Python fails on a profile's missing one (--dry-run: notes).
kit_source_setup_scripts
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$(kit_python)" -m recipes.launch.cluster "$@"
