"""Cluster credentials: the operator SSH key pair, the login host key, the shared auth key.

Generated in-process (cryptography, already a paramiko dependency) so the substrate needs no ssh-keygen, and
written 0600 from creation on (workdir.write_secret). Existing keys are reused: a rerun never rotates them, so
known_hosts and authorized keys stay valid.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ...model.workdir import atomic_write, write_secret


def ensure_ed25519(private: Path, public: Path, comment: str) -> str:
    """Create the key pair if missing; return the public key line (``ssh-ed25519 AAAA... comment``)."""
    if private.is_file() and public.is_file():
        return public.read_text().strip()
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = f"{pub.decode()} {comment}"
    write_secret(private, priv)
    atomic_write(public, line + "\n", mode=0o644)
    return line


def ensure_shared_key(path: Path) -> None:
    """A shared cluster secret: 1024 random bytes, 0600 (munge.key or the auth/slurm slurm.key)."""
    if path.is_file() and path.stat().st_size >= 32:
        return
    write_secret(path, os.urandom(1024))


def known_hosts_line(host: str, port: int, host_pub: str) -> str:
    """A known_hosts entry pinning the login host key for ``[host]:port`` (paramiko's format too)."""
    kind, blob = host_pub.split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {kind} {blob}\n"
