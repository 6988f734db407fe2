#!/usr/bin/env bash
# The learning check's sensitivity bench on several seeds and stacks, judged as one (issue 51): scripts/bench_learn.sh
# once per stack and seed (--help lists the options); exits 0 only when the shipped run learned and every sabotage did
# NOT, on every seed of every stack. Python owns everything (recipes/smoke/bench_seeds.py, standard library only);
# each bench's runs go through scripts/smoke.sh, which picks each stack's interpreter. This script only execs.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/entry.sh
source "$KIT_ROOT/scripts/lib/entry.sh"
# The interpreter only: each bench names its own --stack (this command's --stacks is a list, not kit_enter's --stack).
kit_enter -- "$@"
export PYTHONUNBUFFERED=1

exec "$KIT_PY" -m recipes.smoke.bench_seeds "$@"
