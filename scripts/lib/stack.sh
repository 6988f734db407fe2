# shellcheck shell=bash
# Sourced, not run: the kit's stacks in shell. The shell keeps no reader of its own: `python -m platforms stack` (the
# one resolver, platforms/stacks.py) prints the chosen stack as assignments, and this evaluates them, so shell and
# Python decide the stack by one rule (the --stack flag, else KIT_STACK, else the stack whose verl the interpreter
# has, else pins.env's KIT_DEFAULT_STACK) and see the same pins.
#   kit_use_stack [NAME]: NAME is a --stack value (kit_stack_option). Sets every pin of the stack (VERL_VERSION, ...),
#   KIT_STACK, KIT_VENV (its venv), KIT_VERL_TREE (its patched verl), KIT_PATCH_DIR (its series), KIT_STACK_TESTS
#   (its own tests; empty: the whole suite), KIT_STACKS and KIT_DEFAULT_STACK. A bad name (flag or KIT_STACK): one
#   line, status 2.
# Expects KIT_ROOT.

# kit_stack_python: the interpreter the user would run (KIT_PYTHON, else the active venv's, else python3): the
# stack whose verl it has is the one a command given no --stack and no KIT_STACK serves. The resolver imports only
# the standard library, so any python3 answers.
kit_stack_python() {
  if [[ -n ${KIT_PYTHON:-} ]]; then
    echo "$KIT_PYTHON"
  elif [[ -n ${VIRTUAL_ENV:-} && -x $VIRTUAL_ENV/bin/python ]]; then
    echo "$VIRTUAL_ENV/bin/python"
  else
    echo python3
  fi
}

kit_use_stack() {
  local view flag=() me=${0##*/} py
  py=$(kit_stack_python)
  if ! command -v "$py" >/dev/null; then
    echo "$me: error: no Python '$py' to resolve the stack with (set KIT_PYTHON, or activate a venv)" >&2
    return 2
  fi
  [[ -n ${1:-} ]] && flag=(--stack "$1")
  [[ -n ${KIT_STACK:-} ]] && export KIT_STACK # the resolver reads it from its environment
  # stdout (the assignments) is captured; stderr (a usage error) is relabelled with the script the user ran
  view=$({ PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$py" -m platforms stack "${flag[@]}" \
    2>&1 1>&3 3>&- | sed "s|^python -m platforms: |$me: |" >&2; } 3>&1) || true
  [[ $view == *KIT_STACK=* ]] || return 2 # the resolver said why, in one line
  eval "$view"
  # shellcheck disable=SC2034 # the callers read them: named here for the reader and for lint
  declare -g KIT_STACKS KIT_DEFAULT_STACK KIT_STACK_TESTS KIT_VENV
  # KIT_VENV, the stack's venv, stays the caller's (venv.sh, kit_python.sh): not exported, so a child picks its own
  # stack's
  export KIT_STACK KIT_VERL_TREE KIT_PATCH_DIR
}

# kit_stack_option "$@": the value of --stack NAME / --stack=NAME among the arguments, the last one as argparse takes
# it (platforms.stacks.flag_in); empty when absent. The caller keeps its own argument parsing and passes it on.
kit_stack_option() {
  local found=""
  while (($#)); do
    case $1 in
      --stack) found=${2:-}; (($# > 1)) && shift ;;
      --stack=*) found=${1#--stack=} ;;
    esac
    shift
  done
  echo "$found"
}
