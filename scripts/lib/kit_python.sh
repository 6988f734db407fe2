# shellcheck shell=bash
# Sourced, not run: which Python the launchers use (KIT_PYTHON, the active venv, the stack's venv at the repo root:
# KIT_VENV from kit_use_stack, else .venv; else python3). Expects KIT_ROOT.

kit_python() {
  if [[ -n ${KIT_PYTHON:-} ]]; then
    echo "$KIT_PYTHON"
  elif [[ -n ${VIRTUAL_ENV:-} && -x $VIRTUAL_ENV/bin/python ]]; then
    echo "$VIRTUAL_ENV/bin/python"
  elif [[ -x ${KIT_VENV:-$KIT_ROOT/.venv}/bin/python ]]; then
    echo "${KIT_VENV:-$KIT_ROOT/.venv}/bin/python"
  else
    echo python3
  fi
}

# kit_require_verl PY: PY can import verl and Hydra's omegaconf (a spec lookup, nothing imported), else one line and
# status 2: the launcher's first import would otherwise end in a traceback.
kit_require_verl() {
  "$1" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("verl") and u.find_spec("omegaconf") else 3)' \
    2>/dev/null && return 0
  echo "kit: error: $1 has no verl (stack ${KIT_STACK:-?}): use the stack's venv (bash scripts/test.sh --stack" \
    "${KIT_STACK:-0.6.1} --venv builds ${KIT_VENV:-.venv}), activate one, or set KIT_PYTHON" >&2
  return 2
}
