# shellcheck shell=bash
# The one .venv/ shared by the test command and the main job. Sourced, not run: defines kit_ensure_venv,
# which creates .venv/ at the repo root when missing and (re)installs only when an input changed.
# Expects KIT_ROOT and the pins of pins.env in the environment.

KIT_VENV="$KIT_ROOT/.venv"
KIT_PYTHON="$KIT_VENV/bin/python"

_kit_stamp() {
  # Everything that decides what the venv holds; a change means a reinstall.
  cat "$KIT_ROOT/pins.env" "$KIT_ROOT/pyproject.toml" "$KIT_ROOT/scripts/setup_verl.sh" \
    "$KIT_ROOT/scripts/lib/venv.sh" "$KIT_ROOT"/patches/*.patch | sha256sum | cut -d' ' -f1
}

_kit_base_python() {
  local py
  for py in "${KIT_BASE_PYTHON:-}" python3.11 python3; do
    if [[ -z $py ]] || ! command -v "$py" >/dev/null; then continue; fi
    if "$py" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 11)))'; then
      echo "$py"
      return 0
    fi
  done
  echo "kit: ERROR: need Python 3.10 or 3.11 (pins.env: $PYTHON_VERSION); set KIT_BASE_PYTHON" >&2
  return 1
}

_kit_install_system_tools() {
  # bubblewrap isolates the code sandbox; installed when missing and we may (root with apt).
  command -v bwrap >/dev/null && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "== installing bubblewrap (apt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } >/dev/null ||
      echo "kit: WARNING: could not install bubblewrap; the sandbox will use its fallback isolation" >&2
  else
    echo "kit: WARNING: bwrap not found and not root; the sandbox will use its fallback isolation" >&2
  fi
}

kit_ensure_venv() {
  local stamp constraints
  stamp=$(_kit_stamp)
  if [[ -x $KIT_PYTHON && -f $KIT_VENV/.kit-stamp && $(cat "$KIT_VENV/.kit-stamp") == "$stamp" &&
    -d $KIT_ROOT/build/verl/.git ]]; then
    echo "== .venv up to date ($KIT_VENV)"
    _kit_install_system_tools
    return 0
  fi
  local t0=$SECONDS
  if [[ ! -x $KIT_PYTHON ]]; then
    local base
    base=$(_kit_base_python)
    echo "== creating $KIT_VENV with $base"
    "$base" -m venv "$KIT_VENV"
    "$KIT_PYTHON" -m pip install --quiet --upgrade pip
  fi
  constraints=$(mktemp)
  # shellcheck disable=SC2086 # PY_PINS is a space-separated list of requirement specs
  printf '%s\n' $PY_PINS >"$constraints"
  echo "== installing torch==$CPU_TORCH_VERSION (CPU build)"
  "$KIT_PYTHON" -m pip install --quiet "torch==$CPU_TORCH_VERSION"
  echo "== building verl $VERL_VERSION with the patch series"
  rm -rf "$KIT_ROOT/build/verl" # a fresh tree: patches may have changed since the last build
  PYTHON=$KIT_PYTHON bash "$KIT_ROOT/scripts/setup_verl.sh" --source sdist --dest "$KIT_ROOT/build/verl" --install
  echo "== installing the pinned packages and the kit (editable) with its test extras"
  # shellcheck disable=SC2086 # PY_PINS: installed, not only constrained (math-verify, tensorboard, ...)
  "$KIT_PYTHON" -m pip install --quiet -c "$constraints" $PY_PINS -e "${KIT_ROOT}[test]"
  rm -f "$constraints"
  _kit_install_system_tools
  echo "$stamp" >"$KIT_VENV/.kit-stamp"
  echo "== .venv ready in $((SECONDS - t0)) s"
}
