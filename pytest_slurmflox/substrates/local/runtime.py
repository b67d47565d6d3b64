"""The local runtime provider: the local substrate's stand-in for Flox realization and activation.

A worker environment keeps the Flox form ``owner/name:generation``; this provider serves ``local/*`` from the
definitions shipped in ``pytest_slurmflox/envs/`` (format described in envs/README.md). *Realizing* turns a
definition into an immutable, content-addressed store directory (``<sha256>-<name>-<generation>``, read-only);
*activating* runs a command inside it the way ``flox activate -m run -- cmd`` would: a sanitized bash with
FLOX_ENV set, the environment's ``bin`` first on PATH, and its hook sourced. A definition that cannot be realized
raises :class:`RealizationError`; the substrate then never starts that worker's slurmd (fail closed, as a Flox
realization failure keeps a pod from starting).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

OWNER = "local"
ENVS_ROOT = Path(__file__).resolve().parents[2] / "envs"
_REF = re.compile(r"(?P<owner>[A-Za-z0-9][A-Za-z0-9_.-]*)/(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*):(?P<gen>[1-9][0-9]*)\Z")

#: The bash program that activates an environment and execs the command after ``--``. It runs inside the node
#: under ``env -i`` (so nothing of the supervisor's environment leaks in) with FLOX_ENV and the mode as argv.
ACTIVATE_SH = r"""#!/bin/bash
# slurmflox local activation: flox activate -m <mode> -- <command>, for the local runtime provider.
set -euo pipefail
[ "$#" -ge 4 ] && [ "$3" = "--" ] || { echo "usage: flox-activate FLOX_ENV run|dev -- command..." >&2; exit 2; }
export FLOX_ENV="$1" FLOX_ACTIVATE_MODE="$2"
shift 3
[ -f "$FLOX_ENV/.slurmflox-realized" ] || { echo "flox-activate: $FLOX_ENV is not a realized environment" >&2; exit 1; }
export PATH="$FLOX_ENV/bin:${PATH:-/usr/local/bin:/usr/bin:/bin}"
if [ -f "$FLOX_ENV/activate.sh" ]; then
    # shellcheck disable=SC1091
    . "$FLOX_ENV/activate.sh" || { echo "flox-activate: activation hook of $FLOX_ENV failed" >&2; exit 1; }
fi
exec "$@"
"""


class RealizationError(RuntimeError):
    """The environment reference cannot be realized (unknown, malformed definition, missing content)."""


@dataclass(frozen=True)
class EnvRef:
    owner: str
    name: str
    generation: int

    @classmethod
    def parse(cls, ref: str) -> EnvRef:
        match = _REF.match(ref)
        if not match:
            raise RealizationError(f"{ref!r} is not an environment reference owner/name:generation")
        return cls(match["owner"], match["name"], int(match["gen"]))

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}:{self.generation}"


@dataclass(frozen=True)
class Realized:
    """A realized environment in the store."""

    ref: str
    path: Path  #: host path of the store entry
    content_hash: str

    @property
    def store_name(self) -> str:
        return self.path.name


def available(envs_root: Path = ENVS_ROOT) -> list[str]:
    """Every reference this provider can try to realize."""
    refs = []
    for name_dir in sorted(p for p in envs_root.iterdir() if p.is_dir()):
        for gen_dir in sorted((p for p in name_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
            refs.append(f"{OWNER}/{name_dir.name}:{gen_dir.name}")
    return refs


def definition_dir(ref: EnvRef, envs_root: Path = ENVS_ROOT) -> Path:
    if ref.owner != OWNER:
        raise RealizationError(
            f"{ref}: the local runtime provider serves only {OWNER}/* environments (no FloxHub here); "
            f"available: {', '.join(available(envs_root))}"
        )
    path = envs_root / ref.name / str(ref.generation)
    if not path.is_dir():
        raise RealizationError(f"{ref}: no such environment definition ({path} does not exist)")
    return path


def _check_manifest(ref: EnvRef, src: Path) -> dict:
    try:
        manifest = json.loads((src / "manifest.json").read_text())
    except FileNotFoundError:
        raise RealizationError(f"{ref}: definition has no manifest.json") from None
    except json.JSONDecodeError as exc:
        raise RealizationError(f"{ref}: manifest.json is not JSON ({exc})") from None
    if manifest.get("format") != 1:
        raise RealizationError(f"{ref}: manifest format {manifest.get('format')!r} is not supported (want 1)")
    if manifest.get("name") != ref.name or manifest.get("generation") != ref.generation:
        raise RealizationError(
            f"{ref}: manifest names {manifest.get('name')}:{manifest.get('generation')}, not its directory"
        )
    for rel in manifest.get("provides", []):
        target = src / rel
        if ".." in Path(rel).parts or not target.is_file() or not os.access(target, os.X_OK):
            raise RealizationError(f"{ref}: provides {rel!r}, but the definition has no executable {rel}")
    return manifest


def _content_hash(src: Path) -> str:
    """sha256 over relative paths, file modes (executable or not) and contents, in sorted order."""
    h = hashlib.sha256(b"slurmflox-local-env/1\0")
    for path in sorted(p for p in src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_symlink():
            h.update(b"L" + rel.encode() + b"\0" + os.readlink(path).encode() + b"\0")
        elif path.is_dir():
            h.update(b"D" + rel.encode() + b"\0")
        else:
            mode = b"x" if os.access(path, os.X_OK) else b"-"
            h.update(b"F" + mode + rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _make_read_only(root: Path) -> None:
    for path in [*root.rglob("*"), root]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        if path.is_dir():
            path.chmod(0o555)
        else:
            path.chmod(0o555 if mode & stat.S_IXUSR else 0o444)


def realize(ref: str, store: Path, envs_root: Path = ENVS_ROOT) -> Realized:
    """Realize ``ref`` into ``store`` (idempotent: an existing entry with the same content is reused)."""
    env_ref = EnvRef.parse(ref)
    src = definition_dir(env_ref, envs_root)
    _check_manifest(env_ref, src)
    digest = _content_hash(src)
    store.mkdir(parents=True, exist_ok=True)
    dest = store / f"{digest[:32]}-{env_ref.name}-{env_ref.generation}"
    with FileLock(str(store / ".lock")):
        if (dest / ".slurmflox-realized").is_file():
            return Realized(str(env_ref), dest, digest)
        if dest.exists():  # a crash mid-copy: never trust a half entry
            _force_remove(dest)
        tmp = Path(tempfile.mkdtemp(prefix=".realizing-", dir=store))
        try:
            shutil.copytree(src, tmp, symlinks=True, dirs_exist_ok=True)
            (tmp / ".slurmflox-realized").write_text(f"{env_ref}\n{digest}\n")
            _make_read_only(tmp)
            tmp.rename(dest)
        except BaseException:
            _force_remove(tmp)
            raise
    return Realized(str(env_ref), dest, digest)


def _force_remove(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)
