"""The embedded local substrate: real Slurm (Debian's packages) in Linux namespaces on this host.

Modules, one job each: ``apt`` (host checks, mirror, host packages), ``image`` (node rootfs build and cache),
``runtime`` (local runtime provider: realize/activate ``local/<name>:<gen>``), ``network`` (bridge and veths
inside our namespaces), ``node`` (one node's namespaces, layers and supervising process), ``proc`` (PID proof),
``scripts`` (node boot/init programs), ``slurmconf`` (pure config renderers), ``keys`` (credentials),
``forward`` (loopback port forwarder into the login namespace), ``exec`` (NamespaceRunner), ``pool``
(LocalWorkerPool), ``substrate`` (LocalSubstrate: up/status/down/destroy).
"""

from __future__ import annotations

from .substrate import LocalSubstrate

__all__ = ["LocalSubstrate"]
