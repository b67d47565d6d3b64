"""NoCloud seed documents for one VM: user-data, meta-data, network-config. Pure text, no I/O.

Why these choices:

* Host keys are generated on the host and handed to the guest, so the host can pin them in known_hosts
  before the first connection; SSH never has to trust on first use.
* /etc/hosts is written with ``write_files`` (``manage_etc_hosts`` would rewrite it on every boot).
* NODES is baked into every seed (``/etc/slurmflox/nodes``) and into the instance-id, so a seed describes one
  topology only; the substrate refuses a different NODES until the seeds are removed.
* Every NIC is described and matched by MAC with ``set-name``: stable names whatever order the kernel finds
  the devices in. The management NIC (QEMU user networking) uses DHCP, the fabric NIC a static address.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

ADMIN_USER = "slurmflox"


@dataclass(frozen=True)
class SeedSpec:
    """Everything one node's seed says."""

    node: int
    nodes: int
    deployment_id: str  #: random id of the deployment, fixed when its seeds are first made
    hostname: str
    fabric_address: str  #: CIDR form, e.g. 10.20.0.11/24
    fabric_mac: str
    mgmt_mac: str
    admin_pubkey: str
    host_key_private: str
    host_key_public: str
    hosts: str  #: /etc/hosts content
    admin_user: str = ADMIN_USER

    @property
    def instance_id(self) -> str:
        return f"slurmflox-{self.deployment_id}-n{self.nodes}-{self.hostname}"


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def render_user_data(spec: SeedSpec) -> str:
    doc = {
        "hostname": spec.hostname,
        "preserve_hostname": False,
        "manage_etc_hosts": False,
        "ssh_pwauth": False,
        "disable_root": True,
        "ssh_deletekeys": True,
        "ssh_genkeytypes": ["ed25519"],  # already given: nothing is generated
        "ssh_keys": {
            "ed25519_private": spec.host_key_private.rstrip("\n") + "\n",
            "ed25519_public": spec.host_key_public.strip(),
        },
        "users": [
            {
                "name": spec.admin_user,
                "gecos": "pytest-slurmflox administrator",
                "shell": "/bin/bash",
                "lock_passwd": True,
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "ssh_authorized_keys": [spec.admin_pubkey.strip()],
            }
        ],
        "write_files": [
            {"path": "/etc/hosts", "permissions": "0644", "content": spec.hosts},
            {"path": "/etc/slurmflox/nodes", "permissions": "0644", "content": f"{spec.nodes}\n"},
            {"path": "/etc/slurmflox/node", "permissions": "0644", "content": f"{spec.node}\n"},
        ],
    }
    return "#cloud-config\n" + _dump(doc)


def render_meta_data(spec: SeedSpec) -> str:
    return _dump({"instance-id": spec.instance_id, "local-hostname": spec.hostname})


def render_network_config(spec: SeedSpec) -> str:
    doc = {
        "version": 2,
        "ethernets": {
            "mgmt0": {
                "match": {"macaddress": spec.mgmt_mac},
                "set-name": "mgmt0",
                "dhcp4": True,
            },
            "fabric0": {
                "match": {"macaddress": spec.fabric_mac},
                "set-name": "fabric0",
                "dhcp4": False,
                "addresses": [spec.fabric_address],
            },
        },
    }
    return _dump(doc)


def render_seed(spec: SeedSpec) -> dict[str, str]:
    """File name -> content of the NoCloud seed (the ``cidata`` volume)."""
    return {
        "user-data": render_user_data(spec),
        "meta-data": render_meta_data(spec),
        "network-config": render_network_config(spec),
    }
