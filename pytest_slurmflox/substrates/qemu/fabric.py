"""The VM fabric: node names, addresses, MACs and ports, all derived from the node number, plus the switch.

Why derived: a node's identity must be the same on every run without keeping a table, so a rerun, a
``down``/``up`` cycle or a new seed all agree. The scheme uses one decimal digit for the node number, which is
why NODES is limited to 1..9.

The private fabric 10.20.0.0/24 is a ``vde_switch`` process of ours, reached over unix sockets in the work
dir: frames never leave this host, no multicast, no host bridge, no root needed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...base.waits import WaitTimedOut, poll
from .. import SubstrateUnavailable
from .. import proc as pidproof
from ..proc import ProcessProof

FABRIC_NETWORK = "10.20.0.0/24"
FABRIC_PREFIX = "10.20.0."
K8S_GUEST_API_PORT = 6443


def check_node_number(n: int) -> int:
    if not 1 <= n <= 9:
        raise ValueError(f"node number {n} is outside 1..9 (the address/MAC scheme has one digit)")
    return n


def hostname(n: int) -> str:
    return f"node{check_node_number(n)}"


def fabric_ip(n: int) -> str:
    """node1 -> 10.20.0.11, node9 -> 10.20.0.19."""
    return f"{FABRIC_PREFIX}{10 + check_node_number(n)}"


def fabric_mac(n: int) -> str:
    """Locally administered QEMU range; the 5th byte marks the fabric NIC."""
    return f"52:54:00:20:00:{check_node_number(n):02x}"


def mgmt_mac(n: int) -> str:
    """The user-mode (management/SSH) NIC."""
    return f"52:54:00:10:00:{check_node_number(n):02x}"


def ssh_port(ssh_port_base: int, n: int) -> int:
    return ssh_port_base + check_node_number(n)


def hosts_file(nodes: int) -> str:
    """/etc/hosts content for every guest: the fabric names of all nodes."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    lines += [f"{fabric_ip(n)} {hostname(n)}" for n in range(1, nodes + 1)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Fabric:
    """The vde switch of one deployment: ``<nodes dir>/fabric/`` holds its sockets, pidfile and mgmt socket."""

    root: Path

    @property
    def sock(self) -> Path:
        return self.root / "switch"

    @property
    def pidfile(self) -> Path:
        return self.root / "vde_switch.pid"

    @property
    def mgmt(self) -> Path:
        return self.root / "mgmt"

    def proof(self) -> ProcessProof:
        return ProcessProof(self.pidfile, exe_names=("vde_switch",), cmdline_contains=str(self.sock))

    def netdev(self, netdev_id: str) -> str:
        return f"vde,id={netdev_id},sock={self.sock}"

    def start(self) -> int:
        """Start the switch unless a proven one runs; returns its PID."""
        pid = self.proof().trusted_pid()
        if pid is not None:
            return pid
        binary = shutil.which("vde_switch")
        if binary is None:
            raise SubstrateUnavailable(
                "vde_switch is not installed: the private VM fabric needs it (apt-get install vde2)"
            )
        self.pidfile.unlink(missing_ok=True)
        if self.sock.exists():
            shutil.rmtree(self.sock)
        self.mgmt.unlink(missing_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                binary,
                "--sock",
                str(self.sock),
                "--mgmt",
                str(self.mgmt),
                "--daemon",
                "--pidfile",
                str(self.pidfile),
                "--dirmode",
                "0700",
                "--mode",
                "0600",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )

        def started() -> int | None:
            pid = self.proof().trusted_pid()
            return pid if pid is not None and (self.sock / "ctl").exists() else None

        try:
            return poll(started, what="vde_switch", timeout=10, interval=0.05)
        except WaitTimedOut:
            raise SubstrateUnavailable(f"vde_switch did not come up (no proven pid in {self.pidfile})") from None

    def stop(self, timeout: float = 10) -> None:
        pid = self.proof().trusted_pid()
        if pid is not None:
            pidproof.terminate(pid, timeout)
        self.pidfile.unlink(missing_ok=True)
