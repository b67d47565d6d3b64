"""What the doctor asks Kubernetes, read-only, and how it shows it (:func:`ask_kubernetes` reads; the rest is pure).

Contract of :func:`describe`: given the API's own objects (the NodeSet, its pods, the RuntimeClass ``flox``, the
nodes) and the Slurm node names ``sinfo`` lists, one line per fact, and the problems that block a run (a missing
NodeSet). Counts come from the NodeSet's ``status`` as the operator writes it (NodeSet CRD v1.2.1
``config/crd/bases/slinky.slurm.net_nodesets.yaml``: ``status.desired``, ``status.readyReplicas``; ``spec.replicas``
is ignored in DaemonSet mode); a pod's Slurm node name is the operator's ``pod-hostname`` label (nodeset.py);
placement is the target's declared pool label and taint against the nodes, cordoned nodes (``spec.unschedulable``)
shown. :data:`ACCESS` lists what the run's groups need of the API, each asked with a ``SelfSubjectAccessReview``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..cluster.nodeset import worker_name
from ..judges.kubechecks import REFERENCE_PLACEMENT, Placement
from ..model.labels import ANNOTATION_ENVIRONMENT


@dataclass(frozen=True)
class Access:
    """One permission a group needs: ``verb`` on ``resource`` (``group``, ``subresource``) and who needs it."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    needed_by: str = ""

    @property
    def spelled(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.verb} {self.resource}{sub}" + (f".{self.group}" if self.group else "")


#: What the run may need of the API (T1's exec into slurmd, the lifecycle groups' scaling and node repair).
ACCESS = (
    Access("create", "pods", subresource="exec", needed_by="T1 (slurmd's FLOX_ENV), T1's node debug pod"),
    Access("create", "pods", needed_by="T1's node debug pod (kubernetes.node_debug_image)"),
    Access("update", "nodesets", "slinky.slurm.net", "scale", needed_by="lifecycle groups T11R/T11U/T11C/T11F"),
    Access("list", "nodes", needed_by="T10 placement"),
    Access("get", "nodes", needed_by="lifecycle groups"),
    Access("patch", "nodes", needed_by="lifecycle groups (cordon, repair)"),
)


@dataclass
class KubeFacts:
    """The lines to print and what blocks a run."""

    lines: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)


def nodeset_line(nodeset: Mapping[str, Any]) -> str:
    spec, status = nodeset.get("spec") or {}, nodeset.get("status") or {}
    mode = spec.get("scalingMode") or "StatefulSet"
    return (
        f"NodeSet {nodeset['metadata']['name']}: {mode}, desired {status.get('desired', '?')}, "
        f"ready {status.get('readyReplicas', 0)} (spec.replicas {spec.get('replicas', '-')}"
        f"{', ignored in DaemonSet mode' if mode == 'DaemonSet' else ''})"
    )


def pod_lines(pods: Iterable[Mapping[str, Any]], slurm_nodes: Iterable[str]) -> list[str]:
    """Each worker pod with its node, phase, Slurm node name and pinned environment, matched to ``sinfo``; Slurm
    nodes no pod backs are named too."""
    listed, out, seen = set(slurm_nodes), [], set()
    for pod in pods:
        name = worker_name(dict(pod))
        seen.add(name)
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        env = (meta.get("annotations") or {}).get(ANNOTATION_ENVIRONMENT, "(no flox.dev/environment)")
        where = "in sinfo" if name in listed else "NOT in sinfo"
        out.append(
            f"pod {meta.get('name')}: node {spec.get('nodeName') or '-'}, {(pod.get('status') or {}).get('phase')}, "
            f"Slurm node {name} ({where}), {env}"
        )
    out += [f"Slurm node {n}: no pod of the NodeSet backs it" for n in sorted(listed - seen)]
    return out


def runtime_class_line(rc: Mapping[str, Any] | None) -> str:
    if rc is None:
        return "RuntimeClass flox: absent"
    selector = ((rc.get("scheduling") or {}).get("nodeSelector")) or {}
    shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "(none)"
    return f"RuntimeClass flox: handler {rc.get('handler')}, nodeSelector {shown}"


def node_lines(nodes: Iterable[Mapping[str, Any]], placement: Placement | None) -> list[str]:
    """Each node: the declared pool's label and taint (when declared) and whether it is cordoned."""
    out = []
    for node in nodes:
        name = node["metadata"]["name"]
        marks = []
        if placement is not None:
            marks.append(("labelled" if placement.labelled(node) else "NOT labelled") + f" {placement.label}")
            marks.append(("tainted" if placement.tainted(node) else "NOT tainted") + f" {placement.taint}")
        if (node.get("spec") or {}).get("unschedulable"):
            marks.append("cordoned")
        out.append(f"node {name}: " + (", ".join(marks) or "schedulable"))
    return out


def describe(
    nodeset_name: str,
    namespace: str,
    nodeset: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    slurm_nodes: Iterable[str],
    runtime_class: Mapping[str, Any] | None,
    nodes: Iterable[Mapping[str, Any]],
    placement: Placement | None,
) -> KubeFacts:
    """The doctor's Kubernetes lines; a missing NodeSet is the one blocking problem (named)."""
    facts = KubeFacts()
    if nodeset is None:
        facts.blocking.append(f"NodeSet {nodeset_name} does not exist in namespace {namespace}")
        facts.lines.append(f"NodeSet {nodeset_name}: MISSING in namespace {namespace}")
    else:
        facts.lines.append(nodeset_line(nodeset))
        facts.lines += pod_lines(pods, slurm_nodes)
    facts.lines.append(runtime_class_line(runtime_class))
    facts.lines += node_lines(nodes, placement)
    return facts


def access_lines(kube: Any) -> list[str]:
    """Each of :data:`ACCESS` asked with a ``SelfSubjectAccessReview`` (kube.py ``may``): allowed, denied, or
    not answered."""
    out = []
    for access in ACCESS:
        allowed = kube.may(access.verb, access.resource, access.group, access.subresource)
        word = {True: "allowed", False: "DENIED", None: "not answered"}[allowed]
        out.append(f"may {access.spelled}: {word} (needed by {access.needed_by})")
    return out


def ask_kubernetes(target: Any, slurm_nodes: Iterable[str]) -> KubeFacts:
    """Read what :func:`describe` shows from a connected target's API (nothing is changed; the access reviews
    create no object), with the run's access; a read the API refuses is one line naming what was not read."""
    from ..cluster.nodeset import owned_by  # every pod the NodeSet owns, Running or not: the doctor shows them all

    kube, spec = target.kube, target.spec.kubernetes
    facts = KubeFacts()
    try:
        facts.lines.append(f"server {kube.server_version()}")
        nodeset = kube.nodeset(spec.nodeset)
        pods = [p for p in kube.pods() if owned_by(p, "NodeSet", spec.nodeset)]
        placement = _placement(spec)
        found = describe(
            spec.nodeset,
            spec.namespace,
            nodeset,
            pods,
            slurm_nodes,
            kube.runtime_class("flox"),
            kube.nodes(),
            placement,
        )
    except Exception as exc:  # forbidden or unreachable: named by its HTTP status, never the client's text
        status = getattr(exc, "status", None)
        facts.lines.append(f"the Kubernetes API refused a read (HTTP {status or '-'}): the facts below are partial")
        return facts
    facts.lines += found.lines + access_lines(kube)
    facts.blocking += found.blocking
    return facts


def _placement(spec: Any) -> Placement | None:
    """The declared pool; None when the target declares none (a substrate's target: the reference's own)."""
    if spec.worker_label and spec.worker_taint:
        try:
            return Placement.parse(spec.worker_label, spec.worker_taint)
        except ValueError:
            return None
    return REFERENCE_PLACEMENT
