"""The cluster fabric: a routed bridge inside a network namespace we create, and one veth per node.

Nothing here touches a host interface: the bridge lives in the cluster's own *fabric* namespace, each veth pair
is created inside that namespace and its node end moved straight into the node's namespace. The addresses
(FABRIC_NET, private) exist only inside these namespaces, so two clusters (a developer's and a test's) can use
the same range without meeting. The only path from the host into the cluster is our loopback port forwarder.

Why routed, not one flat segment: the kernel's neighbour (ARP) table is one table for every network namespace of
the host, bounded by the init namespace's ``net.ipv4.neigh.default.gc_thresh3`` (1024 by default). On a flat /24
every node learns every node it talks to: n * n entries, so 32 workers exchanging MPI messages between every pair
filled it ("neighbour: arp_cache: neighbor table overflow!" in the kernel log) and connects between workers stalled
while the cluster was healthy. Like a Kubernetes CNI that routes pods (Calico's /32 per pod behind one gateway),
each node here holds its address as a /32 and reaches every other node through the fabric's gateway
(:data:`GATEWAY`, the bridge's own address, forwarding inside the fabric namespace only): a node learns one
neighbour, the fabric one per node, 2n entries for n nodes. Nothing on the host changes.

Every link address is fixed, a function of the IP address it carries (as Docker derives a container's MAC from its
IP), because a learned neighbour outlives the link it was learned from by up to a minute (REACHABLE for 15-45 s,
then probes). A Linux bridge with no address of its own takes its ports' lowest one and changes it as ports come and
go (``br_stp_recalculate_bridge_id`` in the kernel's net/bridge/br_stp_if.c, skipped once an address is set): every
node that had learned the gateway earlier (the controller, the login) then sent into nothing while workers joined,
and a healthy cluster's login could not reach slurmctld for half a minute. A node restarted in a new namespace gets
a new veth but the same address, so the gateway's entry for it stays right too.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
FABRIC_NET = ipaddress.ip_network("10.77.0.0/24")
BRIDGE = "br0"
#: The fabric's gateway: the bridge's address in the fabric namespace, every node's one neighbour.
GATEWAY = str(FABRIC_NET.network_address + 1)


def mac_for(address: str) -> str:
    """The fixed link address of the interface holding ``address``: locally administered (02:), unicast, then the
    IPv4 octets, so it never changes across restarts and two addresses never share one."""
    octets = ipaddress.IPv4Address(address).packed
    return "02:00:" + ":".join(f"{b:02x}" for b in octets)


#: The bridge's own, fixed link address (see the module's docstring for why it must not follow its ports).
GATEWAY_MAC = mac_for(GATEWAY)

#: Per-namespace settings of the fabric namespace: it routes between nodes on one bridge, so it forwards and does
#: not tell a node to go direct (a redirect names a next hop the node's /32 cannot reach anyway).
FABRIC_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/send_redirects": "0",
    "net/ipv4/conf/default/send_redirects": "0",
}


class NetworkError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class Fabric:
    """The namespaces of one cluster, all named with the cluster prefix (``<prefix>-<what>``)."""

    prefix: str

    @property
    def fabric_ns(self) -> str:
        return f"{self.prefix}-fab"

    def node_ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    @staticmethod
    def ns_path(ns: str) -> Path:
        return NETNS_DIR / ns

    @staticmethod
    def exists(ns: str) -> bool:
        return (NETNS_DIR / ns).exists()

    def ours(self) -> list[str]:
        """Every namespace of this cluster that exists now."""
        if not NETNS_DIR.is_dir():
            return []
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(self.prefix + "-"))

    # ------------------------------------------------------------------------------------------ create
    def ensure_fabric(self) -> None:
        ns = self.fabric_ns
        if not self.exists(ns):
            _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        if _ip("-n", ns, "link", "show", BRIDGE, check=False).returncode != 0:
            _ip("-n", ns, "link", "add", BRIDGE, "type", "bridge")
        # No STP, no multicast snooping queries, no forwarding delay: a private L2 segment that is up at once.
        _ip(
            "-n",
            ns,
            "link",
            "set",
            BRIDGE,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
            "mcast_snooping",
            "0",
        )
        _set_address(ns, BRIDGE, GATEWAY_MAC)
        _ip("-n", ns, "link", "set", BRIDGE, "up")
        gateway = f"{GATEWAY}/{FABRIC_NET.prefixlen}"
        if gateway not in _ip("-n", ns, "-o", "-4", "addr", "show", "dev", BRIDGE).stdout:
            _ip("-n", ns, "addr", "add", gateway, "dev", BRIDGE)
        _sysctls(self.ns_path(ns), FABRIC_SYSCTLS)

    def ensure_node(self, node: str, address: str) -> None:
        """Namespace, veth into the bridge, the node's /32 on eth0 and every other node via :data:`GATEWAY`
        (idempotent; a node made before the fabric was routed gets its /32 and route here)."""
        ns = self.node_ns(node)
        veth = self.veth_name(address)
        if not self.exists(ns):
            _ip("netns", "add", ns)
        if _ip("-n", ns, "link", "show", "eth0", check=False).returncode != 0:
            _ip("-n", self.fabric_ns, "link", "del", veth, check=False)
            peer = ("peer", "name", "eth0", "address", mac_for(address), "netns", ns)
            _ip("-n", self.fabric_ns, "link", "add", veth, "type", "veth", *peer)
        _set_address(ns, "eth0", mac_for(address))
        _ip("-n", self.fabric_ns, "link", "set", veth, "master", BRIDGE, "up")
        have = _ip("-n", ns, "-o", "-4", "addr", "show", "dev", "eth0").stdout
        want = f"{address}/32"
        if f"inet {want} " not in have:
            _ip("-n", ns, "addr", "flush", "dev", "eth0")
            _ip("-n", ns, "addr", "add", want, "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "replace", GATEWAY, "dev", "eth0", "scope", "link")
        _ip("-n", ns, "route", "replace", str(FABRIC_NET), "via", GATEWAY, "dev", "eth0")

    @staticmethod
    def veth_name(address: str) -> str:
        return "vn" + address.rsplit(".", 1)[1]

    # ------------------------------------------------------------------------------------------ remove
    def remove_node(self, node: str) -> None:
        ns = self.node_ns(node)
        if self.exists(ns):
            _ip("netns", "del", ns, check=False)  # deleting the ns deletes eth0 and so its bridge peer

    def remove_all(self) -> list[str]:
        removed = []
        for ns in self.ours():
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
        return removed


def _set_address(ns: str, dev: str, mac: str) -> None:
    """Give ``dev`` in ``ns`` the link address ``mac`` unless it has it (idempotent; a set address also stops a
    bridge from taking its ports')."""
    if f"link/ether {mac} " not in _ip("-n", ns, "-o", "link", "show", dev).stdout:
        _ip("-n", ns, "link", "set", dev, "address", mac)


def _sysctls(ns_path: Path, values: dict[str, str]) -> None:
    """Write ``values`` (paths under /proc/sys) inside the namespace at ``ns_path``: /proc/sys/net is the opening
    process's own namespace's, so each write is a ``tee`` under ``nsenter --net``; nothing of the host's changes."""
    for key, value in values.items():
        proc = subprocess.run(
            ["nsenter", f"--net={ns_path}", *("tee", f"/proc/sys/{key}")],
            input=value + "\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise NetworkError(f"fabric setting {key}={value} in {ns_path.name}: {proc.stderr.strip()}")


def ns_inode(ns: str) -> int | None:
    """Inode of a named network namespace (compared with /proc/PID/ns/net to prove a process is inside)."""
    try:
        return os.stat(NETNS_DIR / ns).st_ino
    except OSError:
        return None


def address_for(index: int) -> str:
    """Fixed plan: .2 controller, .3 login, .10.. workers (index 1..), .200.. isolated workers."""
    return str(FABRIC_NET.network_address + index)
