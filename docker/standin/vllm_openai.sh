#!/usr/bin/env bash
# A STAND-IN for the CUDA images' base (pins.env VLLM_CUDA_IMAGE:VLLM_CUDA_TAG, vllm/vllm-openai:v0.11.0), built from
# local material on a machine that cannot reach Docker Hub and has no GPU: the shared Debian bookworm root with
# Python 3.11 (lib/standin.sh, the NPU stand-in's too), then vLLM's PyPI wheel at the pin with its dependencies
# (Dockerfile.vllm-openai). Only scripts/test_images.sh calls it; the image carries the label retool-kit.stand-in and
# /etc/retool-kit-standin.json, and retool-doctor says STAND-IN inside any image built on it. Never push or ship it.
#
# Facts of the real base it reproduces, and where each comes from:
#   vLLM 0.11.0 as its x86_64 wheel with the torch it requires (torch 2.8.0, CUDA 12.8 libraries from PyPI): the
#     release's wheel METADATA; verl 0.6.1 builds its CUDA image on this tag (docker/Dockerfile.stable.vllm);
#   ENTRYPOINT ["vllm", "serve"] (docker/Dockerfile.cuda replaces it: its comment on the entry point); pip on PATH.
# What differs: Debian 12 and Python 3.11.2 where the real image runs Ubuntu 22.04 and Python 3.12 (only Debian's
#   mirror is reachable here; docker/Dockerfile.cuda's --ignore-requires-python exists for 3.12 and is not exercised
#   by this stand-in); no CUDA driver, no GPU.
#
# Usage: docker/standin/vllm_openai.sh TAG [MIRROR]   (root; debootstrap, a docker daemon, a BuildKit client)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/standin.sh
source "$here/lib/standin.sh"
standin_usage "$0" "$@"
standin_need_tools # debootstrap & co. on a fresh machine (apt-get, as root)
tag=$1
mirror=${2:-$STANDIN_DEFAULT_MIRROR}
# The stack's pins (KIT_STACK, exported by test_images.py from its --stack), not pins.env's plain (reference) keys.
KIT_ROOT=$(cd "$here/../.." && pwd)
# shellcheck source=../../scripts/lib/stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
kit_use_stack "" || exit 2
root_tag=$(standin_shared_root "$mirror")
DOCKER_BUILDKIT=1 docker build --network host -f "$here/Dockerfile.vllm-openai" -t "$tag" \
  --build-arg ROOT_IMAGE="$root_tag" --build-arg STANDIN_FOR="$tag" --build-arg VLLM_VERSION="$VLLM_VERSION" "$here"
echo "$tag"
