"""A declared runtime: the target file's ``runtime`` section, what the workers of an existing cluster must realize.

Why: on the local substrate the runtime provider keeps its own record of the pinned generation (the realized path,
the PATH entries activation puts first, the variables it exports); on a customer's cluster nothing of ours
realized anything, so the customer writes that record down, off the cluster, the way they would export it from
the pinned environment (``flox activate`` of the pinned generation: ``$FLOX_ENV``, its ``PATH`` entries in order,
the allow-listed variables and their values). T2, T3, TP and TR judge the workers against it exactly as they judge
the local cohort against the provider's record (:class:`DeclaredRecord` gives the same
:class:`~pytest_slurmflox.model.abilities.RuntimeRecord` interface). It is written by the customer, never read from a
worker.

Section (every path absolute; task_prolog may be a file name beside slurm.conf, Slurm 25.11+)::

    runtime:
      realized_path: /nix/store/...-hpc-17          # required: what $FLOX_ENV is on every worker
      path: [/nix/store/...-hpc-17/bin]             # required: the PATH entries activation puts first, in order
      exports: {HPC_HOME: /nix/store/...-hpc-17}    # required ({} for none): the allow-listed exports, values
      profile_dir: /run/flox-task-profile/current   # required: where the task profile initializer writes
      task_prolog: /etc/slurm/flox-task-prolog/task-prolog.sh   # required: slurm.conf's TaskProlog (or a file name)
      executables: {/nix/store/...-hpc-17/bin: [python3]}   # optional: commands in PATH entries (TP's shadowing)
      content_digest: sha256:<64 hex>   # optional: T2's content digest of realized_path (runtime.DIGEST_SH listing)
      nar_hash: sha256:<52 base32>      # optional: Nix's NAR hash of realized_path (``nix-store -q --hash``; T2)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .abilities import RuntimeRecord

#: The keys of the section and whether each is required.
KEYS: Mapping[str, bool] = {
    "realized_path": True,
    "path": True,
    "exports": True,
    "profile_dir": True,
    "task_prolog": True,
    "executables": False,
    "content_digest": False,
    "nar_hash": False,
}
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_NAR = re.compile(r"sha256:[0-9a-z]{52}\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class DeclaredRuntime:
    """What every worker must realize, as declared in the target file's ``runtime`` section."""

    realized_path: str
    path: tuple[str, ...]
    exports: Mapping[str, str]
    profile_dir: str
    task_prolog: str
    executables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    content_digest: str = ""
    nar_hash: str = ""


def _absolute(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\n" in value:
        raise ValueError(f"runtime.{key} must be an absolute path, not {value!r}")
    return value.rstrip("/") or "/"


def _task_prolog(value: Any) -> str:
    """An absolute path, or a bare file name: from Slurm 25.11 slurmd resolves a relative TaskProlog beside its
    slurm.conf, where a configless controller ships it (judges/taskprolog.py)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", value):
        return value
    if isinstance(value, str) and value.startswith("/"):
        return _absolute(value, "task_prolog")
    raise ValueError(
        f"runtime.task_prolog must be an absolute path or a file name beside slurm.conf (configless), not {value!r}"
    )


def _pattern(value: Any, key: str, pattern: re.Pattern[str], form: str) -> str:
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"runtime.{key} must be {form}, not {value!r}")
    return value


def _exports(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"runtime.exports must map each allow-listed variable to its value, not {value!r}")
    out = {}
    for name, text in value.items():
        if not isinstance(name, str) or not _NAME.match(name) or name == "PATH":
            raise ValueError(f"runtime.exports.{name} is not a variable name an activation exports")
        if not isinstance(text, (str, int, float)) or isinstance(text, bool):
            raise ValueError(f"runtime.exports.{name} must be text, not {text!r}")
        out[name] = str(text)
    return out


def _executables(value: Any, path: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    if value in (None, {}):
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"runtime.executables must map PATH entries to command names, not {value!r}")
    out = {}
    for entry, names in value.items():
        if _absolute(entry, "executables") not in path:
            raise ValueError(f"runtime.executables.{entry} is not one of runtime.path's entries")
        if not isinstance(names, list) or not all(isinstance(n, str) and n and "/" not in n for n in names):
            raise ValueError(f"runtime.executables.{entry} must be a list of command names")
        out[entry.rstrip("/")] = tuple(names)
    return out


def parse_runtime(section: Any) -> DeclaredRuntime:
    """The ``runtime`` section; ValueError naming the key for anything unknown, missing or malformed."""
    if not isinstance(section, Mapping):
        raise ValueError("runtime must be a mapping (realized_path, path, exports, profile_dir, task_prolog)")
    unknown = sorted(set(map(str, section)) - set(KEYS))
    if unknown:
        raise ValueError(f"runtime.{unknown[0]} is not a key of the runtime section (keys: {', '.join(KEYS)})")
    for key, required in KEYS.items():
        if required and section.get(key) is None:
            raise ValueError(f"runtime.{key} is required")
    entries = section["path"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"runtime.path must list the PATH entries activation puts first, not {entries!r}")
    path = tuple(_absolute(entry, "path") for entry in entries)
    if len(set(path)) != len(path):
        raise ValueError("runtime.path names an entry twice")
    return DeclaredRuntime(
        realized_path=_absolute(section["realized_path"], "realized_path"),
        path=path,
        exports=_exports(section["exports"]),
        profile_dir=_absolute(section["profile_dir"], "profile_dir"),
        task_prolog=_task_prolog(section["task_prolog"]),
        executables=_executables(section.get("executables"), path),
        content_digest=_pattern(section.get("content_digest"), "content_digest", _DIGEST, "sha256:<64 hex>"),
        nar_hash=_pattern(section.get("nar_hash"), "nar_hash", _NAR, "sha256:<52 base32 characters>"),
    )


def runtime_document(runtime: DeclaredRuntime) -> dict[str, Any]:
    """The ``runtime`` section of a target file: what :func:`parse_runtime` reads back into an equal value."""
    doc: dict[str, Any] = {
        "realized_path": runtime.realized_path,
        "path": list(runtime.path),
        "exports": dict(runtime.exports),
        "profile_dir": runtime.profile_dir,
        "task_prolog": runtime.task_prolog,
    }
    if runtime.executables:
        doc["executables"] = {entry: list(names) for entry, names in runtime.executables.items()}
    for key in ("content_digest", "nar_hash"):
        if getattr(runtime, key):
            doc[key] = getattr(runtime, key)
    return doc


class DeclaredRecord(RuntimeRecord):
    """The declared runtime as the runtime provider's record of the pinned generation ``ref`` activated in
    ``mode``: the same record every worker must have realized (the customer's declaration, never a worker's)."""

    def __init__(self, runtime: DeclaredRuntime, ref: str, mode: str) -> None:
        self.runtime = runtime
        self.ref = ref
        self.mode = mode

    def realization(self, name: str) -> dict | None:
        """The record for worker ``name``: the same for every worker (what the target declares they realize)."""
        rt = self.runtime
        activation = {
            "status": "ok",
            "path": list(rt.path),  # absolute entries: expectations.Runtime keeps them as they are
            "bin_entries": {entry: list(names) for entry, names in rt.executables.items()},
            "exports": dict(rt.exports),
        }
        record = {
            "format": 1,
            "ref": self.ref,
            "store_name": rt.realized_path.rsplit("/", 1)[-1],
            "content_digest": rt.content_digest,
            "activations": {self.mode: activation},
        }
        return {"environment": self.ref, "realized_path": rt.realized_path, "record": record}
