#!/usr/bin/env bash
# Starts the kit's NPU image with what an Ascend container needs: every /dev/davinciN of the host (counted, not
# assumed: A2 has 8, A3 16), the davinci_manager / devmm_svm / hisi_hdc control devices, the host's driver,
# firmware, DCMI, npu-smi and ascend_install.info (the driver lives on the host, not in the image), host
# networking (HCCL, Ray, the sandbox), a large /dev/shm and the workspace.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../pins.env
source "$KIT_ROOT/pins.env"

usage() {
  cat <<EOF
Usage: docker/run_npu.sh [options] [--] [command...]

Runs the kit's NPU image (docker/build.sh --hw a2|a3) with every NPU of this host; the command defaults to bash.
  --image IMAGE       default: retool-npu-kit:$VLLM_ASCEND_TAG_A2 (A2) or retool-npu-kit:$VLLM_ASCEND_TAG_A3 (A3)
  --hw a2|a3          which default image; default: a3 when more than 8 davinci devices are present, else a2
  --workspace DIR     mounted at /workspace, the working directory (default: the current directory)
  --cache DIR         mounted at /root/.cache/huggingface (default: \$HF_HOME or ~/.cache/huggingface, if it exists)
  --phase sft|rl      KIT_PHASE, the kit env preset the entry point applies (default: rl)
  --name NAME         container name
  --shm-size SIZE     /dev/shm size (default: 100g, as the sample; Ray and DataLoader workers use it)
  --privileged        run privileged, as the sample does (also lets the sandbox's bubblewrap create namespaces)
  --docker-arg ARG    one more docker run argument (repeatable), e.g. --docker-arg=-e --docker-arg=HF_TOKEN
  --dev-root DIR      where to look for the device nodes (default: /dev; tests point it at a fake tree)
  --dry-run           print the docker run command instead of running it
  -h, --help          this help
EOF
}

die() { echo "run_npu.sh: ERROR: $*" >&2; exit 2; }
warn() { echo "run_npu.sh: WARNING: $*" >&2; }

image="" hw="" workspace=$PWD cache="${HF_HOME:-$HOME/.cache/huggingface}" phase=rl name="" shm=100g
privileged=0 dev_root=/dev dry_run=0
extra=()
while (($#)); do
  case "$1" in
    --image) image=${2:?--image needs a name}; shift 2 ;;
    --hw) hw=${2:?--hw needs a2 or a3}; shift 2 ;;
    --workspace) workspace=${2:?--workspace needs a directory}; shift 2 ;;
    --cache) cache=${2:?--cache needs a directory}; shift 2 ;;
    --phase) phase=${2:?--phase needs sft or rl}; shift 2 ;;
    --name) name=${2:?--name needs a name}; shift 2 ;;
    --shm-size) shm=${2:?--shm-size needs a size}; shift 2 ;;
    --privileged) privileged=1; shift ;;
    --docker-arg) extra+=("${2:?--docker-arg needs a value}"); shift 2 ;;
    --docker-arg=*) extra+=("${1#--docker-arg=}"); shift ;;
    --dev-root) dev_root=${2:?--dev-root needs a directory}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) usage >&2; die "unknown option: $1" ;;
    *) break ;;
  esac
done
[[ $phase == sft || $phase == rl ]] || die "--phase must be sft or rl, not '$phase'"
[[ -d $workspace ]] || die "--workspace $workspace is not a directory"

# Every davinciN node, in numeric order. A glob like davinci? would stop at davinci9 (Ray's old A3 undercount).
numbers=()
for node in "$dev_root"/davinci*; do
  base=${node##*/}
  [[ $base =~ ^davinci([0-9]+)$ ]] && numbers+=("${BASH_REMATCH[1]}")
done
((${#numbers[@]})) || die "no $dev_root/davinciN device nodes: not an Ascend host, or the NPU driver is not loaded"
mapfile -t numbers < <(printf '%s\n' "${numbers[@]}" | sort -n)
count=${#numbers[@]}

if [[ -z $hw ]]; then
  if ((count > 8)); then hw=a3; else hw=a2; fi
fi
case "$hw" in
  a2) expected=8 ;;
  a3) expected=16 ;;
  *) die "--hw must be a2 or a3, not '$hw'" ;;
esac
((count == expected)) || warn "$count davinci devices, an ${hw^^} node has $expected; passing the $count present"
if [[ -z $image ]]; then
  tag_var=VLLM_ASCEND_TAG_${hw^^}
  image=retool-npu-kit:${!tag_var}
fi

device_arg() { # $1: node name under the dev root; the container always sees it as /dev/<name>
  if [[ $dev_root == /dev ]]; then echo "--device=/dev/$1"; else echo "--device=$dev_root/$1:/dev/$1"; fi
}

cmd=(docker run --rm)
if [[ -t 0 && -t 1 ]]; then cmd+=(-it); fi
if [[ -n $name ]]; then cmd+=(--name "$name"); fi
if ((privileged)); then cmd+=(--privileged); fi
for n in "${numbers[@]}"; do cmd+=("$(device_arg "davinci$n")"); done
for ctl in davinci_manager devmm_svm hisi_hdc; do
  [[ -e $dev_root/$ctl ]] || die "$dev_root/$ctl is missing: the NPU driver is not installed or not loaded"
  cmd+=("$(device_arg "$ctl")")
done

# Host paths of the Ascend driver stack; the image carries CANN but never the driver.
required_mounts=(
  /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro
  /usr/local/dcmi:/usr/local/dcmi:ro
  /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro
  /etc/ascend_install.info:/etc/ascend_install.info:ro
)
optional_mounts=(
  /usr/local/Ascend/firmware:/usr/local/Ascend/firmware:ro
  /var/log/npu:/usr/slog
)
for mount in "${required_mounts[@]}"; do
  src=${mount%%:*}
  if [[ ! -e $src ]]; then
    ((dry_run)) || die "$src is missing on this host (docker would mount an empty directory there)"
    warn "$src is missing on this host"
  fi
  cmd+=(-v "$mount")
done
for mount in "${optional_mounts[@]}"; do
  if [[ -e ${mount%%:*} ]]; then cmd+=(-v "$mount"); fi
done

cmd+=(--network=host "--shm-size=$shm" -e "KIT_PHASE=$phase")
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
