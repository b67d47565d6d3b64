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
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from ...model.workdir import atomic_write

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
    record: RealizationRecord | None = None  #: the provider's record of what it realized

    @property
    def store_name(self) -> str:
        return self.path.name


#: Where the provider keeps its records, inside the store but outside every entry (nodes mount the store
#: read-only; the suites read records through the worker pool, on the host, never through a worker).
RECORDS_DIR = ".records"
#: A realized path inside a record's values, so a record does not depend on where the store is mounted.
FLOX_ENV_TOKEN = "${FLOX_ENV}"
#: Variables a shell sets by itself; they are not the activation's.
_SHELL_SET = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})


@dataclass(frozen=True)
class Activation:
    """What activating the environment in one mode yields, recorded by running :data:`ACTIVATE_SH` itself in a
    sanitized environment: the PATH entries rooted in the environment (in order, relative to FLOX_ENV, ``.`` for
    FLOX_ENV itself), the executables each entry holds, and every variable the activation exports (PATH aside),
    with the realized path written as :data:`FLOX_ENV_TOKEN`."""

    status: str  #: "ok", or "failed: <reason>"
    path: tuple[str, ...] = ()
    bin_entries: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class RealizationRecord:
    """The local runtime provider's own record of one realized generation (the local stand-in for a Flox
    generation's lock metadata): which reference, which content (digest), and what activation yields per mode.
    It is written by the provider when it realizes, from the definition, on the host; the suites compare what a
    worker really has and does against it."""

    ref: str
    generation: int
    store_name: str
    content_digest: str
    activations: dict[str, Activation]

    def realized_path(self, mount: str) -> str:
        return f"{mount.rstrip('/')}/{self.store_name}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": 1,
            "ref": self.ref,
            "generation": self.generation,
            "store_name": self.store_name,
            "content_digest": self.content_digest,
            "activations": {
                mode: {
                    "status": a.status,
                    "path": list(a.path),
                    "bin_entries": {k: list(v) for k, v in a.bin_entries.items()},
                    "exports": dict(a.exports),
                }
                for mode, a in self.activations.items()
            },
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RealizationRecord:
        return cls(
            ref=str(doc["ref"]),
            generation=int(doc["generation"]),
            store_name=str(doc["store_name"]),
            content_digest=str(doc["content_digest"]),
            activations={
                mode: Activation(
                    status=str(a["status"]),
                    path=tuple(a.get("path", ())),
                    bin_entries={k: tuple(v) for k, v in (a.get("bin_entries") or {}).items()},
                    exports={str(k): str(v) for k, v in (a.get("exports") or {}).items()},
                )
                for mode, a in doc["activations"].items()
            },
        )


def _record_activation(entry: Path, mode: str) -> Activation:
    """Activate ``entry`` with the very program the nodes use and write down what it yields."""
    with tempfile.TemporaryDirectory(prefix="slurmflox-activate-") as tmp:
        program = Path(tmp) / "flox-activate"
        program.write_text(ACTIVATE_SH)
        try:
            proc = subprocess.run(
                ["/usr/bin/env", "-i", "/bin/bash", str(program), str(entry), mode, "--", "/usr/bin/env", "-0"],
                capture_output=True,
                timeout=60,
                check=False,
                cwd="/",
            )
        except subprocess.TimeoutExpired:
            return Activation(status="failed: activation did not finish within 60 s")
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return Activation(status=f"failed: {why[0]}")
    env = dict(item.split("=", 1) for item in proc.stdout.decode(errors="surrogateescape").split("\0") if "=" in item)
    root = str(entry)
    rel_path: list[str] = []
    for item in env.get("PATH", "").split(":"):
        if item == root or item.startswith(root + "/"):
            rel = os.path.relpath(item, root)
            if rel not in rel_path and ".." not in Path(rel).parts:
                rel_path.append(rel)
    bins = {
        rel: tuple(sorted(p.name for p in (entry / rel).iterdir() if p.is_file() and p.stat().st_mode & stat.S_IXUSR))
        for rel in rel_path
        if (entry / rel).is_dir()
    }
    exports = {
        name: value.replace(root, FLOX_ENV_TOKEN)
        for name, value in sorted(env.items())
        if name != "PATH" and name not in _SHELL_SET
    }
    return Activation(status="ok", path=tuple(rel_path), bin_entries=bins, exports=exports)


def make_record(ref: EnvRef, entry: Path) -> RealizationRecord:
    return RealizationRecord(
        ref=str(ref),
        generation=ref.generation,
        store_name=entry.name,
        content_digest=content_digest(entry),
        activations={mode: _record_activation(entry, mode) for mode in ("run", "dev")},
    )


def record_file(store: Path, store_name: str) -> Path:
    return store / RECORDS_DIR / f"{store_name}.json"


def read_record(store: Path, store_name: str) -> RealizationRecord | None:
    """The provider's record of a store entry (None: it never realized that entry)."""
    try:
        return RealizationRecord.from_dict(json.loads(record_file(store, store_name).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


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


def check_manifest(ref: EnvRef, src: Path) -> dict:
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


#: The file realization adds to a store entry; not part of the environment's content.
REALIZED_MARKER = ".slurmflox-realized"

#: The same listing and digest as :func:`content_listing`, computed by a shell on a worker (GNU find, sort,
#: sha256sum by absolute path, so a task PATH cannot substitute them). ``$1`` is the realized directory; prints
#: ``sha256:<hex>``, or ``MISSING`` when the directory does not exist. The suites run it as a task, so the digest
#: of what a worker really has is recomputed there and compared with the provider's record.
DIGEST_SH = r"""d=$1; [ -d "$d" ] || { echo MISSING; exit 0; }; cd "$d" || exit 3
LC_ALL=C /usr/bin/find . -mindepth 1 ! -path ./.slurmflox-realized -print0 | LC_ALL=C /usr/bin/sort -z |
while IFS= read -r -d '' p; do r=${p#./}
  if [ -L "$p" ]; then printf 'L %s -> %s\n' "$r" "$(/usr/bin/readlink "$p")"
  elif [ -d "$p" ]; then printf 'D %s\n' "$r"
  else if [ -x "$p" ]; then m=x; else m=-; fi; h=$(/usr/bin/sha256sum < "$p")
    printf 'F %s %s %s\n' "$m" "${h%% *}" "$r"
  fi
done | /usr/bin/sha256sum | { read -r h _; echo "sha256:$h"; }"""


def content_listing(root: Path) -> str:
    """One line per entry below ``root`` (the realization marker excluded), in byte order of the relative path:
    ``D rel``, ``L rel -> target``, ``F x|- <sha256> rel``. Only what a task can observe goes in (names, link
    targets, contents, executable or not), so :data:`DIGEST_SH` reproduces it on a worker."""
    entries = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if rel == REALIZED_MARKER:
            continue
        if path.is_symlink():
            line = f"L {rel} -> {os.readlink(path)}"
        elif path.is_dir():
            line = f"D {rel}"
        else:
            mode = "x" if path.stat().st_mode & stat.S_IXUSR else "-"
            line = f"F {mode} {hashlib.sha256(path.read_bytes()).hexdigest()} {rel}"
        entries.append((rel.encode(), line))
    return "".join(line + "\n" for _, line in sorted(entries))


def _content_hash(src: Path) -> str:
    """sha256 (hex) of :func:`content_listing`: the environment's content identity."""
    return hashlib.sha256(content_listing(src).encode()).hexdigest()


def content_digest(root: Path) -> str:
    """``sha256:<hex>`` of a definition or realized entry (the form the worker-side :data:`DIGEST_SH` prints)."""
    return "sha256:" + _content_hash(root)


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
    check_manifest(env_ref, src)
    digest = _content_hash(src)
    store.mkdir(parents=True, exist_ok=True)
    dest = store / f"{digest[:32]}-{env_ref.name}-{env_ref.generation}"
    with FileLock(str(store / ".lock")):
        if (dest / ".slurmflox-realized").is_file():
            return Realized(str(env_ref), dest, digest, ensure_record(env_ref, store, dest))
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
        record = ensure_record(env_ref, store, dest)
    return Realized(str(env_ref), dest, digest, record)


def ensure_record(ref: EnvRef, store: Path, entry: Path) -> RealizationRecord:
    """Write the record of a freshly realized entry (or of an entry realized before records existed)."""
    existing = read_record(store, entry.name)
    if existing is not None:
        return existing
    record = make_record(ref, entry)
    # workers of one cohort converge at once (pool.each): the same record may be written by several, atomically
    atomic_write(record_file(store, entry.name), json.dumps(record.as_dict(), indent=2, sort_keys=True) + "\n")
    return record


def _force_remove(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)
