"""Seeds and credentials of a qemu deployment: the admin SSH key, per-node host keys, NoCloud seed ISOs.

The seed directory records the topology it was made for (``seed/topology.json``, written last, so its presence
means every seed is complete). A later ``up`` with another NODES is refused: the old node count is baked into
the guests, and silently re-seeding would leave guests that disagree about the cluster. ``destroy`` plus
removing ``seed/`` is the way to change it, as in the reference.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...model.settings import SettingsError
from ...model.workdir import Workdir, atomic_write, write_secret
from .. import SubstrateUnavailable
from . import fabric
from .render.cloudinit import SeedSpec, render_seed


@dataclass(frozen=True)
class Topology:
    nodes: int
    deployment_id: str


def read_topology(workdir: Workdir) -> Topology | None:
    try:
        doc = json.loads((workdir.seed / "topology.json").read_text())
    except FileNotFoundError:
        return None
    return Topology(nodes=int(doc["nodes"]), deployment_id=str(doc["deployment_id"]))


def check_topology(workdir: Workdir, nodes: int) -> Topology | None:
    """The recorded topology; SettingsError if ``nodes`` differs from it (nothing is changed)."""
    topo = read_topology(workdir)
    if topo is not None and topo.nodes != nodes:
        raise SettingsError(
            "NODES",
            nodes,
            f"the seeds in {workdir.seed} were made for NODES={topo.nodes}; to change the node count run "
            f"destroy and remove {workdir.seed} first",
        )
    return topo


def _keygen(path: Path, comment: str) -> None:
    if shutil.which("ssh-keygen") is None:
        raise SubstrateUnavailable("ssh-keygen is not installed (apt-get install openssh-client)")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def ensure_admin_key(workdir: Workdir) -> str:
    """The deployment's SSH key pair (id_cluster, 0600); returns the public key line."""
    if not (workdir.ssh_key.exists() and workdir.ssh_pubkey.exists()):
        with tempfile.TemporaryDirectory() as tmp:
            key = Path(tmp) / "id"
            _keygen(key, "pytest-slurmflox")
            write_secret(workdir.ssh_key, key.read_bytes())
            atomic_write(workdir.ssh_pubkey, key.with_suffix(".pub").read_bytes(), mode=0o644)
    return workdir.ssh_pubkey.read_text().strip()


def _make_iso(iso: Path, files: dict[str, Path]) -> None:
    if shutil.which("cloud-localds"):
        argv = [
            "cloud-localds",
            "-N",
            str(files["network-config"]),
            str(iso),
            str(files["user-data"]),
            str(files["meta-data"]),
        ]
    elif shutil.which("genisoimage"):
        argv = [
            "genisoimage",
            "-quiet",
            "-output",
            str(iso),
            "-volid",
            "cidata",
            "-joliet",
            "-rock",
            *(str(p) for p in files.values()),
        ]
    else:
        raise SubstrateUnavailable(
            "neither cloud-localds nor genisoimage is installed (apt-get install cloud-image-utils)"
        )
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def node_iso(workdir: Workdir, n: int) -> Path:
    return workdir.seed / f"{fabric.hostname(n)}.iso"


def ensure_seeds(workdir: Workdir, nodes: int, ssh_port_base: int) -> Topology:
    """Create the seeds for ``nodes`` VMs unless complete ones exist; also (re)writes known_hosts."""
    topo = check_topology(workdir, nodes)
    pubkey = ensure_admin_key(workdir)
    if topo is None:
        topo = Topology(nodes=nodes, deployment_id=secrets.token_hex(4))
        if workdir.seed.exists():
            shutil.rmtree(workdir.seed)  # an incomplete seed dir from an interrupted run (no topology.json)
        workdir.seed.mkdir(parents=True, mode=0o700)
        for n in range(1, nodes + 1):
            _write_node_seed(workdir, topo, n, pubkey)
        atomic_write(
            workdir.seed / "topology.json",
            json.dumps({"nodes": nodes, "deployment_id": topo.deployment_id}) + "\n",
            mode=0o600,
        )
    write_known_hosts(workdir, topo, ssh_port_base)
    return topo


def _write_node_seed(workdir: Workdir, topo: Topology, n: int, pubkey: str) -> None:
    node_dir = workdir.seed / fabric.hostname(n)
    node_dir.mkdir(mode=0o700)
    _keygen(node_dir / "ssh_host_ed25519_key", f"root@{fabric.hostname(n)}")
    spec = SeedSpec(
        node=n,
        nodes=topo.nodes,
        deployment_id=topo.deployment_id,
        hostname=fabric.hostname(n),
        fabric_address=f"{fabric.fabric_ip(n)}/24",
        fabric_mac=fabric.fabric_mac(n),
        mgmt_mac=fabric.mgmt_mac(n),
        admin_pubkey=pubkey,
        host_key_private=(node_dir / "ssh_host_ed25519_key").read_text(),
        host_key_public=(node_dir / "ssh_host_ed25519_key.pub").read_text(),
        hosts=fabric.hosts_file(topo.nodes),
    )
    files = {}
    for name, text in render_seed(spec).items():
        write_secret(node_dir / name, text)
        files[name] = node_dir / name
    iso = node_iso(workdir, n)
    partial = iso.with_name("." + iso.name + ".partial")
    _make_iso(partial, files)
    partial.chmod(0o600)
    partial.replace(iso)


def host_public_key(workdir: Workdir, n: int) -> str:
    """``type base64`` of node ``n``'s host key."""
    parts = (workdir.seed / fabric.hostname(n) / "ssh_host_ed25519_key.pub").read_text().split()
    return f"{parts[0]} {parts[1]}"


def write_known_hosts(workdir: Workdir, topo: Topology, ssh_port_base: int) -> None:
    """Pin every node's host key for its loopback port (and its fabric name)."""
    base = ssh_port_base
    lines = []
    for n in range(1, topo.nodes + 1):
        key = host_public_key(workdir, n)
        lines.append(f"[127.0.0.1]:{fabric.ssh_port(base, n)} {key}")
        lines.append(f"{fabric.hostname(n)},{fabric.fabric_ip(n)} {key}")
    write_secret(workdir.known_hosts, "\n".join(lines) + "\n")
