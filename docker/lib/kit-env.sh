# shellcheck shell=bash
# The environment of the kit's images, sourced by docker/entrypoint.sh (every `docker run`) and by
# /etc/bash.bashrc (every interactive shell, including `docker exec -it ... bash`):
#   1. CANN's and ATB's set_env.sh, when present (NPU image): before anything starts Ray, so Ray's NPU count
#      comes from pyACL and not from a /dev glob, and vllm-ascend finds libatb.so;
#   2. the kit's preset for KIT_PHASE (sft or rl, default rl), generated at build time by
#      `python -m npu_kernels.device env --phase ... --hw $KIT_HW` into /etc/retool-kit/env-<phase>.sh.
# Not strict on purpose (no set -e/-u): it runs inside users' interactive shells, and CANN's scripts expand
# variables that may be unset.

_kit_ascend=${KIT_ASCEND_ROOT:-/usr/local/Ascend}
for _kit_file in "$_kit_ascend/ascend-toolkit/set_env.sh" "$_kit_ascend/nnal/atb/set_env.sh"; do
  # shellcheck source=/dev/null
  [[ -f $_kit_file ]] && source "$_kit_file"
done
_kit_file=${KIT_ENV_DIR:-/etc/retool-kit}/env-${KIT_PHASE:-rl}.sh
if [[ -f $_kit_file ]]; then
  # shellcheck source=/dev/null
  source "$_kit_file"
else
  echo "retool-kit: no $_kit_file (KIT_PHASE must be sft or rl); the kit's env preset is not applied" >&2
fi
unset _kit_ascend _kit_file
