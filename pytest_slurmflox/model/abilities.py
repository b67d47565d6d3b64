"""What a worker owner can do beyond :class:`~pytest_slurmflox.model.pool.WorkerPool`, each ability a small ABC.

A pool declares an ability by subclassing it (the local pool: isolating workers, service restart, runtime record,
Nix store record, directory changes; the qemu NodeSet pool: node admin).
:func:`~pytest_slurmflox.harness.connection.connect`
turns the abilities a pool has into capabilities with ``isinstance``, and a check asks the target
(``target.why_missing("runtime-record")``), never the pool's attributes: a method renamed on one pool then fails
the ABC at construction instead of quietly turning a check into a SKIP (the same reason ``pool.py``
uses ABCs and not a Protocol). ``tests/unit/test_abilities.py`` holds the suites and the package to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..base.run import Result
from .pool import WorkerInfo


class IsolatingWorkers(ABC):
    """Throwaway workers pinned to another runtime, outside the cohort (TF's failure isolation): capability
    ``isolated-worker``."""

    @abstractmethod
    def start_isolated_worker(self, name: str, flox_ref: str) -> WorkerInfo:
        """Start worker ``name`` pinned to ``flox_ref``; the cohort is not touched."""

    @abstractmethod
    def stop_isolated_worker(self, name: str) -> None:
        """Remove an isolated worker (nothing if there is none of that name)."""

    @abstractmethod
    def isolated(self) -> set[str]:
        """The isolated workers now: listed by the owner, never part of the cohort."""

    @abstractmethod
    def phase(self, name: str) -> str:
        """Where worker ``name``'s boot stands (``running``, ``failed: <why>``, ...)."""


class ServiceRestart(ABC):
    """Restarting the cluster's services from their kept state (TAR): capability ``service-restart``."""

    @abstractmethod
    def restart_service(self, service: str) -> None:
        """Restart ``slurmdbd`` or ``slurmctld`` and return once it serves again."""


class NodeAdmin(ABC):
    """Root on the Kubernetes nodes (T1 reads containerd's real configuration): capability ``node-admin``."""

    @abstractmethod
    def containerd_config(self, host: str) -> Result:
        """``containerd config dump`` on node ``host``, as root."""


class RuntimeRecord(ABC):
    """The runtime provider's own record of what each worker was given (T2, T3, TP, TR compare what a worker
    really has with it): capability ``runtime-record``. The local pool keeps one; on an existing cluster the
    target file's ``runtime`` section is that record, declared by the customer (declaredruntime.DeclaredRecord)."""

    @abstractmethod
    def realization(self, name: str) -> dict | None:
        """``{"environment", "realized_path", "record"}`` for worker ``name``, None if the provider has none."""


class NixStoreRecord(ABC):
    """The Nix store the local runtime provider realized into (T2's store check computes the pinned generation's
    path and verifies it there): capability ``nix-store-record``."""

    @abstractmethod
    def expected_store_path(self, ref: str) -> str:
        """The store path ``ref`` realizes to, computed by the provider (never read from a worker)."""

    @abstractmethod
    def store_verification(self, path: str) -> tuple[bool, str, str]:
        """Nix's own check of ``path``: (verify-path passed, its words, registered hash)."""

    @abstractmethod
    def nix_profile(self, name: str) -> str:
        """The Nix profile that pins worker ``name``'s generation."""


class DirectoryChanges(ABC):
    """An administrator's change to the cluster's directory service (TD's group change): capability
    ``directory-changes``."""

    @abstractmethod
    def modify_directory(self, ldif: str) -> Any:
        """Apply ``ldif`` (ldapmodify) as the directory's administrator; returns the command's result."""


#: capability -> (the ability that gives it, why it is missing when the pool lacks it)
ABILITIES: dict[str, tuple[type, str]] = {
    "isolated-worker": (IsolatingWorkers, "starting a throwaway worker is destructive on this target"),
    "service-restart": (ServiceRestart, "nothing on this target restarts slurmdbd and slurmctld (TAR)"),
    "node-admin": (
        NodeAdmin,
        "nothing here reaches the Kubernetes nodes as root (to read containerd's config)",
    ),
    "runtime-record": (
        RuntimeRecord,
        "the worker owner keeps no runtime-provider record (only the local runtime provider does) and the target "
        "file declares no runtime section",
    ),
    "nix-store-record": (NixStoreRecord, "no runtime provider of ours realized the workers into a Nix store"),
    "directory-changes": (
        DirectoryChanges,
        "nothing on this target changes the directory as its administrator (only the local substrate's pool)",
    ),
}
