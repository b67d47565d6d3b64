"""WorkerPool: the one thing lifecycle and the suites need from whatever owns the workers.

On Kubernetes the pool is the Slinky NodeSet (desired revision on the pod template, workers are pods with
annotations). On the local substrate it is the set of worker nodes the substrate supervises (desired revision in
its state, workers record their annotations in a file). Lifecycle code is written once against this protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class WorkerPool(Protocol):
    """Owner of the worker cohort."""

    def desired_count(self) -> int:
        """How many workers the owner is asked to keep."""

    def desired_revision(self) -> str | None:
        """The runtime revision the owner is currently asked to run (None: nothing deployed yet)."""

    def apply(self, settings: Settings) -> str:
        """Ask the owner for workers of ``settings``' runtime; returns the new desired revision.

        Replaces the cohort as the owner does (NodeSet rollout; local: restart each worker). Returns once the
        request is accepted; readiness is observed through :meth:`workers`.
        """

    def workers(self) -> list[WorkerInfo]:
        """Every current worker, ready or not."""

    def revision_for(self, settings: Settings) -> str:
        """The runtime revision ``settings`` would deploy on this owner (its image digest included)."""

    def profile_revision(self, name: str) -> str | None:
        """The revision recorded in worker ``name``'s task profile, read through the owner (pod exec / node)
        rather than through Slurm, because the barrier must verify workers while Slurm keeps them drained."""

    def restart(self, name: str) -> None:
        """Restart worker ``name``'s slurmd so it registers again (after a stale node record was deleted)."""
