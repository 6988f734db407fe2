#!/usr/bin/env bash
# Multi-node Ray for the kit's RL recipes: start the head, join workers, check that every node joined with its
# devices, optionally one code sandbox per node (--with-sandbox). Everything but sourcing the platform's setup
# scripts (CANN's and ATB's set_env.sh on Ascend hosts: Ray then counts NPUs with pyACL, vllm-ascend finds
# libatb.so, and every Ray worker inherits that environment from the raylet) happens in Python:
# `python -m recipes.launch.cluster.ray_cluster --help` (recipes/launch/cluster/ray_cluster.py) parses the options,
# applies the hardware profile's RL environment, sets the socket-interface variables and runs `ray start`.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default) and its interpreter, whose `ray` starts the
# node: this process imports no verl, but every Ray worker runs the interpreter's, so another stack's is refused.
# Every platform's setup scripts present here (only NPU has any); Python fails on a profile's missing one (--dry-run:
# notes).
kit_enter --setup-scripts --verl matching -- "$@"
exec "$KIT_PY" -m recipes.launch.cluster.ray_cluster "$@"
