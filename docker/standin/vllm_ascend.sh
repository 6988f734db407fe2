#!/usr/bin/env bash
# A STAND-IN for the NPU images' base (pins.env VLLM_ASCEND_IMAGE:VLLM_ASCEND_TAG_A2|_A3 of the stack,
# quay.io/ascend/vllm-ascend:v0.11.0[-a3] on the reference, v0.23.0[-a3] on 0.9.1), built from local material on a machine that cannot reach quay.io and has
# no NPU: a Debian bookworm root with Python 3.11 (lib/standin.sh), CANN and ATB replaced by STUB trees that only provide the
# paths and set_env.sh scripts the kit sources (cann_stub.sh), then the real base's Python packages from PyPI
# (Dockerfile.vllm-ascend). Only scripts/test_images.sh calls it; the image carries the label
# retool-kit.stand-in and /etc/retool-kit-standin.json, and retool-doctor says STAND-IN inside any image built on it.
# Never push or ship it: torch_npu cannot load without CANN's real libraries, nothing in it drives an NPU.
#
# Facts of the real base it reproduces, and where each comes from:
#   CANN at /usr/local/Ascend/ascend-toolkit (set_env.sh, latest/) and ATB at /usr/local/Ascend/nnal/atb (set_env.sh):
#     vllm-ascend's Dockerfile sources both before installing vllm-ascend; docs/source/faqs.md Q6 (libatb.so).
#   CANN at pins.env CANN_VERSION as the toolkit's install.info records it; SOC_VERSION ascend910b1 (A2) or
#     ascend910_9391 (A3): vllm-ascend Dockerfile / Dockerfile.a3 (ARG SOC_VERSION).
#   Python 3.11 with pip (the base is quay.io/ascend/cann:<CANN>-910b|a3-ubuntu22.04-py3.11); torch, torch-npu,
#     vLLM installed with VLLM_TARGET_DEVICE=empty (no compiled vLLM kernels) and vllm-ascend at their pins, ray
#     within the range the real Dockerfile installs, protobuf: vllm-ascend v0.11.0 Dockerfile and requirements.txt
#     (pins.env VLLM_ASCEND_VERSION, VLLM_VERSION, NPU_TORCH_VERSION, TORCH_NPU_VERSION); git (its apt line).
# What differs: Debian 12 instead of Ubuntu 22.04 (only Debian's mirror is reachable here); Debian's Python 3.11.2;
#   torch is PyPI's x86_64 build (CUDA libraries; its METADATA's triton requirement removed, as the CPU build
#   has none) where the real image has PyTorch's CPU build; vLLM from its PyPI sdist
#   instead of a git clone in /vllm-workspace; vllm-ascend from its PyPI wheel, not an editable build
#   against CANN; no CANN libraries at all (the stub trees), so `import torch_npu` fails and the image sets
#   TORCH_DEVICE_BACKEND_AUTOLOAD=0 (else every `import torch` fails); no compilers, no triton.
#
# Usage: docker/standin/vllm_ascend.sh TAG [MIRROR]   (root; debootstrap, a docker daemon, a BuildKit client)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/standin.sh
source "$here/lib/standin.sh"
standin_usage "$0" "$@"
standin_need_tools # debootstrap & co. on a fresh machine (apt-get, as root)
tag=$1
mirror=${2:-$STANDIN_DEFAULT_MIRROR}
# The stack's pins (CANN_VERSION, NPU_TORCH_VERSION, ... of the stack the harness serves: KIT_STACK, which
# test_images.py exports from its --stack), not pins.env's plain keys, which are the reference stack's.
KIT_ROOT=$(cd "$here/../.." && pwd)
# shellcheck source=../../scripts/lib/stack.sh
source "$KIT_ROOT/scripts/lib/stack.sh"
kit_use_stack "" || exit 2
numpy_pin=$(standin_py_pin numpy "$PY_PINS")
case $tag in
  *-a3) soc=ascend910_9391 ;;
  *) soc=ascend910b1 ;;
esac

root_tag=$(standin_shared_root "$mirror")
DOCKER_BUILDKIT=1 docker build --network host -f "$here/Dockerfile.vllm-ascend" -t "$tag" \
  --build-arg ROOT_IMAGE="$root_tag" --build-arg STANDIN_FOR="$tag" --build-arg SOC_VERSION="$soc" \
  --build-arg CANN_VERSION="$CANN_VERSION" --build-arg TORCH_VERSION="$NPU_TORCH_VERSION" \
  --build-arg TORCH_NPU_VERSION="$TORCH_NPU_VERSION" --build-arg VLLM_VERSION="$VLLM_VERSION" \
  --build-arg VLLM_ASCEND_VERSION="$VLLM_ASCEND_VERSION" --build-arg NUMPY_SPEC="$numpy_pin" "$here"
echo "$tag"
