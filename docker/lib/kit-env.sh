# shellcheck shell=bash
# The environment of the kit's images, sourced by docker/entrypoint.sh (every `docker run`) and by
# /etc/bash.bashrc (every interactive shell, including `docker exec -it ... bash`):
#   1. the platform's setup scripts (CANN's and ATB's set_env.sh in the NPU image), through the one helper every
#      launcher uses (scripts/lib/platform_env.sh: kit_source_setup_scripts, which asks
#      `python -m platforms setup-scripts` which are present): before anything starts Ray, so Ray's NPU
#      count comes from pyACL and not from a /dev glob, and vllm-ascend finds libatb.so;
#   2. the kit's preset for KIT_PHASE (sft or rl, default rl), generated at build time by
#      `python -m platforms env --phase ... --hw $KIT_HW` into /etc/retool-kit/env-<phase>.sh.
# Not strict on purpose (no set -e/-u): it runs inside users' interactive shells, and CANN's scripts expand
# variables that may be unset.

KIT_ROOT=${KIT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
# shellcheck source=../../scripts/lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"
# shellcheck source=../../scripts/lib/platform_env.sh
source "$KIT_ROOT/scripts/lib/platform_env.sh"
kit_source_setup_scripts || echo "retool-kit: could not list the platform's setup scripts (CANN/ATB not sourced)" >&2

_kit_file=${KIT_ENV_DIR:-/etc/retool-kit}/env-${KIT_PHASE:-rl}.sh
if [[ -f $_kit_file ]]; then
  # shellcheck source=/dev/null
  source "$_kit_file"
else
  echo "retool-kit: no $_kit_file (KIT_PHASE must be sft or rl); the kit's env preset is not applied" >&2
fi
unset _kit_file
