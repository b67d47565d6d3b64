"""The work dir: its layout, persisted worker runtime settings, secrets and their removal.

The work dir (``operator/`` by default, as in the reference) holds everything a deployment knows about
itself. Files that carry credentials are created 0600 from the start (never chmod-ed after the fact), and every
write is atomic (temp file + rename), so an interrupted run never leaves a half-written file that a later run
could mistake for a complete one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.run import quoted
from .settings import WORKER_KEYS, SettingsError


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so readers see either the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_secret(path: Path, data: str | bytes) -> None:
    """A credential file: 0600 from creation on."""
    atomic_write(path, data, mode=0o600)


@dataclass(frozen=True)
class Workdir:
    """The deployment work dir and the reference's names inside it."""

    root: Path

    @property
    def worker_revision_env(self) -> Path:
        return self.root / "worker-revision.env"

    @property
    def deployment(self) -> Path:
        """What ``--slurmflox-up`` recorded: which substrate, which target file. Read by target discovery."""
        return self.root / "deployment.json"

    @property
    def ssh_key(self) -> Path:
        return self.root / "id_cluster"

    @property
    def ssh_pubkey(self) -> Path:
        return self.root / "id_cluster.pub"

    @property
    def munge_key(self) -> Path:
        return self.root / "munge.key"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "k8s" / "kubeconfig"

    @property
    def seed(self) -> Path:
        return self.root / "seed"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def base(self) -> Path:
        return self.root / "base"

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def local(self) -> Path:
        """The embedded local substrate's own state (node layers, shared home, run dirs)."""
        return self.root / "local"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def secret_paths(self) -> tuple[Path, ...]:
        """What strip-secrets removes: SSH key pair, Munge key, kubeconfig, cloud-init seeds, VM disks, and the
        local substrate's own credentials (its auth/slurm key, the login node's SSH host key, accounting secrets)."""
        return (
            self.ssh_key,
            self.ssh_pubkey,
            self.munge_key,
            self.kubeconfig,
            self.seed,
            self.nodes,
            self.known_hosts,
            self.local / "conf" / "slurm.key",
            self.local / "login" / "ssh_host_ed25519_key",
            self.local / "login" / "ssh_host_ed25519_key.pub",
            # the accounting database password, slurmdbd.conf (holds it) and the auth/jwt key
            self.local / "accounting" / "db_password.key",
            self.local / "accounting" / "slurmdbd.conf",
            self.local / "accounting" / "jwt_hs256.key",
        )

    def strip_secrets(self) -> list[Path]:
        """Remove every credential-bearing path; returns what was removed. Safe to repeat."""
        removed = []
        for path in self.secret_paths():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
                removed.append(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
                removed.append(path)
        return removed

    # -- the recorded deployment -------------------------------------------------------------------
    def record_deployment(self, record: Mapping[str, Any]) -> None:
        atomic_write(self.deployment, json.dumps(dict(record), indent=2, sort_keys=True) + "\n")

    def read_deployment(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.deployment.read_text())
        except FileNotFoundError:
            return None

    def forget_deployment(self) -> None:
        self.deployment.unlink(missing_ok=True)


class WorkerRevisionFile:
    """``worker-revision.env``: explicitly deployed worker runtime settings, one ``KEY='value'`` per line.

    Shell-quoted so the file stays readable by the reference's bash tooling; parsed with ``shlex`` (never
    sourced). Only worker runtime keys are accepted in either direction.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, str]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        values: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, rest = line.partition("=")
            parts = shlex.split(rest) if rest.strip() else [""]
            if not sep or name not in WORKER_KEYS or len(parts) != 1:
                raise SettingsError(name, line, f"{self.path}:{number} is not a KEY='value' worker setting")
            values[name] = parts[0]
        return values

    def merged(self, explicit: Mapping[str, str]) -> dict[str, str]:
        """Persisted values with the explicit ones laid over them (an explicit value wins and is kept)."""
        unknown = set(explicit) - set(WORKER_KEYS)
        if unknown:
            name = sorted(unknown)[0]
            raise SettingsError(name, explicit[name], "is not a worker runtime key and cannot be persisted")
        return {**self.read(), **explicit}

    def write(self, values: Mapping[str, str]) -> None:
        lines = ["# Worker runtime settings explicitly deployed; an explicit value replaces the one here."]
        lines += [f"{key}={quoted('%s', values[key])}" for key in WORKER_KEYS if key in values]
        atomic_write(self.path, "\n".join(lines) + "\n", mode=0o600)

    def record(self, explicit: Mapping[str, str]) -> dict[str, str]:
        """Persist the explicit keys on top of what was persisted before; returns the new content."""
        values = self.merged(explicit)
        if values != self.read() or (not self.path.exists() and values):
            self.write(values)
        return values
