"""Wait until the slurm release's workloads run: the controller, the login endpoint and the compute NodeSet.

``helm upgrade --install`` returns once the objects are stored; the operator then builds the workloads and their
images are pulled. Reconciling or probing the login before that fails for no reason of its own, so the
provisioner waits here and, on timeout, names each workload that is not ready and why.

Names are the operator's for our release (slurm-operator v1.2.1): the Controller CR ``slurm`` becomes the
StatefulSet ``slurm-controller`` (``api/v1beta1/controller_keys.go`` ``Key()``, built in
``internal/builder/controllerbuilder/controller_app.go``); the LoginSet becomes a Deployment of the same name
(``internal/builder/loginbuilder/login_app.go`` ``BuildLogin``); the NodeSet owns its pods directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...base.waits import WaitTimedOut, poll_missing
from ...cluster.nodeset import NodeSetMissing, NodeSetView
from .. import SubstrateUnavailable

if TYPE_CHECKING:
    from ...cluster.kube import KubeClient

CONTROLLER_STATEFULSET = "slurm-controller"


@dataclass(frozen=True)
class Release:
    """The workloads of one slurm release that must run before anything talks to Slurm."""

    controller: str
    login: str | None
    nodeset: str


def _replicas(kind: str, name: str, obj: dict | None) -> str | None:
    if obj is None:
        return f"{kind} {name}: not created yet"
    want = int((obj.get("spec") or {}).get("replicas", 1))
    status = obj.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    if ready < want or updated < want:
        return f"{kind} {name}: {ready}/{want} ready, {updated}/{want} updated"
    return None


def not_ready(kube: KubeClient, release: Release) -> list[str]:
    """What is not ready yet, one entry per workload (empty: everything runs)."""
    missing = [_replicas("StatefulSet", release.controller, kube.statefulset(release.controller))]
    if release.login:
        missing.append(_replicas("Deployment", release.login, kube.deployment(release.login)))
    view = NodeSetView(kube, release.nodeset)
    try:
        want = view.desired_count()
        workers = view.workers()
        ready = [w.name for w in workers if w.ready]
        if len(ready) < want or len(workers) != want:
            waiting = sorted(w.name for w in workers if not w.ready)
            missing.append(
                f"NodeSet {release.nodeset}: {len(ready)}/{want} pods ready"
                + (f" (not ready: {', '.join(waiting)})" if waiting else "")
            )
    except NodeSetMissing as exc:
        missing.append(str(exc))
    return [m for m in missing if m]


def wait_ready(
    kube: KubeClient,
    release: Release,
    timeout: float,
    *,
    poll: float = 5.0,
    say: Callable[[str], None] = print,
) -> float:
    """Block until :func:`not_ready` is empty (through :func:`~pytest_slurmflox.base.waits.poll_missing`); returns the
    seconds waited. Raises SubstrateUnavailable naming what is still not ready when ``timeout`` passes."""
    t0 = time.monotonic()
    last: list[str] = []

    def check() -> str | None:
        missing = not_ready(kube, release)
        if missing and missing != last:
            say("waiting for the slurm release: " + "; ".join(missing))
            last[:] = missing
        return "; ".join(missing) or None

    try:
        poll_missing(check, what="the slurm release", timeout=timeout, interval=poll)
    except WaitTimedOut as exc:
        raise SubstrateUnavailable(f"the slurm release is not ready after {timeout:.0f}s: {exc.last}") from None
    return time.monotonic() - t0
