#!/usr/bin/env bash
# Starts the kit's CUDA image (docker/build.sh --hw cuda) for parity runs: all GPUs, host networking, host IPC
# (vLLM and NCCL share memory across processes) and the workspace.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../pins.env
source "$KIT_ROOT/pins.env"

usage() {
  cat <<EOF2
Usage: docker/run_cuda.sh [options] [--] [command...]

Runs the kit's CUDA image with --gpus all; the command defaults to bash.
  --image IMAGE       default: retool-npu-kit:cuda-$VLLM_CUDA_TAG
  --gpus SPEC         docker --gpus value (default: all), e.g. '"device=0,1"'
  --workspace DIR     mounted at /workspace, the working directory (default: the current directory)
  --cache DIR         mounted at /root/.cache/huggingface (default: \$HF_HOME or ~/.cache/huggingface, if it exists)
  --phase sft|rl      KIT_PHASE, the kit env preset the entry point applies (default: rl)
  --name NAME         container name
  --docker-arg ARG    one more docker run argument (repeatable)
  --dry-run           print the docker run command instead of running it
  -h, --help          this help
EOF2
}

die() { echo "run_cuda.sh: ERROR: $*" >&2; exit 2; }

image=retool-npu-kit:cuda-$VLLM_CUDA_TAG gpus=all workspace=$PWD cache="${HF_HOME:-$HOME/.cache/huggingface}"
phase=rl name="" dry_run=0
extra=()
while (($#)); do
  case "$1" in
    --image) image=${2:?--image needs a name}; shift 2 ;;
    --gpus) gpus=${2:?--gpus needs a value}; shift 2 ;;
    --workspace) workspace=${2:?--workspace needs a directory}; shift 2 ;;
    --cache) cache=${2:?--cache needs a directory}; shift 2 ;;
    --phase) phase=${2:?--phase needs sft or rl}; shift 2 ;;
    --name) name=${2:?--name needs a name}; shift 2 ;;
    --docker-arg) extra+=("${2:?--docker-arg needs a value}"); shift 2 ;;
    --docker-arg=*) extra+=("${1#--docker-arg=}"); shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) break ;;
  esac
done
[[ $phase == sft || $phase == rl ]] || die "--phase must be sft or rl, not '$phase'"
[[ -d $workspace ]] || die "--workspace $workspace is not a directory"

cmd=(docker run --rm)
if [[ -t 0 && -t 1 ]]; then cmd+=(-it); fi
if [[ -n $name ]]; then cmd+=(--name "$name"); fi
cmd+=(--gpus "$gpus" --network=host --ipc=host -e "KIT_PHASE=$phase")
cmd+=(-v "$(cd "$workspace" && pwd):/workspace" -w /workspace)
if [[ -d $cache ]]; then cmd+=(-v "$cache:/root/.cache/huggingface"); fi
cmd+=("${extra[@]}" "$image" "$@")

if ((dry_run)); then
  printf '%q' "${cmd[0]}"
  printf ' %q' "${cmd[@]:1}"
  printf '\n'
  exit 0
fi
command -v docker >/dev/null || die "docker not found"
exec "${cmd[@]}"
