#!/usr/bin/env bash
# Starts the kit's CUDA image (parity runs) with --gpus all, host networking and IPC, the workspace and the recipes'
# model/data/checkpoint roots (see --help). The docker run command is composed by recipes/launch/cluster/containers.py.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/host-python.sh
source "$KIT_ROOT/docker/lib/host-python.sh"
kit_host_exec recipes.launch.cluster.containers --prog docker/run_cuda.sh cuda "$@"
