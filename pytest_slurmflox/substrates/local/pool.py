"""LocalWorkerPool: the local substrate's owner of the worker cohort (what the NodeSet is on Kubernetes).

Desired state lives in ``<workdir>/local/state.json`` (desired revision, replicas, worker settings); each worker
records its own annotations (image, environment, revision) in its node dir when it boots. ``apply`` replaces
every worker with one of the new runtime, as a NodeSet rollout replaces every pod.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...pool import WorkerInfo, WorkerPool
from ...settings import Settings

if TYPE_CHECKING:
    from .substrate import LocalSubstrate


class LocalWorkerPool(WorkerPool):
    def __init__(self, substrate: LocalSubstrate) -> None:
        self.substrate = substrate

    def desired_count(self) -> int:
        state = self.substrate.read_state()
        return int(state.get("replicas", self.substrate.settings.compute_replicas))

    def desired_revision(self) -> str | None:
        return self.substrate.read_state().get("revision")

    def apply(self, settings: Settings) -> str:
        """Restart every worker with ``settings``' runtime (environment, profile, CPUs, memory)."""
        return self.substrate.replace_workers(settings)

    def workers(self) -> list[WorkerInfo]:
        return self.substrate.worker_infos()

    def revision_for(self, settings: Settings) -> str:
        """The revision ``settings`` deploy here: the local node image digest stands in for WORKER_IMAGE."""
        return self.substrate.revision_for(settings)

    def profile_revision(self, name: str) -> str | None:
        """Read worker ``name``'s task profile revision inside the node (not through Slurm)."""
        res = self.substrate.node_runner(name).run("cat /run/flox-task-profile/current/revision", timeout=15)
        text = res.stdout.strip()
        return text if res.ok and text else None

    def realization(self, name: str) -> dict | None:
        """The runtime provider's record of what worker ``name`` was given: ``{"environment", "realized_path",
        "record"}`` (record: runtime.RealizationRecord.as_dict(), None if the provider has none). Read on the host
        from the substrate's node annotations and the store's records, which the worker cannot write; the suites
        compare what the worker really has with it."""
        from . import runtime

        ann = self.substrate.node(name).annotations()
        path = ann.get("realized_path")
        if not ann or not path:
            return None
        record = runtime.read_record(self.substrate.store, str(path).rsplit("/", 1)[-1])
        return {
            "environment": ann.get("environment"),
            "realized_path": path,
            "record": record.as_dict() if record else None,
        }

    def restart(self, name: str) -> None:
        """Restart worker ``name`` (the whole node: profile initializer, then slurmd registers again)."""
        self.substrate.restart_worker(name)

    def start_isolated_worker(self, name: str, flox_ref: str) -> WorkerInfo:
        """An extra worker pinned to ``flox_ref`` (outside the cohort), for failure-isolation checks."""
        return self.substrate.start_isolated_worker(name, flox_ref)

    def isolated(self) -> set[str]:
        """Throwaway workers started by :meth:`start_isolated_worker`: listed, but not part of the cohort."""
        return set(self.substrate.read_state().get("isolated", {}))

    def phase(self, name: str) -> str:
        """Where worker ``name``'s boot stands, as its node init reports it (``running``, ``failed: <why>``...)."""
        return self.substrate.node(name).phase()

    def stop_isolated_worker(self, name: str) -> None:
        self.substrate.stop_isolated_worker(name)
