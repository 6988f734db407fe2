#!/usr/bin/env bash
# Builds the kit's images and runs their checks inside them, on a machine without a registry (stand-in bases where
# the pinned base cannot be pulled): docker/test_images.py, the host's python3 (standard library only). --help.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 "$KIT_ROOT/docker/test_images.py" "$@"
