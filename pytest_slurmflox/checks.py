"""Pure checks over Kubernetes objects (plain dicts in Kubernetes JSON shape).

The Kubernetes-side suites call these with live objects from the API; the project's tests call them with objects
rendered from the real Slinky chart, so the same code is proven to pass a correct rendering and to fail one that
lacks the RuntimeClass, the toleration or an annotation. Each function returns the list of problems (empty: met).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .labels import (
    ANNOTATION_ACTIVATE_MODE,
    ANNOTATION_ENVIRONMENT,
    ANNOTATION_REVISION,
    ANNOTATION_SKIP_CONTAINERS,
    LABEL_CONTROL_PLANE,
    LABEL_NATIVE_WORKER,
)

PROTECTED = ("slurmd", "flox-task-profile-init")


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

    RuntimeClass ``flox``; annotations for the pinned environment, activation mode and runtime revision; skip list
    without the protected containers; the immutable image on slurmd and the profile initializer.
    """
    problems: list[str] = []
    meta = pod_or_template.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = _pod_spec(pod_or_template)
    if spec.get("runtimeClassName") != "flox":
        problems.append(f"runtimeClassName is {spec.get('runtimeClassName')!r}, not 'flox'")
    for key, want in ((ANNOTATION_ENVIRONMENT, environment), (ANNOTATION_ACTIVATE_MODE, activate_mode)):
        if annotations.get(key) != want:
            problems.append(f"annotation {key} is {annotations.get(key)!r}, not {want!r}")
    if annotations.get(ANNOTATION_REVISION) != revision:
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
    init = inits.get("flox-task-profile-init") or containers.get("flox-task-profile-init")
    if init is None:
        problems.append("no flox-task-profile-init init container")
    return problems


def placement_problems(pod_or_template: Mapping[str, Any]) -> list[str]:
    """The worker selects the reserved pool and tolerates its taint."""
    spec = _pod_spec(pod_or_template)
    problems = []
    if (spec.get("nodeSelector") or {}).get(LABEL_NATIVE_WORKER) != "true":
        problems.append(f"nodeSelector does not require {LABEL_NATIVE_WORKER}=true")
    tolerations = spec.get("tolerations") or []
    if not any(
        t.get("key") == LABEL_NATIVE_WORKER
        and t.get("effect") == "NoSchedule"
        and (t.get("operator") == "Exists" or t.get("value") == "true")
        for t in tolerations
    ):
        problems.append(f"no toleration for {LABEL_NATIVE_WORKER}=true:NoSchedule")
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


def node_pool_problems(nodes: Iterable[Mapping[str, Any]], worker_hosts: Iterable[str]) -> list[str]:
    """Workers only on labelled, tainted nodes; the control-plane/infrastructure nodes carry neither."""
    problems = []
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for host in sorted(set(worker_hosts)):
        node = by_name.get(host)
        if node is None:
            problems.append(f"worker runs on unknown node {host}")
            continue
        if (node["metadata"].get("labels") or {}).get(LABEL_NATIVE_WORKER) != "true":
            problems.append(f"worker node {host} lacks label {LABEL_NATIVE_WORKER}=true")
        if not _tainted(node):
            problems.append(f"worker node {host} lacks taint {LABEL_NATIVE_WORKER}=true:NoSchedule")
    for name, node in by_name.items():
        labels = node["metadata"].get("labels") or {}
        if LABEL_CONTROL_PLANE in labels and (labels.get(LABEL_NATIVE_WORKER) == "true" or _tainted(node)):
            problems.append(f"control-plane node {name} carries the native-worker label or taint")
    return problems


def _tainted(node: Mapping[str, Any]) -> bool:
    return any(
        t.get("key") == LABEL_NATIVE_WORKER and t.get("value") == "true" and t.get("effect") == "NoSchedule"
        for t in (node.get("spec") or {}).get("taints") or []
    )
