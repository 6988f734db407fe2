#!/usr/bin/env bash
# Starts the kit's NPU image with every /dev/davinciN of this host, the control devices, the host's driver stack,
# host networking, a large /dev/shm, the workspace and the recipes' model/data/checkpoint roots (see --help).
# The docker run command is composed by recipes/launch/cluster/containers.py from the platform's facts.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/host-python.sh
source "$KIT_ROOT/docker/lib/host-python.sh"
kit_host_exec recipes.launch.cluster.containers --prog docker/run_npu.sh npu "$@"
