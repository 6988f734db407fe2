"""Which network interface carries this node's address, and whether the socket-interface variables name it.

Why: multi-node torchrun and Ray jobs bootstrap their collectives (HCCL/NCCL, Gloo, TensorPipe) on one host
interface each. Unset, every library picks one by its own rule; on multi-NIC hosts (a management NIC, the
business NIC, docker0) that can be an interface the other nodes cannot reach, and the job hangs at
``init_process_group`` instead of failing (CANN's HCCL_SOCKET_IFNAME page, envref_07_0075: when the NIC this node
picks and the root's are not linked, HCCL fails to build its links). The variables to set are the platform's
(``platform.socket_ifname_vars``); this check shows the interface they should name and warns when one is set to an
interface that does not carry the node's address.

This node's address is the one the other nodes reach it at: the source address of the route to MASTER_ADDR when
set (torchrun's rendezvous host), else of the default route (how Ray picks the node IP), or ``--node-ip``.
"""

from __future__ import annotations

import ipaddress

from platforms.doctor.probes import Context, Result, info, ok, skip, warn
from platforms.netprobe import DEFAULT_ROUTE_PEER, parse_ip_addr

#: Variables that take prefixes with ``=`` (exact) and ``^`` (exclude) (NCCL's env docs, NCCL_SOCKET_IFNAME; CANN's
#: envref_07_0075, HCCL_SOCKET_IFNAME); the others (GLOO_SOCKET_IFNAME, TP_SOCKET_IFNAME) take exact interface names.
PREFIX_SYNTAX_VARS = ("HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def selects(variable: str, value: str, interface: str) -> bool:
    """Whether ``variable=value`` lets the library use ``interface`` (the syntax of each variable, see above)."""
    spec = value.strip()
    exclude = variable in PREFIX_SYNTAX_VARS and spec.startswith("^")
    spec = spec.removeprefix("^") if exclude else spec
    exact = variable not in PREFIX_SYNTAX_VARS or spec.startswith("=")
    spec = spec.removeprefix("=") if variable in PREFIX_SYNTAX_VARS else spec
    names = [name.strip() for name in spec.split(",") if name.strip()]
    named = any(interface == name if exact else interface.startswith(name) for name in names)
    return not named if exclude else named


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def check_network(ctx: Context) -> list[Result]:
    env, variables = ctx.probes.env, ctx.platform.socket_ifname_vars
    master = env.get("MASTER_ADDR", "").strip()
    peer = master or DEFAULT_ROUTE_PEER
    if ctx.opts.node_ip:
        node_ip, how = ctx.opts.node_ip, "--node-ip"
    else:
        node_ip = ctx.probes.local_address(peer)
        how = f"route to MASTER_ADDR {master}" if master else "default route"
    if not node_ip:
        return [skip("network", f"no {how}: cannot tell this node's address (pass --node-ip, or set MASTER_ADDR)")]
    if _is_loopback(node_ip):
        summary = (
            f"this node's address is loopback ({node_ip}, {how}): fine on one node; a multi-node run needs "
            "MASTER_ADDR on an interface the other nodes reach"
        )
        return [info("network", summary, node_ip=node_ip, interface=None)]
    text = ctx.probes.ip_addr_text()
    if text is None:
        summary = f"this node's address is {node_ip} ({how}); `ip` is missing, so its interface is unknown"
        return [info("network", summary + " (install iproute2 to see it)", node_ip=node_ip, interface=None)]
    carriers = sorted({a.interface for a in parse_ip_addr(text) if a.ip == node_ip})
    if not carriers:
        summary = f"this node's address {node_ip} ({how}) is on none of this host's interfaces (NAT or a proxy?)"
        return [info("network", summary, node_ip=node_ip, interface=None)]
    interface = carriers[0]
    settings = {name: env[name] for name in variables if env.get(name, "").strip()}
    details = {"node_ip": node_ip, "interface": interface, "found_by": how, "set": settings}
    where = f"this node's address {node_ip} ({how}) is on {interface}"
    results: list[Result] = []
    for name, value in settings.items():
        if not selects(name, value, interface):
            results.append(
                warn(
                    f"network.ifname.{name}",
                    f"{name}={value!r} does not select {interface}, the interface that carries {node_ip}: "
                    "collectives bootstrap on another interface and a multi-node run can hang",
                    f"export {name}={interface} (or unset it)",
                    value=value,
                    interface=interface,
                )
            )
    unset = [name for name in variables if name not in settings]
    if unset:
        summary = f"{where}; for multi-node runs set {'/'.join(unset)}={interface} (unset: each library picks one)"
        results.insert(0, info("network", summary, **details))
    elif results:
        results.insert(0, info("network", f"{where}; see the network.ifname lines", **details))
    else:
        results.insert(0, ok("network", f"{where}; {', '.join(variables)} select it", **details))
    return results
