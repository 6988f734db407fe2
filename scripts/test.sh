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
  bash scripts/test.sh                      # everything, as CI runs it (two phases, below)
  bash scripts/test.sh tests/test_device.py # one file
  bash scripts/test.sh -m 'not slow'        # skip the end-to-end trainer runs
  bash scripts/test.sh -m learn             # only the learning check (the main job, ~10 min)
  bash scripts/test.sh -m fast_smoke        # the --fast pipeline check, left out of the default run
  bash scripts/test.sh -m unpatched_e2e     # the end-to-end resume runs on verl less patch 0024/0025, left out too

Without arguments it runs in two phases: the quick tests on KIT_TEST_WORKERS pytest-xdist workers (default 2,
1 on a one-core machine: plain pytest), then the end-to-end runs and the timing-bound tests ('slow or serial',
tests/conftest.py) one at a time. With arguments it is one plain pytest run.
EOF
  exit 0
fi

# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
venv_start=$SECONDS
kit_ensure_venv
venv_s=$((SECONDS - venv_start))

export TORCH_DEVICE_BACKEND_AUTOLOAD=0 # never auto-import torch_npu (no CANN here)
export KIT_ALLOW_EPHEMERAL_CKPT=1      # tests write throwaway checkpoints, also inside a container's own filesystem
export KIT_VERL_TREE="$KIT_ROOT/build/verl"
export PYTHONUNBUFFERED=1
if (($# > 0)); then
  echo "== pytest"
  exec "$KIT_PYTHON" -m pytest "$@"
fi

# The default run. Most of the quick tests wait on a subprocess that uses one core (an interpreter importing
# torch/verl, a vLLM engine on a tiny model): two at a time halve their wall time on 2 cores (measured: 1,339 tests
# in 20.3 min alone, 10.7 min on 2 workers). The end-to-end runs use every core and most of the memory, and the
# serial tests hold wall-clock bounds: they run alone, after. Both phases run; the exit status is the worse.
workers=${KIT_TEST_WORKERS:-$(($(nproc) >= 2 ? 2 : 1))}
parallel=()
if ((workers > 1)); then
  parallel=(-n "$workers" --dist loadfile) # a module's fixtures (a built model, a verl tree) stay on one worker
fi
status=0
echo "== pytest, phase 1 of 2: the quick tests (${workers} worker(s))"
phase_start=$SECONDS
"$KIT_PYTHON" -m pytest -m "not slow and not serial" "${parallel[@]}" || status=$?
phase1_s=$((SECONDS - phase_start))
echo "== pytest, phase 2 of 2: the end-to-end runs and the timing-bound tests, one at a time"
rc=0
phase_start=$SECONDS
"$KIT_PYTHON" -m pytest -m "slow or serial" || rc=$?
phase2_s=$((SECONDS - phase_start))
# Where CI's minutes go, one line a user and CI's log can compare run to run (wall seconds of this machine).
echo "== test.sh wall time: venv ${venv_s} s, phase 1 ${phase1_s} s (exit ${status}), phase 2 ${phase2_s} s" \
  "(exit ${rc}), total $((venv_s + phase1_s + phase2_s)) s"
if ((rc > status)); then
  status=$rc
fi
if ((status != 0)); then
  echo "test.sh: FAILED (exit $status): see the failures of each phase above" >&2
fi
exit "$status"
