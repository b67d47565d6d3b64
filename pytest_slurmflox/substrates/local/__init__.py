"""The embedded local substrate: real Slurm (Debian's packages) in Linux namespaces on this host.

Modules, one job each: ``apt`` (host checks, mirror, host packages), ``image`` (node rootfs build and cache),
``runtime`` (local runtime provider: realize/activate ``local/<name>:<gen>``), ``network`` (bridge and veths
inside our namespaces), ``node`` (one node's namespaces, layers and supervising process; its PID proven by
``substrates/proc.py``, shared with the qemu substrate),
``scripts`` (node boot/init programs), ``slurmconf`` (pure config renderers), ``keys`` (credentials),
``forward_program`` (the loopback port forwarder, a standalone program), ``forwarders`` (its supervisors),
``nsrunner`` (NamespaceRunner: commands inside a node), ``cluster`` (LocalCluster: node primitives), ``pool``
(LocalWorkerPool: the cohort, over the cluster), ``substrate`` (LocalSubstrate: up/status/down/destroy/target; it
holds one LocalCluster and hands it, with the forwarders, to the pool).
"""

from __future__ import annotations

from .substrate import LocalSubstrate

__all__ = ["LocalSubstrate"]
