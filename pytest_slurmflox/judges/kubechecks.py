"""Pure checks over Kubernetes objects (plain dicts in Kubernetes JSON shape).

The Kubernetes-side suites call these with live objects from the API; the project's tests call them with objects
rendered from the real Slinky chart, so the same code is proven to pass a correct rendering and to fail one that
lacks the RuntimeClass, the toleration or an annotation. Each function returns the list of problems (empty: met).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model.labels import (
    ANNOTATION_ACTIVATE_MODE,
    ANNOTATION_ENVIRONMENT,
    ANNOTATION_REVISION,
    ANNOTATION_SKIP_CONTAINERS,
    LABEL_CONTROL_PLANE,
    LABEL_NATIVE_WORKER,
)

PROTECTED = ("slurmd", "flox-task-profile-init")
#: The mode Flox activates a pod's environment in when no ``flox.dev/activate-mode`` annotation says otherwise
#: (flox.dev docs, imageless-kubernetes/config "Activation mode": pods start in run mode by default).
FLOX_DEFAULT_ACTIVATE_MODE = "run"
PROFILE_INIT = "flox-task-profile-init"

#: Where the reference stack writes what the reference design adds to what Slinky writes (docs/reference-stack.md
#: row 23: the slurm chart values rendered by substrates/qemu/render/values.py). A plain upstream NodeSet (slurm
#: chart values without them) has none of these: its worker pods lack them, which is named once as missing.
ADDITION_SOURCE = {
    ANNOTATION_REVISION: "nodesets.<name>.metadata.annotations of the slurm chart values",
    PROFILE_INIT: "nodesets.<name>.podSpec.initContainers of the slurm chart values",
}


def missing_addition(what: str, key: str) -> str:
    """``what`` is absent, a part the reference design adds, with where it comes from (:data:`ADDITION_SOURCE`)."""
    return (
        f"{what} is missing: the reference design adds it ({ADDITION_SOURCE[key]}, docs/reference-stack.md); "
        "plain upstream Slinky does not write it"
    )


def _pod_template(nodeset: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = nodeset.get("spec") or {}
    return spec.get("template") or {}


def _pod_spec(pod_or_template: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod_or_template.get("spec") or {}
    # NodeSet pod templates nest the PodSpec under spec.template.spec; pods have it at spec.
    return spec


def worker_template_problems(
    pod_or_template: Mapping[str, Any], *, environment: str, revision: str, image: str, activate_mode: str = "run"
) -> list[str]:
    """A worker pod (or NodeSet pod template) carries the worker runtime contract.

    RuntimeClass ``flox``; annotations for the pinned environment, activation mode (absent: Flox's default,
    :data:`FLOX_DEFAULT_ACTIVATE_MODE`) and runtime revision; skip list
    without the protected containers; the immutable image on slurmd and the profile initializer.
    """
    problems: list[str] = []
    meta = pod_or_template.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = _pod_spec(pod_or_template)
    if spec.get("runtimeClassName") != "flox":
        problems.append(f"runtimeClassName is {spec.get('runtimeClassName')!r}, not 'flox'")
    if annotations.get(ANNOTATION_ENVIRONMENT) != environment:
        problems.append(
            f"annotation {ANNOTATION_ENVIRONMENT} is {annotations.get(ANNOTATION_ENVIRONMENT)!r}, not {environment!r}"
        )
    written = annotations.get(ANNOTATION_ACTIVATE_MODE)
    if (FLOX_DEFAULT_ACTIVATE_MODE if written is None else written) != activate_mode:  # absent: Flox's default
        problems.append(f"annotation {ANNOTATION_ACTIVATE_MODE} is {written!r}, not {activate_mode!r}")
    if ANNOTATION_REVISION not in annotations:
        problems.append(missing_addition(f"annotation {ANNOTATION_REVISION}", ANNOTATION_REVISION))
    elif annotations.get(ANNOTATION_REVISION) != revision:
        problems.append(f"annotation {ANNOTATION_REVISION} is {annotations.get(ANNOTATION_REVISION)!r}, not {revision}")
    skip_list = str(annotations.get(ANNOTATION_SKIP_CONTAINERS, ""))
    skipped = [name.strip() for name in skip_list.split(",") if name.strip()]
    for name in PROTECTED:
        if name in skipped:
            problems.append(f"{name} is in {ANNOTATION_SKIP_CONTAINERS}: it would skip Flox preparation")
    containers = {c.get("name"): c for c in spec.get("containers") or []}
    inits = {c.get("name"): c for c in spec.get("initContainers") or []}
    slurmd = containers.get("slurmd")
    if slurmd is None:
        problems.append("no slurmd container")
    elif slurmd.get("image") != image:
        problems.append(f"slurmd image is {slurmd.get('image')!r}, not {image!r}")
    init = inits.get(PROFILE_INIT) or containers.get(PROFILE_INIT)
    if init is None:
        problems.append(missing_addition(f"init container {PROFILE_INIT}", PROFILE_INIT))
    return problems


def pod_label(pod: Mapping[str, Any]) -> str:
    """``pod NAME on node NODE`` (``unscheduled`` without a node): how a problem of one worker pod names it."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return f"pod {meta.get('name')} on node {spec.get('nodeName') or '(unscheduled)'}"


def cohort_problems(pods: Iterable[Mapping[str, Any]], judge: Callable[[Mapping[str, Any]], list[str]]) -> list[str]:
    """``judge`` on every pod, each problem named once: ``every worker pod (N): P`` when all share it (a part the
    deployment lacks everywhere, such as a reference addition a plain upstream NodeSet never writes), else the pods
    that have it, by name and node."""
    pods = list(pods)
    seen: dict[str, list[str]] = {}
    for pod in pods:
        for problem in judge(pod):
            seen.setdefault(problem, []).append(pod_label(pod))
    return [
        f"every worker pod ({len(pods)}): {problem}"
        if len(where) == len(pods) > 1
        else f"{', '.join(where)}: {problem}"
        for problem, where in seen.items()
    ]


@dataclass(frozen=True)
class Placement:
    """The worker pool's node label (``key=value``) and taint (``key=value:Effect``, kubectl's spelling): the
    reference's own (``slinky.local/native-worker``) by default; a customer's target file declares its pool's
    (``kubernetes.worker_label``, ``kubernetes.worker_taint``)."""

    label_key: str = LABEL_NATIVE_WORKER
    label_value: str = "true"
    taint_key: str = LABEL_NATIVE_WORKER
    taint_value: str = "true"
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, label: str, taint: str) -> Placement:
        """From ``key=value`` and ``key[=value]:Effect``; ValueError naming what is malformed."""
        label_key, eq, label_value = label.partition("=")
        body, colon, effect = taint.rpartition(":")
        taint_key, _, taint_value = body.partition("=")
        if not (label_key and eq) or not (taint_key and colon and effect):
            raise ValueError(
                f"worker_label must be key=value and worker_taint key[=value]:Effect, not {label!r}, {taint!r}"
            )
        return cls(label_key, label_value, taint_key, taint_value, effect)

    @property
    def label(self) -> str:
        return f"{self.label_key}={self.label_value}"

    @property
    def taint(self) -> str:
        value = f"={self.taint_value}" if self.taint_value else ""
        return f"{self.taint_key}{value}:{self.effect}"

    def tolerates(self, t: Mapping[str, Any]) -> bool:
        exists = t.get("operator") == "Exists"
        return (
            t.get("key") == self.taint_key
            and t.get("effect") in (self.effect, None, "")
            and (exists or (t.get("value") or "") == self.taint_value)
        )

    def labelled(self, node: Mapping[str, Any]) -> bool:
        return (node["metadata"].get("labels") or {}).get(self.label_key) == self.label_value

    def tainted(self, node: Mapping[str, Any]) -> bool:
        return any(
            t.get("key") == self.taint_key
            and (t.get("value") or "") == self.taint_value
            and t.get("effect") == self.effect
            for t in (node.get("spec") or {}).get("taints") or []
        )


REFERENCE_PLACEMENT = Placement()


def _affinity_requires(spec: Mapping[str, Any], placement: Placement) -> bool:
    """The pod's required node affinity admits only nodes with the pool's label (every term asks for it)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return bool(terms) and all(
        any(
            e.get("key") == placement.label_key
            and e.get("operator") == "In"
            and e.get("values") == [placement.label_value]
            for e in t.get("matchExpressions") or []
        )
        for t in terms
    )


def placement_problems(pod_or_template: Mapping[str, Any], placement: Placement = REFERENCE_PLACEMENT) -> list[str]:
    """The worker selects the reserved pool and tolerates its taint.

    Judge the pod as the API holds it, not the NodeSet's template: slurm-operator v1.2.1 adds the toleration of
    ``nodeset.slinky.slurm.net/worker:NoExecute`` to every pod it builds (``internal/builder/workerbuilder/
    worker_app.go`` ``BuildWorkerPodTemplate``, ``pkg/taints/taints.go`` ``TolerationWorkerNode``) and the
    RuntimeClass admission plugin merges the RuntimeClass's ``scheduling.nodeSelector`` into the pod's
    (kubernetes ``plugin/pkg/admission/runtimeclass/admission.go`` ``setScheduling``): neither is in the
    template. A node selector or a required node affinity that asks for the label both count."""
    spec = _pod_spec(pod_or_template)
    problems = []
    selected = (spec.get("nodeSelector") or {}).get(placement.label_key) == placement.label_value
    if not (selected or _affinity_requires(spec, placement)):
        problems.append(f"nodeSelector does not require {placement.label}")
    if not any(placement.tolerates(t) for t in spec.get("tolerations") or []):
        problems.append(f"no toleration for {placement.taint}")
    return problems


def nodeset_pod(nodeset: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a NodeSet asks for: its template, with the slurmd container that the CRD keeps in ``spec.slurmd``
    (the operator adds it to the pod) placed where a live pod has it."""
    template = dict(_pod_template(nodeset))
    spec = dict(template.get("spec") or {})
    containers = list(spec.get("containers") or [])
    slurmd = (nodeset.get("spec") or {}).get("slurmd")
    if slurmd and not any(c.get("name") == "slurmd" for c in containers):
        containers.append({"name": "slurmd", **slurmd})
    spec["containers"] = containers
    template["spec"] = spec
    return template


def nodeset_problems(nodeset: Mapping[str, Any], **expected: Any) -> list[str]:
    pod = nodeset_pod(nodeset)
    return worker_template_problems(pod, **expected) + placement_problems(pod)


def node_pool_problems(
    nodes: Iterable[Mapping[str, Any]], worker_hosts: Iterable[str], placement: Placement = REFERENCE_PLACEMENT
) -> list[str]:
    """Workers only on labelled, tainted nodes; the control-plane/infrastructure nodes carry neither."""
    problems = []
    by_name = {n["metadata"]["name"]: n for n in nodes}
    hosts = sorted(set(worker_hosts))
    lacking: dict[str, list[str]] = {}
    for host in hosts:
        node = by_name.get(host)
        if node is None:
            problems.append(f"worker runs on unknown node {host}")
            continue
        if not placement.labelled(node):
            lacking.setdefault(f"label {placement.label}", []).append(host)
        if not placement.tainted(node):
            lacking.setdefault(f"taint {placement.taint}", []).append(host)
    for what, where in lacking.items():  # one line each: a pool never tainted is one missing taint, not N
        many = len(where) == len(hosts) > 1
        problems.append(
            f"every worker node ({len(where)}) lacks {what}" if many else f"worker node {', '.join(where)} lacks {what}"
        )
    for name, node in by_name.items():
        labels = node["metadata"].get("labels") or {}
        if LABEL_CONTROL_PLANE in labels and (placement.labelled(node) or placement.tainted(node)):
            problems.append(f"control-plane node {name} carries the worker pool's label or taint")
    return problems
