"""The read-only view of a Slinky NodeSet: the worker cohort of any Slinky deployment, ours or a customer's.

A customer target gets exactly this (it lists and verifies workers, never changes them), so a run against a
customer cluster imports no substrate code. The qemu substrate's :class:`~.substrates.qemu.pool.NodeSetPool`
builds on it and adds what changing the cohort needs (helm on node1).

Shapes read here are the Slinky operator's at v1.2.1 (github.com/SlinkyProject/slurm-operator, tag v1.2.1):
the NodeSet CRD ``slinky.slurm.net/v1beta1`` (``config/crd/bases/slinky.slurm.net_nodesets.yaml``: ``spec.replicas``,
``spec.template.metadata.annotations``), and the pods it owns (``metadata.ownerReferences`` kind ``NodeSet``,
``spec.hostname`` = the Slurm node name, container ``slurmd``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base.run import quoted
from ..model.labels import ANNOTATION_ENVIRONMENT, ANNOTATION_REVISION
from ..model.pool import WorkerInfo, WorkerView

if TYPE_CHECKING:
    from .kube import KubeClient

SLURMD_CONTAINER = "slurmd"
#: The Slurm node name of a NodeSet pod, as the NodeSet controller labels every pod it creates (slurm-operator
#: v1.2.1 ``api/v1beta1/well_known.go`` ``LabelNodeSetPodHostname``, set in
#: ``internal/controller/nodeset/utils/utils.go`` from ``GetSlurmNodeName``). No ``slinky.slurm.net/node-name`` exists.
LABEL_POD_HOSTNAME = "nodeset.slinky.slurm.net/pod-hostname"
#: Where the worker's profile initializer records the revision it realized (see suites/_profile.PROFILE_DIR).
PROFILE_REVISION_FILE = "/run/flox-task-profile/current/revision"


#: NodeSet ``spec.scalingMode`` (CRD default ``StatefulSet``).
DAEMONSET, STATEFULSET = "DaemonSet", "StatefulSet"


def scaling_mode(nodeset: dict[str, Any]) -> str:
    """The NodeSet's scaling mode, the CRD's default when the field is absent."""
    return str((nodeset.get("spec") or {}).get("scalingMode") or STATEFULSET)


class NodeSetMissing(LookupError):
    """The named NodeSet does not exist in the namespace (a wrong target file, or nothing deployed yet)."""


def nodeset_revision(nodeset: dict[str, Any] | None) -> str | None:
    """The revision on a NodeSet's pod template (falling back to the NodeSet's own annotations)."""
    if not nodeset:
        return None
    spec = nodeset.get("spec", {})
    for meta in (spec.get("template", {}).get("metadata", {}), nodeset.get("metadata", {})):
        value = (meta.get("annotations") or {}).get(ANNOTATION_REVISION)
        if value:
            return value
    return None


def worker_name(pod: dict[str, Any]) -> str:
    """The Slurm node name of a NodeSet pod: the operator's pod-hostname label, else its hostname, else the pod
    name."""
    meta = pod.get("metadata", {})
    labelled = (meta.get("labels") or {}).get(LABEL_POD_HOSTNAME)
    return labelled or pod.get("spec", {}).get("hostname") or meta.get("name", "")


def worker_from_pod(pod: dict[str, Any]) -> WorkerInfo:
    """A NodeSet pod as a WorkerInfo: Ready condition, annotations, slurmd image, RuntimeClass, node."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    annotations = meta.get("annotations") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    image = next((c.get("image") for c in spec.get("containers", []) if c.get("name") == SLURMD_CONTAINER), None)
    return WorkerInfo(
        name=worker_name(pod),
        ready=ready,
        revision=annotations.get(ANNOTATION_REVISION),
        environment=annotations.get(ANNOTATION_ENVIRONMENT),
        image=image,
        runtime_class=spec.get("runtimeClassName"),
        host=spec.get("nodeName"),
    )


def owned_by(pod: dict[str, Any], kind: str, name: str) -> bool:
    return any(
        o.get("kind") == kind and o.get("name") == name for o in pod.get("metadata", {}).get("ownerReferences") or []
    )


class NodeSetView(WorkerView):
    """The workers of one NodeSet, read through the Kubernetes API (``kube`` is scoped to its namespace).

    ``default_replicas`` answers :meth:`desired_count` when the NodeSet omits ``spec.replicas``; without it such
    a NodeSet is an error rather than a guess.
    """

    def __init__(self, kube: KubeClient, nodeset: str, *, default_replicas: int | None = None) -> None:
        self.kube, self.nodeset_name, self.default_replicas = kube, nodeset, default_replicas

    def _nodeset(self) -> dict[str, Any]:
        doc = self.kube.nodeset(self.nodeset_name)
        if not doc:
            raise NodeSetMissing(f"NodeSet {self.nodeset_name} not found in namespace {self.kube.namespace}")
        return doc

    def _pods(self) -> list[dict[str, Any]]:
        return [p for p in self.kube.pods() if owned_by(p, "NodeSet", self.nodeset_name)]

    def desired_count(self) -> int:
        """How many workers the NodeSet wants: ``spec.replicas`` in StatefulSet mode (the default), the operator's
        ``status.desired`` in DaemonSet mode, where ``spec.replicas`` is ignored (NodeSet CRD v1.2.1,
        ``config/crd/bases/slinky.slurm.net_nodesets.yaml``: ``scalingMode``, ``replicas`` "When ScalingMode is
        daemonset, this field is ignored", ``status.desired`` "The number of nodes match the node selector and
        tolerations (DaemonSet mode) or replicas (StatefulSet mode)")."""
        doc = self._nodeset()
        if scaling_mode(doc) == DAEMONSET:
            desired = (doc.get("status") or {}).get("desired")
            if desired is None:
                raise NodeSetMissing(
                    f"NodeSet {self.nodeset_name} scales as a DaemonSet and the operator has not written status.desired"
                )
            return int(desired)
        replicas = doc.get("spec", {}).get("replicas")
        if replicas is not None:
            return int(replicas)
        if self.default_replicas is None:
            raise NodeSetMissing(f"NodeSet {self.nodeset_name} has no spec.replicas")
        return self.default_replicas

    def desired_revision(self) -> str | None:
        return nodeset_revision(self.kube.nodeset(self.nodeset_name))

    def workers(self) -> list[WorkerInfo]:
        return [worker_from_pod(p) for p in self._pods()]

    def pod_of(self, name: str) -> str:
        """The pod name behind worker ``name``; LookupError if the NodeSet has no such worker."""
        for pod in self._pods():
            if worker_name(pod) == name:
                return pod["metadata"]["name"]
        raise LookupError(f"NodeSet {self.nodeset_name} has no worker {name}")

    def profile_revision(self, name: str) -> str | None:
        """Read the task profile's revision in the worker's slurmd container (pod exec; Slurm is not asked)."""
        res = self.kube.exec(self.pod_of(name), SLURMD_CONTAINER, quoted("cat %s", PROFILE_REVISION_FILE))
        text = res.stdout.strip()
        return text if res.ok and text else None


__all__ = [
    "ANNOTATION_ENVIRONMENT",
    "ANNOTATION_REVISION",
    "LABEL_POD_HOSTNAME",
    "NodeSetMissing",
    "NodeSetView",
    "nodeset_revision",
    "owned_by",
    "scaling_mode",
    "worker_from_pod",
]
