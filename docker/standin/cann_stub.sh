#!/usr/bin/env bash
# Writes the STUB CANN toolkit and ATB trees of the NPU stand-in base (docker/standin/vllm_ascend.sh): the paths and
# set_env.sh scripts the kit sources (docker/lib/kit-env.sh, scripts/lib/platform_env.sh) and the install record
# retool-doctor reads the CANN release from (platforms/ascend_probe.py), no library. Runs inside the build.
#   cann_stub.sh CANN_VERSION
set -euo pipefail
version=$1
arch=$(uname -m)
top=/usr/local/Ascend
toolkit=$top/ascend-toolkit
mkdir -p "$toolkit/$version/$arch-linux/lib64" "$top/nnal/atb/latest/atb/lib"
ln -sfn "$version" "$toolkit/latest"
printf 'package_name=Ascend-cann-toolkit\nversion=%s\narch=%s\n' "$version" "$arch" \
  >"$toolkit/$version/$arch-linux/ascend_toolkit_install.info"
note="STUB made by the kit's docker/standin/cann_stub.sh for scripts/test_images.sh: paths only, no CANN library"
echo "$note" >"$toolkit/$version/RETOOL_KIT_STUB"
echo "$note" >"$top/nnal/atb/RETOOL_KIT_STUB"
# The variables the real scripts export that the kit reads; the library paths point at empty stub folders.
cat >"$toolkit/set_env.sh" <<SH
# $note
export ASCEND_TOOLKIT_HOME=$toolkit/latest
export ASCEND_HOME_PATH=$toolkit/latest
export ASCEND_OPP_PATH=$toolkit/latest/opp
export LD_LIBRARY_PATH=$toolkit/latest/$arch-linux/lib64:\${LD_LIBRARY_PATH:-}
SH
cat >"$top/nnal/atb/set_env.sh" <<SH
# $note
export ATB_HOME_PATH=$top/nnal/atb/latest/atb
export LD_LIBRARY_PATH=$top/nnal/atb/latest/atb/lib:\${LD_LIBRARY_PATH:-}
SH
