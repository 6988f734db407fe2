#!/usr/bin/env bash
# The learning check's sensitivity bench (issue 31): `scripts/smoke.sh --learn` as shipped, then once per sabotage
# (weight sync skipped after the first, reward sign flipped, tool tokens in the loss mask); exits 0 only when the
# shipped run learned and every sabotaged one did NOT (--help lists the options). Python owns everything
# (recipes/smoke/bench_learn.py, standard library only); each run goes through scripts/smoke.sh, which picks the
# interpreter and builds the venv as it does for a user. This script only execs.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The stack (--stack, KIT_STACK, the interpreter's verl, the default), exported to every smoke.sh run; no verl check
# and no setup scripts here: each run's smoke.sh does its own.
kit_enter -- "$@"
export PYTHONUNBUFFERED=1

exec "$KIT_PY" -m recipes.smoke.bench_learn "$@"
