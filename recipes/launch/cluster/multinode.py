"""What the launcher says about a multi-node run beyond Ray's cluster check: the sandbox every node calls, and
torchrun's rendezvous and socket interface (issue 14, findings 1 and 5); and torchrun's node options. Called by
:mod:`recipes.launch.planning.plan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from omegaconf import DictConfig

from platforms import PROFILES
from recipes.launch.cluster import nodenet
from recipes.launch.sizing.capacity import is_loopback

DEFAULT_MASTER_PORT = "29500"


def loopback_sandbox_warning(url: str | None, nnodes: int) -> str | None:
    """verl 0.6.1 places agent-loop workers on every node (``verl/experimental/agent_loop/agent_loop.py`` L736-739,
    as :mod:`recipes.launch.sizing.capacity` cites), and each calls the sandbox from there: a loopback URL must be
    served on every node."""
    if not url or nnodes <= 1 or not is_loopback(url):
        return None
    return (
        f"RETOOL_SANDBOX_URL={url} is loopback and trainer.nnodes={nnodes}: verl runs agent-loop workers on every "
        "node, and each calls the sandbox from there. Start one sandbox per node (scripts/ray_cluster.sh "
        "head|worker --with-sandbox) or use a URL every node can reach; the launch checks each node"
    )


@dataclass
class Findings:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # for the command's `env` prefix
    checked: list[str] = field(default_factory=list)


def torchrun_findings(hw: str, nnodes: int, environ: Mapping[str, str], *, on_node: bool) -> Findings:
    """NODE_RANK/MASTER_ADDR/MASTER_PORT validated, and the platform's socket-interface variables set to the interface
    that carries this node's address toward MASTER_ADDR, unless the user set them: the same source as
    ``scripts/ray_cluster.sh`` (:mod:`recipes.launch.cluster.nodenet`). ``on_node``: the real launch (a dry run may be
    planned elsewhere, where an unresolvable name or the route from here says nothing about the node)."""
    out = Findings()
    found = nodenet.check_rendezvous(nnodes, environ)
    out.errors += found.errors
    if found.unresolved:
        (out.errors if on_node else out.warnings).append(found.unresolved)
    master = environ.get("MASTER_ADDR", "").strip()
    platform = PROFILES[hw].platform
    if found.errors or found.unresolved or not master:
        return out
    if all(environ.get(name, "").strip() for name in platform.socket_ifname_vars):
        return out
    interface = nodenet.interface_toward(master, environ)
    if interface.name is None:
        if on_node:
            out.warnings.append(
                f"cannot tell which interface carries this node's address ({interface.how}); collectives pick one "
                f"themselves: set {nodenet.IFNAME_ENV}=IFACE (or {'/'.join(platform.socket_ifname_vars)})"
            )
        return out
    out.env = nodenet.socket_env(platform, interface.name, environ)
    out.checked.append(f"socket interface {interface.name} ({interface.how})")
    return out


def torchrun_args(cfg: DictConfig, environ: Mapping[str, str]) -> list[str]:
    """torchrun's node options for an SFT launch: standalone on one node, else the rendezvous from the environment
    (placeholders in a dry run planned without it)."""
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    if nnodes == 1:
        return ["--standalone", "--nnodes=1", f"--nproc_per_node={per_node}"]
    return [
        f"--nnodes={nnodes}",
        f"--nproc_per_node={per_node}",
        f"--node_rank={environ.get('NODE_RANK', '').strip() or '<NODE_RANK>'}",
        f"--master_addr={environ.get('MASTER_ADDR', '').strip() or '<MASTER_ADDR>'}",
        f"--master_port={environ.get('MASTER_PORT', '').strip() or DEFAULT_MASTER_PORT}",
    ]
