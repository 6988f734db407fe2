# shellcheck shell=bash
# Sourced, not run: the one opening of the kit's shell entry points (recipes/run_recipe.sh, scripts/smoke.sh,
# sft_to_rl.sh, rl_to_hf.sh, eval_model.sh, ray_cluster.sh, bench_learn.sh), so they choose the stack, the
# interpreter and the platform's environment the same way. Expects KIT_ROOT (each script derives it from its path).
#
#   kit_enter [--setup-scripts] [--verl required|matching] -- ARGS...
#
# 1. the stack, by the one rule (--stack among ARGS, else KIT_STACK, else the verl of the interpreter the user would
#    run, else the default: kit_use_stack, scripts/lib/stack.sh): its pins and folders set, KIT_STACK exported so
#    every child (the launcher, verl, Ray's workers) serves the same stack;
# 2. --setup-scripts: the platform's setup scripts (CANN's and ATB's set_env.sh where present), before any Python
#    that loads torch_npu or counts NPUs (scripts/lib/platform_env.sh);
# 3. PYTHONPATH with the kit first (after the setup scripts, which prepend their own), exported; KIT_PY, the
#    interpreter the command runs (kit_python: KIT_PYTHON, the active venv, the stack's venv, python3; not exported);
# 4. --verl, unless ARGS ask for --help: KIT_PY must have the stack's verl ("required": the command imports it) or
#    at least no other stack's ("matching": its children do) (kit_check_verl, scripts/lib/kit_python.sh).
# A bad stack or interpreter ends the calling script: one line, exit 2.

# shellcheck source=stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
# shellcheck source=kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
# shellcheck source=platform_env.sh
source "$KIT_ROOT/scripts/lib/platform_env.sh"

kit_enter() {
  local setup=0 verl="" arg
  while (($#)); do
    case $1 in
      --setup-scripts) setup=1 ;;
      --verl) verl=${2:?kit_enter: --verl needs required or matching}; shift ;;
      --) shift; break ;;
      *) echo "kit_enter: unknown option $1" >&2; exit 2 ;;
    esac
    shift
  done
  kit_use_stack "$(kit_stack_option "$@")" || exit 2
  if ((setup)); then
    kit_source_setup_scripts || exit 1
  fi
  export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
  KIT_PY=$(kit_python)
  [[ -n $verl ]] || return 0
  for arg in "$@"; do
    [[ $arg == -h || $arg == --help ]] && return 0 # help needs no verl, and names --stack whatever is installed
  done
  kit_check_verl "$KIT_PY" "$verl" || exit 2
}
