"""Deciding "offline" before anything that needs the internet starts, without probing the internet.

Why no probe: a failed download half-way through kubeadm or helm leaves guests in a state a later run could
misread, and tests must never send traffic to addresses outside this host. So the decision is made from what
is known locally:

1. guests started with QEMU ``restrict=on`` cannot reach anything: offline by construction (always the case
   in this project's tests; nothing further is checked);
2. a host without any nameserver in its resolver configuration cannot resolve the download hosts;
3. only then (a real deployment with unrestricted guests) the download host names are resolved through the
   host's resolver; no connection is ever opened here.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

#: Where the Kubernetes stage downloads from, each with what comes from there (read from the guest scripts and
#: the addon plan; registry.k8s.io serves kubeadm's control-plane images, docker.io the images of upstream
#: manifests, hub/api.flox.dev the shim installer environment and the worker environments).
DOWNLOAD_HOSTS = (
    "pkgs.k8s.io",  # kubelet, kubeadm, kubectl packages
    "download.docker.com",  # containerd.io
    "registry.k8s.io",  # kube-apiserver, etcd, coredns, pause, ... (kubeadm init/join)
    "github.com",  # flannel and cert-manager release manifests
    "raw.githubusercontent.com",  # local-path-provisioner manifest
    "get.helm.sh",  # helm
    "ghcr.io",  # Slinky charts and images, flannel images
    "quay.io",  # cert-manager images
    "docker.io",  # images named without a registry (local-path-provisioner, busybox helpers)
    "downloads.flox.dev",  # Flox .deb/.rpm and its archive key
    "hub.flox.dev",  # FloxHub: the shim installer environment
    "api.flox.dev",  # FloxHub API (flox activate -r, flox pull)
    "cache.flox.dev",  # Flox binary cache (environment realization)
)


def nameservers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    try:
        text = resolv_conf.read_text()
    except OSError:
        return []
    return re.findall(r"^\s*nameserver\s+(\S+)", text, flags=re.M)


def offline_reason(
    restrict: bool, *, host_check: bool = True, resolv_conf: Path = Path("/etc/resolv.conf")
) -> str | None:
    """Why the guests cannot download, or None if nothing says so."""
    if restrict:
        return "the guests are isolated from every network (QEMU user networking with restrict=on)"
    if not host_check:
        return None
    if not nameservers(resolv_conf):
        return f"the host has no nameserver in {resolv_conf}"
    for host in DOWNLOAD_HOSTS:
        try:
            socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        except OSError as exc:
            return f"{host} does not resolve on this host ({exc})"
    return None
