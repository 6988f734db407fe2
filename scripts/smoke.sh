#!/usr/bin/env bash
# The kit's main job on a machine without NPU time to spare: ReTool in miniature, end to end, judged: SmolLM2 from
# PyPI -> data prep -> multi-turn SFT -> merge -> tool-call check -> sandbox on loopback -> agent-loop RL ->
# retool-eval -> retool-plot -> did validation accuracy and tool use rise? (--fast: the same pipeline on a tiny
# random Qwen3, what CI runs), each stage timed (--help lists the options).
# Python owns everything (recipes/smoke/cli.py): it checks the options and answers --help before anything slow,
# says which interpreter runs the smoke (the kit's CPU .venv, built here first, or on an NPU/GPU host the image's
# Python), and the pipeline ties its sandbox and trainers to its own life. This script only sources the platform's
# setup scripts (CANN/ATB where installed), builds the venv when asked to, and execs.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default: its pins and venv), then CANN/ATB before any
# Python probes the platform (torch_npu cannot load without CANN's environment). No verl check: check-args says
# which interpreter runs the smoke, and the venv is built below when it is the kit's.
kit_enter --setup-scripts -- "$@"
export PYTHONUNBUFFERED=1

# check-args writes the interpreter to run with on fd 3 ("venv" = the kit's CPU venv), nothing after --help; its
# stdout and stderr stay the terminal's. Any python3 will do: that module imports only the standard library.
exec 4>&1
runner=$("${KIT_PYTHON:-python3}" -m recipes.smoke check-args --runner-fd 3 "$@" 3>&1 1>&4)
exec 4>&-
[[ -n $runner ]] || exit 0

KIT_SMOKE_ENV_SECONDS=0
if [[ $runner == venv ]]; then
  # shellcheck source=lib/venv.sh
  source "$KIT_ROOT/scripts/lib/venv.sh"
  echo "[smoke] stage 0: env (${KIT_VENV##*/}, stack $KIT_STACK) ..."
  env_start=$SECONDS
  (cd "$KIT_ROOT" && kit_ensure_venv)
  KIT_SMOKE_ENV_SECONDS=$((SECONDS - env_start))
  echo "[smoke] stage 0: env ok in ${KIT_SMOKE_ENV_SECONDS} s"
  runner=$KIT_PYTHON
fi
export KIT_SMOKE_ENV_SECONDS
exec "$runner" -m recipes.smoke run "$@"
