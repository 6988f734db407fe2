# shellcheck shell=bash
# Sourced, not run: the kit's stacks in shell, read from pins.env the way platforms/stacks.py reads them.
#   kit_use_stack [NAME]: source pins.env; NAME (default: $KIT_STACK, else pins.env's KIT_DEFAULT_STACK) must be one of
#   KIT_STACKS; the stack's V<digits>_ keys then stand in for the plain ones (V091_VERL_VERSION -> VERL_VERSION), and
#   KIT_STACK, KIT_VENV (the stack's venv), KIT_VERL_TREE (its patched verl) and KIT_PATCH_DIR (its series) are set.
#   Returns 2, with one line, for an unknown name.
# Expects KIT_ROOT.

kit_use_stack() {
  # shellcheck source=../../pins.env
  source "$KIT_ROOT/pins.env"
  local name=${1:-${KIT_STACK:-$KIT_DEFAULT_STACK}} known=0 stack key prefix
  for stack in $KIT_STACKS; do [[ $stack == "$name" ]] && known=1; done
  if ((!known)); then
    echo "kit: error: unknown stack '$name' (choose one of: $KIT_STACKS; pins.env KIT_STACKS)" >&2
    return 2
  fi
  export KIT_STACK=$name
  if [[ $name == "$KIT_DEFAULT_STACK" ]]; then
    KIT_VENV=$KIT_ROOT/.venv KIT_VERL_TREE=$KIT_ROOT/build/verl KIT_PATCH_DIR=$KIT_ROOT/patches
  else
    prefix="V${name//./}_"
    for key in $(compgen -v "$prefix"); do printf -v "${key#"$prefix"}" '%s' "${!key}"; done
    KIT_VENV=$KIT_ROOT/.venv-$name KIT_VERL_TREE=$KIT_ROOT/build/verl-$name KIT_PATCH_DIR=$KIT_ROOT/patches/$name
  fi
  export KIT_VERL_TREE KIT_PATCH_DIR
  # the stack's venv, for the caller (venv.sh, kit_python.sh): not exported, so a child picks its own stack's
  : "$KIT_VENV"
}

# kit_stack_option "$@": the value of a --stack NAME / --stack=NAME among the arguments (empty when absent); the
# caller keeps its own argument parsing and passes the option on.
kit_stack_option() {
  while (($#)); do
    case $1 in
      --stack) echo "${2:-}"; return 0 ;;
      --stack=*) echo "${1#--stack=}"; return 0 ;;
    esac
    shift
  done
}
