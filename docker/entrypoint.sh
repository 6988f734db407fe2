#!/usr/bin/env bash
# Entry point of the kit's images: sources docker/lib/kit-env.sh (CANN + ATB set_env.sh, then the kit's env
# preset for $KIT_PHASE), then runs the command (default: bash).
set -euo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  cat <<'EOF'
Usage: docker run ... IMAGE [command...]   (entrypoint: docker/entrypoint.sh)

Sources CANN's and ATB's set_env.sh (when present) and the kit's env preset for KIT_PHASE=sft|rl
(default rl), then execs the command, or bash when none is given. Check the result with retool-doctor.
EOF
  exit 0
fi

# CANN's set_env.sh scripts are not written for strict mode.
set +euo pipefail
# shellcheck source=lib/kit-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/kit-env.sh"
set -euo pipefail

if (($# == 0)); then
  set -- bash
fi
exec "$@"
