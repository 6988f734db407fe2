#!/usr/bin/env bash
# The kit's main job on a machine without NPU time to spare: the whole ReTool pipeline, end to end, in minutes.
# Sets up .venv/ if missing (the same one as scripts/test.sh), then on the detected device (CPU by default) runs,
# each stage timed: tiny Qwen3 + real Qwen tokenizer -> data prep (retool-prepare) -> multi-turn SFT (torchrun,
# verl's SFT trainer, cpu profile) -> merge (scripts/sft_to_rl.sh) -> tool-call check -> sandbox on loopback ->
# agent-loop RL (verl.trainer.main_ppo, cpu profile, the kit's tool and reward) -> retool-eval -> retool-plot.
# The logic is in recipes/smoke/pipeline.py; this script owns the environment and the last-resort cleanup.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$KIT_ROOT"

usage() {
  cat <<EOF
Usage: bash scripts/smoke.sh [--out DIR] [--fast] [--device auto|cpu|cuda|npu] [--force]

End-to-end ReTool smoke run with the real trainers and a tiny random model (no downloads):
  model -> data -> SFT -> merge -> tool-call check -> sandbox -> RL -> eval -> plots
prints a final table (stage, ok/failed, seconds, key metric) and writes OUT/summary.json.
Exits non-zero naming the failed stage. The sandbox is stopped at the end whatever happens.

Options:
  --out DIR     artifacts folder (default: build/smoke/<date>-<time>); must be empty unless --force
  --fast        CI size: 2 RL steps instead of 3 and one validation instead of two (same stages and
                checks; the SFT stays at the ~100 steps the tiny model needs to learn the tool-call format)
  --device D    auto (default: what npu_kernels.device detects), or cpu / cuda / npu
  --force       reuse a non-empty --out (its contents are replaced)
  -h, --help    this text

Artifacts: OUT/logs/<stage>.log, OUT/data/*.parquet, OUT/sft/{ckpt,hf_merged,tensorboard},
OUT/rl/{tensorboard,val_generations,rollouts}, OUT/eval/eval.{md,json}, OUT/plots/*.png, OUT/summary.json.
Measured on 2 CPU cores: about 6.5 min (--fast: about 6 min), SFT ~4 min of it.
EOF
}

OUT=""
ARGS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --out)
      [[ $# -ge 2 ]] || {
        echo "smoke: --out needs a value" >&2
        exit 2
      }
      OUT=$2
      shift 2
      ;;
    --out=*)
      OUT=${1#--out=}
      shift
      ;;
    --fast | --force)
      ARGS+=("$1")
      shift
      ;;
    --device)
      [[ $# -ge 2 ]] || {
        echo "smoke: --device needs a value" >&2
        exit 2
      }
      ARGS+=(--device "$2")
      shift 2
      ;;
    --device=*)
      ARGS+=("$1")
      shift
      ;;
    *)
      echo "smoke: unknown argument '$1' (see --help)" >&2
      exit 2
      ;;
  esac
done
OUT=${OUT:-$KIT_ROOT/build/smoke/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# shellcheck source=../pins.env
source pins.env
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
env_start=$SECONDS
echo "[smoke] stage 0: env (.venv) ..."
kit_ensure_venv
export KIT_SMOKE_ENV_SECONDS=$((SECONDS - env_start))
echo "[smoke] stage 0: env ok in ${KIT_SMOKE_ENV_SECONDS} s"

export TORCH_DEVICE_BACKEND_AUTOLOAD=0 # never auto-import torch_npu for the helpers (the launcher decides per stage)
export PYTHONUNBUFFERED=1
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export KIT_PYTHON

PIPELINE_PID=""
# shellcheck disable=SC2329 # invoked by the EXIT trap
cleanup() {
  # Last resort: the pipeline stops the sandbox itself; this covers a pipeline that was killed.
  local pid_file=$OUT/sandbox.pid pid
  if [[ -n $PIPELINE_PID ]] && kill -0 "$PIPELINE_PID" 2>/dev/null; then
    kill -TERM "$PIPELINE_PID" 2>/dev/null || true
    wait "$PIPELINE_PID" 2>/dev/null || true
  fi
  if [[ -f $pid_file ]]; then
    pid=$(cat "$pid_file")
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      echo "[smoke] stopping the sandbox (pid $pid)" >&2
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    fi
    rm -f "$pid_file"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$KIT_PYTHON" -m recipes.smoke.pipeline run --out "$OUT" "${ARGS[@]}" &
PIPELINE_PID=$!
status=0
wait "$PIPELINE_PID" || status=$?
PIPELINE_PID=""
exit "$status"
