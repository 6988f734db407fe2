#!/usr/bin/env bash
# Multi-node Ray for the kit's RL recipes (e.g. Qwen2.5-32B on 2 x A3 or 4 x A2): start the head, join workers,
# check that every node joined with its devices. On every node, before `ray start`:
#   * CANN's and ATB's set_env.sh (NPU profiles): Ray then counts NPUs with pyACL and vllm-ascend finds libatb.so;
#   * the kit's RL environment (python -m npu_kernels.device env --phase rl) and PYTHONPATH=<kit>: Ray workers
#     inherit the raylet's environment, so this is what every verl worker on the node will see;
#   * HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on cuda): the interface that
#     carries this node's Ray address, so collectives bootstrap over the network the nodes reach each other on;
#   * the device count passed explicitly (--resources='{"NPU": N}'): Ray's own fallback sees 10 of an A3's 16 dies.
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  cat <<EOF
Usage: bash scripts/ray_cluster.sh head|worker|status|stop [options]

  head     start the Ray head on this node (run first, on the node that will launch the recipe)
  worker   join this node to the head (--address HEAD_IP:PORT, or \$RAY_HEAD_ADDRESS)
  status   check the cluster: live nodes == --nodes, each with the profile's device count; exit 1 otherwise
  stop     ray stop on this node (stops every Ray process of this user here)

Options:
  --hw a2|a3|cuda|cpu   hardware profile (default \$KIT_HW, else a3)
  --address HOST:PORT   worker: the head's address; status: default auto (this node's cluster)
  --port PORT           head: GCS port (default \$RAY_PORT, else 6379)
  --node-ip IP          this node's address (default: head: first of \`hostname -I\`; worker: the source address
                        of the route to the head)
  --ifname IFACE        socket interface for HCCL/GLOO/TP (default: the interface holding the node address)
  --nodes N             status: expected number of nodes (default 1)
  --dry-run             head/worker: print the environment settings and the ray command; start nothing
  -h, --help            this text

Typical 2 x A3 session (Qwen2.5-32B RL):
  node0$ bash scripts/ray_cluster.sh head --hw a3
  node1$ bash scripts/ray_cluster.sh worker --hw a3 --address <node0-ip>:6379
  node0$ bash scripts/ray_cluster.sh status --hw a3 --nodes 2
  node0$ bash recipes/run_qwen2.5_32b_dapo_npu.sh --hw a3
EOF
}

die() {
  echo "ray_cluster: error: $*" >&2
  exit 1
}

# shellcheck source=lib/kit_python.sh
source "$KIT_ROOT/scripts/lib/kit_python.sh"

# The interface holding IPv4 address $1, or nothing.
iface_of() {
  command -v ip >/dev/null || return 0
  ip -o -4 addr show | awk -v want="$1" '{split($4, a, "/"); if (a[1] == want) {print $2; exit}}'
}

# This node's source address toward $1 (an IP or a resolvable name), or nothing.
source_addr_to() {
  local target=$1
  command -v ip >/dev/null || return 0
  if [[ ! $target =~ ^[0-9.]+$ ]]; then
    target=$(getent hosts "$target" | awk '{print $1; exit}') || true
    [[ -n $target ]] || return 0
  fi
  ip -o route get "$target" 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n1
}

if [[ $# -eq 0 || $1 == -h || $1 == --help ]]; then
  usage
  exit $(($# == 0 ? 2 : 0))
fi
CMD=$1
shift
case $CMD in
  head | worker | status | stop) ;;
  *)
    echo "ray_cluster: unknown command '$CMD' (head, worker, status, stop)" >&2
    exit 2
    ;;
esac

HW=${KIT_HW:-a3}
ADDRESS=${RAY_HEAD_ADDRESS:-}
PORT=${RAY_PORT:-6379}
NODE_IP=""
IFNAME=${KIT_IFNAME:-}
NODES=1
DRY_RUN=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --hw | --address | --port | --node-ip | --ifname | --nodes)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      case $1 in
        --hw) HW=$2 ;;
        --address) ADDRESS=$2 ;;
        --port) PORT=$2 ;;
        --node-ip) NODE_IP=$2 ;;
        --ifname) IFNAME=$2 ;;
        --nodes) NODES=$2 ;;
      esac
      shift 2
      ;;
    --dry-run)
      DRY_RUN=1
      shift
      ;;
    *)
      echo "ray_cluster: unknown option $1 (see --help)" >&2
      exit 2
      ;;
  esac
done
case $HW in
  a2 | a3 | cuda | cpu) ;;
  *)
    echo "ray_cluster: unknown hardware profile '$HW' (a2, a3, cuda, cpu)" >&2
    exit 2
    ;;
esac

PY=$(kit_python)
export PYTHONPATH="$KIT_ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [[ -x $(dirname "$PY")/ray ]]; then
  RAY=$(dirname "$PY")/ray
else
  RAY=ray
fi

if [[ $CMD == status ]]; then
  ARGS=(status --hw "$HW" --nodes "$NODES")
  [[ -z $ADDRESS ]] || ARGS+=(--address "$ADDRESS")
  exec "$PY" -m recipes.launch.cluster "${ARGS[@]}"
fi
if [[ $CMD == stop ]]; then
  ((DRY_RUN)) && {
    echo "$RAY stop"
    exit 0
  }
  exec "$RAY" stop
fi

# -- head / worker: environment first, then `ray start` -----------------------------------------------------------
if [[ $HW == a2 || $HW == a3 ]]; then
  ascend=${KIT_ASCEND_ROOT:-/usr/local/Ascend}
  for env_file in "$ascend/ascend-toolkit/set_env.sh" "$ascend/nnal/atb/set_env.sh"; do
    if [[ -f $env_file ]]; then
      echo "ray_cluster: source $env_file"
      set +u # CANN's scripts read unset variables
      # shellcheck source=/dev/null
      source "$env_file"
      set -u
    elif ((DRY_RUN)); then
      echo "ray_cluster: note: $env_file not found (dry run: a real start stops here)"
    else
      die "$env_file not found: Ray would count NPUs without pyACL and vllm-ascend would miss libatb.so" \
        "(set KIT_ASCEND_ROOT if CANN lives elsewhere)"
    fi
  done
fi
PRESET=$("$PY" -m npu_kernels.device env --phase rl --hw "$HW")
eval "$PRESET"
echo "ray_cluster: kit environment for rl on $HW applied (python -m npu_kernels.device env --phase rl --hw $HW)"

if [[ $CMD == worker ]]; then
  [[ -n $ADDRESS ]] || die "worker needs the head's address: --address HEAD_IP:PORT (or RAY_HEAD_ADDRESS)"
  [[ $ADDRESS == *:* ]] || ADDRESS="$ADDRESS:$PORT"
  [[ -n $NODE_IP ]] || NODE_IP=$(source_addr_to "${ADDRESS%:*}")
else
  [[ -n $NODE_IP ]] || NODE_IP=$(hostname -I 2>/dev/null | awk '{print $1}')
fi
[[ -n $NODE_IP ]] || die "cannot tell this node's address: pass --node-ip IP"
[[ -n $IFNAME ]] || IFNAME=$(iface_of "$NODE_IP")
if [[ -z $IFNAME ]]; then
  ((DRY_RUN)) || die "no interface holds $NODE_IP: pass --ifname IFACE"
  IFNAME="<iface of $NODE_IP>"
fi
export HCCL_SOCKET_IFNAME=$IFNAME GLOO_SOCKET_IFNAME=$IFNAME TP_SOCKET_IFNAME=$IFNAME
[[ $HW != cuda ]] || export NCCL_SOCKET_IFNAME=$IFNAME
echo "ray_cluster: node $NODE_IP, HCCL/GLOO/TP socket interface $IFNAME"

START_ARGS=(--hw "$HW")
((DRY_RUN)) && START_ARGS+=(--dry-run)
DEVICE_TEXT=$("$PY" -m recipes.launch.cluster start-args "${START_ARGS[@]}")
mapfile -t DEVICE_ARGS <<<"$DEVICE_TEXT"

if [[ $CMD == head ]]; then
  RAY_CMD=("$RAY" start --head --port="$PORT" --node-ip-address="$NODE_IP" --dashboard-host=0.0.0.0 "${DEVICE_ARGS[@]}")
else
  RAY_CMD=("$RAY" start --address="$ADDRESS" --node-ip-address="$NODE_IP" "${DEVICE_ARGS[@]}")
fi
if ((DRY_RUN)); then
  printf 'ray_cluster: would run:'
  for word in "${RAY_CMD[@]}"; do
    if [[ $word =~ ^[A-Za-z0-9_./:=@,+-]+$ ]]; then printf ' %s' "$word"; else printf " '%s'" "${word//\'/\'\\\'\'}"; fi
  done
  printf '\n'
  exit 0
fi
"${RAY_CMD[@]}"
if [[ $CMD == head ]]; then
  echo "ray_cluster: head up. On each other node: bash scripts/ray_cluster.sh worker --hw $HW --address $NODE_IP:$PORT"
  echo "ray_cluster: then here: bash scripts/ray_cluster.sh status --hw $HW --nodes <N>"
fi
