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

# kit_check_verl PY required|matching: whether PY can serve the stack (KIT_STACK, from kit_use_stack), said before
# the command's first import of verl would end in a traceback, or before Ray workers or a merge would run another
# stack's verl under this stack's pins. Both refuse PY when its verl is another stack's ("stack X needs verl Y, but
# PY has verl Z", with where to get the stack's venv); "required" also refuses PY without verl and Hydra's omegaconf
# (a command that imports them), "matching" lets it pass (a command whose own process needs no verl). One line,
# status 2. verl is not imported (package metadata, spec lookups); the words are platforms.stacks'.
kit_check_verl() {
  local problem check
  IFS= read -r -d '' check <<'PY' || true
import importlib.util, sys
try:
    from platforms import stacks
    stack = stacks.resolve(sys.argv[1] or None)
    problem = stacks.installed_problem(stack)
    needed = sys.argv[2] == "required"
    if problem is None and needed and not all(map(importlib.util.find_spec, ("verl", "omegaconf"))):
        problem = f"stack {stack.name} needs verl {stack.pin('VERL_VERSION')}, but this Python ({sys.executable})"
        problem += " has none"
    print(f"{problem}: {stacks.venv_hint(stack)}; or activate one, or set KIT_PYTHON" if problem else "ok")
except Exception as exc:  # an interpreter too old for the kit, a broken install: one line all the same
    print(f"{sys.executable} cannot check its verl ({type(exc).__name__}: {exc})")
PY
  problem=$(PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$1" -c "$check" "${KIT_STACK:-}" "$2" 2>/dev/null) || true
  [[ $problem == ok ]] && return 0
  echo "${0##*/}: error: ${problem:-$1 did not run (set KIT_PYTHON, or activate the venv of stack $KIT_STACK)}" >&2
  return 2
}

# kit_require_verl PY: kit_check_verl PY required (the launcher and the hand-offs).
kit_require_verl() { kit_check_verl "$1" required; }
