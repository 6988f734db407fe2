#!/usr/bin/env bash
# Builds the kit's image of one hardware profile: `docker/build.sh --hw PROFILE [--dry-run] [--help]` (--help lists the
# profiles with an image and their tags).
# The profile's Dockerfile, base image, tag and build args (every version from pins.env) are the platform package's
# data; platforms/images.py composes the docker build command.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/host-python.sh
source "$KIT_ROOT/docker/lib/host-python.sh"
kit_host_exec platforms.images --prog docker/build.sh "$@"
