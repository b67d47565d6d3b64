"""WorkerView and WorkerPool: what lifecycle and the suites need from whatever owns the workers.

On Kubernetes the owner is the Slinky NodeSet (desired revision on the pod template, workers are pods with
annotations). On the local substrate it is the set of worker nodes the substrate supervises (desired revision in
its state, workers record their annotations in a file). Lifecycle code is written once against these classes.

Why abstract base classes and not a ``Protocol``: a Protocol is only checked by a type checker, and the qemu
pool shipped with four of seven methods, so every reconcile failed with AttributeError half-way through the
maintenance barrier. An ABC refuses to construct an incomplete pool (the way ReFrame's abstract scheduler and
launcher classes refuse), so a missing method fails at the first line of a test, not inside a cohort rollout.

The contract is split in two because a customer's cluster is only read, never changed by this project:
:class:`WorkerView` is what listing and verifying workers needs (a customer target gets only this);
:class:`WorkerPool` adds what changing the cohort needs (only a deployment of our own substrates has it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from .settings import Settings


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as its owner reports it (the local equivalent of a pod and its annotations)."""

    name: str  #: the Slurm node name the worker registers as
    ready: bool  #: the owner considers it started (pod Ready; local: slurmd running)
    revision: str | None  #: runtime revision the worker was created with (annotation)
    environment: str | None  #: pinned environment reference owner/name:generation (annotation)
    image: str | None  #: immutable image reference with digest
    runtime_class: str | None = None  #: Kubernetes RuntimeClass; None where there is none
    host: str | None = None  #: the Kubernetes node / host it runs on


class WorkerView(ABC):
    """Read-only view of the worker cohort: enough to list and verify workers, never to change them."""

    @abstractmethod
    def desired_count(self) -> int:
        """How many workers the owner is asked to keep."""

    @abstractmethod
    def desired_revision(self) -> str | None:
        """The runtime revision the owner is currently asked to run (None: nothing deployed yet)."""

    @abstractmethod
    def workers(self) -> list[WorkerInfo]:
        """Every current worker, ready or not."""

    @abstractmethod
    def profile_revision(self, name: str) -> str | None:
        """The revision recorded in worker ``name``'s task profile, read through the owner (pod exec / node)
        rather than through Slurm, because the barrier must verify workers while Slurm keeps them drained."""


class WorkerPool(WorkerView):
    """Owner of the worker cohort: the view plus the requests that change it (the maintenance barrier's)."""

    @abstractmethod
    def apply(self, settings: Settings) -> str:
        """Ask the owner for workers of ``settings``' runtime; returns the new desired revision.

        Replaces the cohort as the owner does (NodeSet rollout; local: restart each worker). Returns once the
        request is accepted; readiness is observed through :meth:`workers`.
        """

    @abstractmethod
    def revision_for(self, settings: Settings) -> str:
        """The runtime revision ``settings`` would deploy on this owner (its image digest included)."""

    @abstractmethod
    def restart(self, name: str) -> None:
        """Restart worker ``name``'s slurmd so it registers again (after a stale node record was deleted)."""

    def step_timeout(self, settings: Settings) -> float:
        """How long one waiting step of the maintenance barrier may take for ``settings``' cohort; an owner whose
        replacement of the cohort takes longer (a rolling update, a realization per worker) says so."""
        return 600.0


#: Method names of each contract, for tests and error messages (derived from the classes, never listed twice).
VIEW_METHODS = frozenset(WorkerView.__abstractmethods__)
POOL_METHODS = frozenset(WorkerPool.__abstractmethods__)
