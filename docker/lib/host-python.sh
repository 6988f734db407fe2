# shellcheck shell=bash
# Sourced, not run, by docker/build.sh and docker/run_*.sh. They run on the host, where the kit's Python composes the
# docker command (platforms/images.py, recipes/launch/cluster/containers.py: standard library only, so any
# python3 >= 3.9 will do, no venv needed) from the platform's facts; the scripts themselves hold none.
# Expects KIT_ROOT.
# shellcheck source=../../scripts/lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"

# kit_host_exec MODULE ARGS...: exec `python -m MODULE ARGS...` with the kit importable.
kit_host_exec() {
  local py
  py=$(kit_python)
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    echo "${0##*/}: error: needs Python >= 3.9 on this host; '$py' is missing or older (set KIT_PYTHON)" >&2
    exit 2
  fi
  PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m "$@"
}
