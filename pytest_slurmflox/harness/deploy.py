"""``--slurmflox-up``: bring a substrate up from the settings resolved once, record the deployment, and move the
cohort to the target's expectations (fast path, recovery or the maintenance barrier).

The direction is one-way: settings -> substrate -> target spec -> Reconciler. The Reconciler is given the
expectations of the target the substrate just described, never settings resolved a second time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cluster.lifecycle import Outcome, ReconcileError, Reconciler
from ..model.evidence import EvidenceLog
from ..model.pool import WorkerPool
from ..model.settings import Resolved, SubstrateOptions
from ..model.target import TargetSpec
from ..model.workdir import Workdir, WorkerRevisionFile
from .connection import connect


class DeployError(RuntimeError):
    """``up`` could not finish; the message says at which step (the caller turns it into a usage error)."""


@dataclass(frozen=True)
class Deployed:
    substrate: str
    target_path: Path
    spec: TargetSpec


def up(
    substrate_name: str,
    resolved: Resolved,
    workdir: Workdir,
    options: SubstrateOptions,
    say: Callable[[str], None],
    evidence: EvidenceLog | None = None,
) -> Deployed:
    """Provision ``substrate_name`` with ``resolved`` settings and reconcile its cohort. Raises
    :class:`DeployError`, or :class:`~pytest_slurmflox.substrates.SubstrateUnavailable` (the caller names it)."""
    from ..substrates import make_substrate

    explicit = frozenset(resolved.explicit_worker)
    substrate = make_substrate(substrate_name, resolved.settings, workdir, say, options, explicit)
    substrate.refuse()  # a limit of the substrate's own (SettingsError): refused before anything is recorded
    WorkerRevisionFile(workdir.worker_revision_env).record(resolved.explicit_worker)
    say(f"up: substrate {substrate_name}, work dir {workdir.root}")
    # Recorded before anything starts: a failed `up` leaves what it started findable, so `--slurmflox-destroy`
    # removes every node, namespace and cgroup of a partial deployment too.
    if (workdir.read_deployment() or {}).get("substrate") != substrate_name:
        workdir.record_deployment({"substrate": substrate_name, "target": None, "up_at": time.time()})
    target_doc = substrate.up()
    target_path = Path(target_doc.get("path") or workdir.root / "target.yaml")
    workdir.record_deployment({"substrate": substrate_name, "target": str(target_path), "up_at": time.time()})
    spec = dataclasses.replace(substrate.target_spec(), path=target_path)  # the objects, not the file read back
    outcome = reconcile(spec, substrate.pool(), say, evidence)
    say(f"up: cohort at {outcome.revision} ({outcome.path})")
    return Deployed(substrate_name, target_path, spec)


def reconcile(spec: TargetSpec, pool: object, say: Callable[[str], None], evidence: EvidenceLog | None) -> Outcome:
    """Move the cohort to ``spec.expect`` with administrative access to the target's Slurm."""
    live = connect(spec, observer=evidence, pool_factory=lambda _spec, _kube: pool)  # type: ignore[arg-type,return-value]
    try:
        if "admin" not in live.capabilities:
            raise DeployError(f"cannot reconcile without administrative access: {live.why_missing('admin')}")
        if not isinstance(live.pool, WorkerPool):
            raise DeployError(
                f"cannot reconcile: nothing here can change the workers ({live.why_missing('worker-owner')})"
            )
        settings = spec.expect.settings
        timeout = live.pool.step_timeout(settings)
        return Reconciler(slurm=live.slurm, pool=live.pool, login=live.login, say=say, timeout=timeout).reconcile(
            settings
        )
    except ReconcileError as exc:
        raise DeployError(f"up failed at step {exc}") from None
    finally:
        live.close()
