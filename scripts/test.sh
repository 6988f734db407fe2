#!/usr/bin/env bash
# The kit's test command (README, .ci/run). Creates .venv/ at the repo root on first use and reuses it:
# CPU torch, verl at the pin with the patch series (scripts/setup_verl.sh --source sdist --install), the kit
# in editable mode with its test extras; then runs pytest. Arguments are passed to pytest.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$KIT_ROOT"
# shellcheck source=../pins.env
source pins.env

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  cat <<EOF
Usage: bash scripts/test.sh [PYTEST_ARGS...]

Sets up .venv/ (created on first use, reused and updated when pins.env, pyproject.toml, patches/ or
scripts/setup_verl.sh change), then runs the kit's tests with pytest. Examples:
  bash scripts/test.sh                      # everything, as CI runs it
  bash scripts/test.sh tests/test_device.py # one file
  bash scripts/test.sh -m 'not slow'        # skip the end-to-end trainer runs
EOF
  exit 0
fi

# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
kit_ensure_venv

export TORCH_DEVICE_BACKEND_AUTOLOAD=0 # never auto-import torch_npu (no CANN here)
export KIT_ALLOW_EPHEMERAL_CKPT=1      # tests write throwaway checkpoints, also inside a container's own filesystem
export KIT_VERL_TREE="$KIT_ROOT/build/verl"
export PYTHONUNBUFFERED=1
echo "== pytest"
exec "$KIT_PYTHON" -m pytest "$@"
