#!/usr/bin/env bash
# Starts the kit's CPU image (docker/build.sh --hw cpu) with a large /dev/shm, the workspace and the recipes'
# model/data/checkpoint roots (see --help). The docker run command is composed by recipes/launch/cluster/containers.py.
#   docker/run_cpu.sh -- bash scripts/smoke.sh --fast      # the pipeline check, outputs under ./outputs
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/host-python.sh
source "$KIT_ROOT/docker/lib/host-python.sh"
kit_host_exec recipes.launch.cluster.containers --prog docker/run_cpu.sh cpu "$@"
