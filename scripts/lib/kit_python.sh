# shellcheck shell=bash
# Sourced, not run: which Python the launchers use (KIT_PYTHON, the active venv, the repo's .venv, python3).
# Expects KIT_ROOT.

kit_python() {
  if [[ -n ${KIT_PYTHON:-} ]]; then
    echo "$KIT_PYTHON"
  elif [[ -n ${VIRTUAL_ENV:-} && -x $VIRTUAL_ENV/bin/python ]]; then
    echo "$VIRTUAL_ENV/bin/python"
  elif [[ -x $KIT_ROOT/.venv/bin/python ]]; then
    echo "$KIT_ROOT/.venv/bin/python"
  else
    echo python3
  fi
}
