"""The embedded local substrate: real Slurm (Debian's packages) in Linux namespaces on this host.

Modules, one job each: ``apt`` (host checks, mirror, host packages), ``image`` (node rootfs build and cache),
``runtime`` (local runtime provider: realize/activate ``local/<name>:<gen>``), ``network`` (bridge and veths
inside our namespaces), ``node`` (one node's namespaces, layers and supervising process; its PID proven by
``substrates/proc.py``, shared with the qemu substrate),
``scripts`` (node boot/init programs), ``slurmconf`` (pure config renderers), ``keys`` (credentials),
``forward`` (the loopback port forwarder program), ``forwarder`` (its supervisor), ``exec`` (NamespaceRunner),
``cluster`` (LocalCluster: node primitives), ``pool`` (LocalWorkerPool: the cohort), ``substrate`` (LocalSubstrate:
up/status/down/destroy/target over the cluster, the pool and the forwarder).
"""

from __future__ import annotations

from .substrate import LocalSubstrate

__all__ = ["LocalSubstrate"]
