"""The reference substrate: QEMU VMs (KVM, or TCG where KVM cannot serve), kubeadm, Slinky and Flox.

Layers, each rerunnable and each leaving a completion marker only after it really completed:

1. VM layer (:meth:`QemuSubstrate.up_vms`): base image, seeds, the private fabric switch, one overlay and one
   QEMU per node, SSH on 127.0.0.1:SSH_PORT_BASE+N. Works offline.
2. Shared home (:meth:`QemuSubstrate.shared_home`): node1 exports /home over NFS, nodes 2..N mount it.
3. Kubernetes and the Slurm stack (:mod:`.kubeadm`, :mod:`.addons`): needs the internet. Before any of it
   starts, :func:`.network.offline_reason` decides whether the guests can download at all; if not, ``up`` stops
   with one :class:`SubstrateUnavailable` message and writes no kubeconfig, no target and no stage marker.
"""

from __future__ import annotations

from .substrate import BootTime, QemuSubstrate

__all__ = ["BootTime", "QemuSubstrate"]
