# shellcheck shell=bash
# Sourced, not run: the one way the kit's shell entry points bring in a platform's setup scripts (CANN's and ATB's
# set_env.sh on Ascend hosts) before Python starts, so torch_npu loads, Ray counts NPUs with pyACL and vllm-ascend
# finds libatb.so. Which scripts, and where (KIT_ASCEND_ROOT, default /usr/local/Ascend), is the platform's fact:
# `python -m platforms setup-scripts` lists those present here.
# Expects KIT_ROOT; uses kit_python (scripts/lib/kit_python.sh).

# kit_source_setup_scripts [setup-scripts options]: source every listed script; "--hw P --required" fails (status 1,
# naming the missing file) when one of that profile's scripts is absent.
kit_source_setup_scripts() {
  local listing script restore_u=0
  listing=$(PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$(kit_python)" -m platforms setup-scripts "$@") ||
    return 1
  [[ $- == *u* ]] && restore_u=1
  while IFS= read -r script; do
    [[ -n $script ]] || continue
    set +u # CANN's scripts read unset variables
    # shellcheck source=/dev/null
    source "$script"
  done <<<"$listing"
  ((restore_u)) && set -u
  return 0
}
