#!/usr/bin/env bash
# Builds the kit's images and runs their checks inside them, on a machine without a registry (stand-in bases where
# the pinned base cannot be pulled): docker/test_images.py, the host's python3 (standard library only). --help.
# On a fresh Debian/Ubuntu machine, as root, it installs what it needs with apt-get: docker.io (test_images.py) and
# the stand-in builds' host tools, debootstrap & co. (docker/standin/lib/standin.sh STANDIN_TOOLS).
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 "$KIT_ROOT/docker/test_images.py" "$@"
