"""A Flox generation's lock (``$FLOX_ENV/manifest.lock``): the store paths a worker pinned to it must run from.

Why: on a Flox target, T2 proves content identity the way the local provider does: each store path the
pinned generation names for the worker's system must be present on the worker and pass ``nix-store
--verify-path``, and every worker of the cohort must hold the same lock. The lock is Flox's record of the
generation, rendered into the environment it built. "The same on every worker" alone would pass a cohort that
realized the wrong generation together, so each worker's lock is also compared, path by path, with the pinned
generation's lock obtained off the cluster (:func:`pinned_lock`: the target's ``flox.lock_file`` or the
Flox CLI on the operator's machine).

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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


# ------------------------------------------------------------------------------- the pinned generation's lock
def lock_file(section: object, base: Path) -> Path:
    """The target file's ``flox`` section -> ``flox.lock_file`` (relative to the target file's directory): the
    pinned generation's ``manifest.lock`` as the operator obtained it off-cluster. ValueError naming the key."""
    value = section.get("lock_file") if isinstance(section, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"flox.lock_file must be the path of the pinned generation's manifest.lock, not {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def pull_command(environment: str, generation: int, directory: Path) -> list[str]:
    """The Flox CLI's copy of the pinned generation into ``directory`` (its lock is then
    ``<directory>/.flox/env/manifest.lock``): the reference design's pre-warm command, ``flox pull <environment>
    --copy --generation <generation>``, with ``--dir``."""
    return ["flox", "pull", "--copy", "--dir", str(directory), "--generation", str(generation), environment]


def pinned_lock(declared: Path | None, environment: str, generation: int) -> tuple[FloxLock | None, str]:
    """The pinned generation's lock from off the cluster, and where it came from (or None and why there is none):
    the lock file the target declares, else the Flox CLI on this machine."""
    import shutil
    import subprocess
    import tempfile

    if declared is not None:
        try:
            return parse_lock(declared.read_text()), f"flox.lock_file {declared}"
        except (OSError, LockError) as exc:
            raise LockError(f"flox.lock_file {declared} is not the pinned generation's lock: {exc}") from None
    if shutil.which("flox") is None:
        return None, "the target file does not declare flox.lock_file and no flox CLI on this machine can pull it"
    with tempfile.TemporaryDirectory(prefix="sfx-flox-") as tmp:
        command = pull_command(environment, generation, Path(tmp))
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
        lock = Path(tmp) / ".flox" / "env" / "manifest.lock"
        if done.returncode != 0 or not lock.is_file():
            raise LockError(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
        return parse_lock(lock.read_text()), f"flox pull of {environment}:{generation} on this machine"


def lock_problems(pinned: FloxLock, worker: FloxLock, system: str) -> list[str]:
    """How a worker's lock differs from the pinned generation's for the worker's ``system``: each locked output
    (``install_id.output``) whose store path differs, is missing or is extra, naming both paths."""
    want, have = pinned.store_paths(system), worker.store_paths(system)
    problems = []
    for key in sorted(set(want) | set(have)):
        if want.get(key) != have.get(key):
            problems.append(
                f"{key} is {have.get(key) or 'not locked'} there, the pinned generation locks "
                f"{want.get(key) or 'nothing'}"
            )
    return problems


def cohort_lock_problems(pinned: FloxLock, locks: Mapping[str, FloxLock], systems: Mapping[str, str]) -> list[str]:
    """Every worker's :func:`lock_problems` against the pinned generation's lock, each naming its worker."""
    return [f"{node}: {p}" for node, lock in sorted(locks.items()) for p in lock_problems(pinned, lock, systems[node])]
