#!/usr/bin/env bash
# Launch one of the kit's ReTool recipes with verl: the shared body of recipes/run_<recipe>_npu.sh.
#
# 1. hardware profile: --hw, else KIT_HW, else what this machine is (a2, a3 or cuda), else a3 (the reference; on a
#    CPU-only machine that is for --dry-run, a real CPU run wants --hw cpu);
# 2. environment: CANN + ATB set_env.sh on NPU profiles, then the device abstraction's preset for stage + profile
#    (python -m npu_kernels.device env: VERL_USE_EXTERNAL_MODULES=npu_kernels.auto, HCCL/vLLM/allocator settings);
#    PYTHONPATH gets the kit so every verl process (Ray workers included) imports it;
# 3. python -m recipes.launch plan: composes the recipe's Hydra config with the inputs (MODEL_PATH, DATA_DIR, ...)
#    and the overrides given here, runs verl's validation and the kit's checks, prints the table;
# 4. exec the exact verl command it printed (torchrun -m verl.trainer.fsdp_sft_trainer or
#    python -m verl.trainer.main_ppo, --config-path recipes/config --config-name <recipe>, overrides last).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  cat <<EOF
Usage: bash recipes/run_recipe.sh RECIPE [--hw a2|a3|cuda|cpu] [--dry-run] [--no-path-check] [--] [HYDRA_OVERRIDES...]
       (or the per-recipe scripts: bash recipes/run_qwen3_4b_dapo_npu.sh [options] [overrides])

RECIPE: qwen3_4b_sft, qwen3_4b_dapo, qwen2.5_32b_sft, qwen2.5_32b_dapo (Hydra configs in recipes/config/).

Options:
  --hw PROFILE      hardware profile: a2 (8 NPUs/node), a3 (16 dies/node), cuda (8 GPUs), cpu (tiny smoke).
                    Default: \$KIT_HW, else this machine's (a2, a3 or cuda), else a3.
  --dry-run         compose and validate the full config, check paths, print the table and the exact command;
                    start nothing (no Ray, no torchrun, no model).
  --no-path-check   skip the model/data/checkpoint/sandbox checks (plan a cluster run from elsewhere).
  -h, --help        this text.
Everything else is passed to verl as Hydra overrides, e.g. trainer.total_epochs=2 actor_rollout_ref.rollout.n=8.

Inputs (environment): MODEL_PATH, DATA_DIR, TRAIN_FILE, VAL_FILE, MODELS_DIR, CKPT_ROOT, CKPT_DIR,
RETOOL_SANDBOX_URL, TENSORBOARD_DIR; multi-node SFT: MASTER_ADDR, NODE_RANK, MASTER_PORT.
Python: \$KIT_PYTHON, else the active virtualenv's, else $KIT_ROOT/.venv, else python3.
Defaults and meanings: python -m recipes.launch plan --help
EOF
}

# shellcheck source=../scripts/lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"

if [[ $# -eq 0 || $1 == -h || $1 == --help ]]; then
  usage
  exit $(($# == 0 ? 2 : 0))
fi
RECIPE=$1
shift
case $RECIPE in
  *_sft) PHASE=sft ;;
  *_dapo) PHASE=rl ;;
  *)
    echo "run_recipe: unknown recipe '$RECIPE' (qwen3_4b_sft, qwen3_4b_dapo, qwen2.5_32b_sft, qwen2.5_32b_dapo)" >&2
    exit 2
    ;;
esac

HW=${KIT_HW:-}
MODE=--argv
PATH_CHECK=()
OVERRIDES=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --hw)
      [[ $# -ge 2 ]] || {
        echo "run_recipe: --hw needs a value" >&2
        exit 2
      }
      HW=$2
      shift 2
      ;;
    --hw=*)
      HW=${1#--hw=}
      shift
      ;;
    --dry-run)
      MODE=--dry-run
      shift
      ;;
    --no-path-check)
      PATH_CHECK=(--no-path-check)
      shift
      ;;
    --)
      shift
      OVERRIDES+=("$@")
      break
      ;;
    -*)
      echo "run_recipe: unknown option $1 (Hydra overrides look like key=value; see --help)" >&2
      exit 2
      ;;
    *)
      OVERRIDES+=("$1")
      shift
      ;;
  esac
done

PY=$(kit_python)
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z $HW ]]; then
  detected=$("$PY" -m npu_kernels.device detect | sed -n 's/^hardware: //p')
  case $detected in
    a2 | a3 | cuda) HW=$detected ;;
    *) HW=a3 ;; # a CPU-only machine: show the reference plan (--dry-run); a CPU run is --hw cpu
  esac
fi
case $HW in
  a2 | a3 | cuda | cpu) ;;
  *)
    echo "run_recipe: unknown hardware profile '$HW' (a2, a3, cuda, cpu)" >&2
    exit 2
    ;;
esac

if [[ $HW == a2 || $HW == a3 ]]; then
  # CANN before anything imports torch_npu; ATB for vllm-ascend (libatb.so). Absent on a CPU machine (dry run).
  for env_file in "${KIT_ASCEND_ROOT:-/usr/local/Ascend}/ascend-toolkit/set_env.sh" \
    "${KIT_ASCEND_ROOT:-/usr/local/Ascend}/nnal/atb/set_env.sh"; do
    if [[ -f $env_file ]]; then
      set +u # CANN's scripts read unset variables
      # shellcheck source=/dev/null
      source "$env_file"
      set -u
    fi
  done
fi
PRESET=$("$PY" -m npu_kernels.device env --phase "$PHASE" --hw "$HW")
eval "$PRESET"

if [[ $MODE == --dry-run ]]; then
  exec "$PY" -m recipes.launch plan --recipe "$RECIPE" --hw "$HW" --dry-run "${PATH_CHECK[@]}" -- "${OVERRIDES[@]}"
fi
COMMAND_TEXT=$("$PY" -m recipes.launch plan --recipe "$RECIPE" --hw "$HW" --argv "${PATH_CHECK[@]}" -- "${OVERRIDES[@]}")
mapfile -t COMMAND <<<"$COMMAND_TEXT"
echo "run_recipe: exec ${COMMAND[*]}" >&2
exec "${COMMAND[@]}"
