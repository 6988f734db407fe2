#!/usr/bin/env bash
# Builds the kit's image for one machine type. Every version and base-image tag is read from pins.env and passed
# as a --build-arg (the Dockerfiles hold none), so an image is always the pinned stack.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../pins.env
source "$KIT_ROOT/pins.env"

usage() {
  cat <<EOF
Usage: docker/build.sh --hw a2|a3|cuda [--tag NAME] [--verl-source sdist|git] [--pip-index-url URL]
                       [--platform PLATFORM] [--no-verify] [--dry-run] [--help] [-- DOCKER_BUILD_ARGS...]

Builds the retool-npu-kit image from the repo root ($KIT_ROOT):
  a2    docker/Dockerfile.npu  FROM $VLLM_ASCEND_IMAGE:$VLLM_ASCEND_TAG_A2   (Atlas A2, 8 NPUs)
  a3    docker/Dockerfile.npu  FROM $VLLM_ASCEND_IMAGE:$VLLM_ASCEND_TAG_A3   (Atlas A3, 16 dies)
  cuda  docker/Dockerfile.cuda FROM $VLLM_CUDA_IMAGE:$VLLM_CUDA_TAG

  --tag NAME            image name (default: retool-npu-kit:<base tag>, e.g. retool-npu-kit:$VLLM_ASCEND_TAG_A3;
                        retool-npu-kit:cuda-$VLLM_CUDA_TAG for cuda), the default of docker/run_npu.sh / run_cuda.sh
  --verl-source S       how scripts/setup_verl.sh gets verl $VERL_VERSION: sdist (default; PyPI sdist, sha256
                        checked against pins.env) or git ($VERL_GIT_URL at $VERL_GIT_TAG)
  --pip-index-url URL   package index for the build (default: whatever the base image is configured with)
  --platform PLATFORM   docker build --platform, e.g. linux/arm64 for Kunpeng hosts (default: the builder's)
  --no-verify           skip the build-time retool-doctor check of versions and patches against pins.env
  --dry-run             print the docker build command instead of running it
  --                    everything after it goes to docker build unchanged
EOF
}

die() { echo "build.sh: ERROR: $*" >&2; exit 2; }

hw="" tag="" verl_source=sdist pip_index_url="" platform="" verify=1 dry_run=0
extra=()
while (($#)); do
  case "$1" in
    --hw) hw=${2:?--hw needs a2, a3 or cuda}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    --verl-source) verl_source=${2:?--verl-source needs sdist or git}; shift 2 ;;
    --pip-index-url) pip_index_url=${2:?--pip-index-url needs a URL}; shift 2 ;;
    --platform) platform=${2:?--platform needs a value}; shift 2 ;;
    --no-verify) verify=0; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $verl_source == sdist || $verl_source == git ]] || die "--verl-source must be sdist or git, not '$verl_source'"

common=(
  --build-arg "KIT_HW=$hw"
  --build-arg "VERL_SOURCE=$verl_source"
  --build-arg "PIP_INDEX_URL=$pip_index_url"
  --build-arg "KIT_VERIFY=$verify"
  --build-arg "VERL_VERSION=$VERL_VERSION"
  --build-arg "VLLM_VERSION=$VLLM_VERSION"
)
case "$hw" in
  a2 | a3)
    base_tag_var=VLLM_ASCEND_TAG_${hw^^}
    base_tag=${!base_tag_var}
    dockerfile=docker/Dockerfile.npu
    tag=${tag:-retool-npu-kit:$base_tag}
    args=(
      --build-arg "VLLM_ASCEND_IMAGE=$VLLM_ASCEND_IMAGE"
      --build-arg "VLLM_ASCEND_TAG=$base_tag"
      "${common[@]}"
      --build-arg "CANN_VERSION=$CANN_VERSION"
      --build-arg "VLLM_ASCEND_VERSION=$VLLM_ASCEND_VERSION"
      --build-arg "NPU_TORCH_VERSION=$NPU_TORCH_VERSION"
      --build-arg "TORCH_NPU_VERSION=$TORCH_NPU_VERSION"
    )
    ;;
  cuda)
    dockerfile=docker/Dockerfile.cuda
    tag=${tag:-retool-npu-kit:cuda-$VLLM_CUDA_TAG}
    args=(
      --build-arg "VLLM_CUDA_IMAGE=$VLLM_CUDA_IMAGE"
      --build-arg "VLLM_CUDA_TAG=$VLLM_CUDA_TAG"
      "${common[@]}"
    )
    ;;
  "") usage >&2; die "--hw is required" ;;
  *) usage >&2; die "--hw must be a2, a3 or cuda, not '$hw'" ;;
esac

cmd=(docker build -f "$KIT_ROOT/$dockerfile" -t "$tag")
if [[ -n $platform ]]; then cmd+=(--platform "$platform"); fi
cmd+=("${args[@]}" "${extra[@]}" "$KIT_ROOT")

if ((dry_run)); then
  # One line, shell-quoted: it can be pasted, and tests parse it with shlex.
  printf 'DOCKER_BUILDKIT=1'
  printf ' %q' "${cmd[@]}"
  printf '\n'
  exit 0
fi
command -v docker >/dev/null || die "docker not found"
# BuildKit: it reads docker/<Dockerfile>.dockerignore, which keeps .venv/, build/ and .git out of the context.
DOCKER_BUILDKIT=1 exec "${cmd[@]}"
