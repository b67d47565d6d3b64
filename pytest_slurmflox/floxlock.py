"""A Flox generation's lock (``$FLOX_ENV/manifest.lock``): the store paths a worker pinned to it must run from.

Why: on a Flox target, T2 proves content identity the way the local provider does (issue #20): each store path the
pinned generation names for the worker's system must be present on the worker and pass ``nix-store
--verify-path``, and every worker of the cohort must hold the same lock. The lock is Flox's record of the
generation, rendered into the environment it built.

Format (verified against Flox's upstream source, github flox/flox: ``.flox/env/manifest.lock`` at commit 8b0dc1a
is a lock of this shape, and the environment builder's jq (``buildenv``) reads ``lockfile-version`` (must be 1) and,
per ``packages[]`` entry with ``.system == $system``, ``.outputs[<name>]`` as store paths; Flox's activation scripts
read the lock at ``$FLOX_ENV/manifest.lock``)::

    {"lockfile-version": 1,
     "manifest": {...},
     "packages": [{"install_id": "hello", "system": "x86_64-linux",
                   "outputs": {"out": "/nix/store/<hash>-hello-2.12.1"}, ...}, ...]}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

#: The lock versions this parser knows (Flox's buildenv refuses any other).
SUPPORTED_VERSIONS = (1,)
STORE_PREFIX = "/nix/store/"


class LockError(ValueError):
    """The text is not a Flox lock this parser understands; the message says what is wrong."""


@dataclass(frozen=True)
class LockedOutput:
    install_id: str
    system: str
    output: str  #: the output name (``out``, ``bin``, ``man``...)
    path: str  #: its store path


@dataclass(frozen=True)
class FloxLock:
    version: int
    outputs: tuple[LockedOutput, ...]
    digest: str  #: sha256 of the lock's canonical JSON: two workers hold the same lock iff their digests match

    def systems(self) -> list[str]:
        return sorted({o.system for o in self.outputs})

    def store_paths(self, system: str) -> dict[str, str]:
        """``install_id.output`` -> store path, for the packages locked for ``system``."""
        return {f"{o.install_id}.{o.output}": o.path for o in self.outputs if o.system == system}


def parse_lock(text: str) -> FloxLock:
    """Parse a ``manifest.lock``; :class:`LockError` names the first thing that is not a Flox lock."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LockError(f"not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise LockError("not a JSON object")
    version = doc.get("lockfile-version")
    if version not in SUPPORTED_VERSIONS:
        raise LockError(f"lockfile-version {version!r} is not supported (want one of {SUPPORTED_VERSIONS})")
    packages = doc.get("packages")
    if not isinstance(packages, list):
        raise LockError("no packages list")
    outputs = []
    for index, pkg in enumerate(packages):
        if not isinstance(pkg, dict):
            raise LockError(f"packages[{index}] is not an object")
        install_id, system, outs = pkg.get("install_id"), pkg.get("system"), pkg.get("outputs")
        if not isinstance(install_id, str) or not isinstance(system, str) or not isinstance(outs, dict):
            raise LockError(f"packages[{index}] lacks install_id, system or outputs")
        for name, path in sorted(outs.items()):
            if not isinstance(path, str) or not path.startswith(STORE_PREFIX) or "/" in path[len(STORE_PREFIX) :]:
                raise LockError(f"packages[{index}] ({install_id}) output {name} is not a store path: {path!r}")
            outputs.append(LockedOutput(install_id, system, str(name), path))
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return FloxLock(int(version), tuple(outputs), "sha256:" + hashlib.sha256(canonical).hexdigest())


def nix_system(machine: str, kernel: str) -> str:
    """The Nix system name of a worker from ``uname -m`` and ``uname -s`` (``x86_64`` + ``Linux`` ->
    ``x86_64-linux``; ``arm64`` is Darwin's spelling of ``aarch64``)."""
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine.strip(), machine.strip())
    return f"{machine}-{kernel.strip().lower()}"
