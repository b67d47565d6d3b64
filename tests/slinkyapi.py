"""Slinky v1.2.1's objects on a real kube-apiserver, as the operator and admission write them: shared by the kubeapi
unit tests (``unit/test_kubeapi_slinky.py``) and the local cluster behind a real API
(``integration/test_kubernetes_target_local.py``).

The six CRDs are upstream's of tag v1.2.1 (``config/crd/bases`` of the shared reference copy), applied unchanged
when the server lacks them. The NodeSet is rendered by the real ``slurm`` chart; its pods are built as the operator
builds them (slurm-operator v1.2.1 ``internal/builder/workerbuilder/worker_app.go`` ``BuildWorkerPodTemplate``: the
template's metadata and pod spec, the slurmd container from ``spec.slurmd``, the toleration of
``nodeset.slinky.slurm.net/worker:NoExecute`` (``pkg/taints/taints.go``);
``internal/controller/nodeset/utils/utils.go``: the ordinal name, hostname and ``pod-hostname`` label), created
through the API so RuntimeClass admission adds the node selector, bound to a node as the scheduler binds
(``pods/binding``) and marked Running as a kubelet reports it (``pods/status``). Nothing of what the checks expect
is written into these objects by hand.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from pytest_slurmflox.base.waits import poll

KUBECONFIG_ENV = "SLURMFLOX_TEST_KUBECONFIG"
#: The reason every test that needs the API server skips with without it (tests/skipguard.py lists it).
NO_API = f"no Kubernetes API server: set {KUBECONFIG_ENV}"
POOL_LABEL, POOL_TAINT = "flox.dev/enabled=true", "nodeset.slinky.slurm.net/worker:NoExecute"
#: The reference's own pool (kubeadm JoinConfiguration, docs/reference-stack.md row 12).
REFERENCE_POOL = ("slinky.local/native-worker=true", "slinky.local/native-worker=true:NoSchedule")
WORKER_TOLERATION = {"key": "nodeset.slinky.slurm.net/worker", "operator": "Equal", "effect": "NoExecute"}
#: The nodes carry both pools: the reference's own and the Flox pool with Slinky's worker taint a customer declares.
NODE_LABELS = {"flox.dev/enabled": "true", "slinky.local/native-worker": "true"}
NODE_TAINTS = [
    {"key": "nodeset.slinky.slurm.net/worker", "effect": "NoExecute"},
    {"key": "slinky.local/native-worker", "value": "true", "effect": "NoSchedule"},
]
GROUP, VERSION = "slinky.slurm.net", "v1beta1"


def crds() -> Path:
    from pytest_slurmflox.substrates.qemu.render import chart as rc

    return rc.default_charts_root() / "v1.2.1" / "config" / "crd" / "bases"


def established(ext, name: str) -> bool | None:
    """True once the API server serves the CRD (condition Established), None before."""
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return True if any(c.type == "Established" and c.status == "True" for c in conditions) else None


@contextlib.contextmanager
def slinky_api(conf: str) -> Iterator[Any]:
    """A client of ``conf``, the CRDs and RuntimeClass ``flox`` present; what this created of them (cluster-scoped)
    is deleted again at the end."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=conf)
    ext, node_api = client.ApiextensionsV1Api(api_client), client.NodeV1Api(api_client)
    made: list[str] = []
    try:
        for path in sorted(crds().glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            name = doc["metadata"]["name"]
            if not ext.list_custom_resource_definition(field_selector=f"metadata.name={name}").items:
                ext.create_custom_resource_definition(doc)
                made.append(name)
            poll(lambda name=name: established(ext, name), what=f"CRD {name} established", timeout=60)
        if not node_api.list_runtime_class(field_selector="metadata.name=flox").items:
            # floxdocs docs/k8s/install/self-managed.md "Kubernetes configuration"
            selector = {"nodeSelector": {"flox.dev/enabled": "true"}}
            node_api.create_runtime_class({"metadata": {"name": "flox"}, "handler": "flox", "scheduling": selector})
            made.append("runtimeclass/flox")
        yield api_client
    finally:
        for name in made:
            if name == "runtimeclass/flox":
                node_api.delete_runtime_class("flox")
            else:
                ext.delete_custom_resource_definition(name)


@contextlib.contextmanager
def namespace_and_nodes(api_client, prefix: str, count: int = 2) -> Iterator[tuple[str, list[str]]]:
    """A namespace and ``count`` worker nodes of the caller's own (labelled and tainted as both pools), removed
    afterwards."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    tag = secrets.token_hex(3)
    ns, nodes = f"{prefix}-{tag}", [f"{prefix}-{tag}-n{i}" for i in range(count)]
    core.create_namespace({"metadata": {"name": ns}})
    try:
        for name in nodes:
            labels = {**NODE_LABELS, "kubernetes.io/hostname": name}
            core.create_node({"metadata": {"name": name, "labels": labels}, "spec": {"taints": NODE_TAINTS}})
        yield ns, nodes
    finally:
        remove_namespace(api_client, ns)
        for name in nodes:
            if core.list_node(field_selector=f"metadata.name={name}").items:
                core.delete_node(name)


def remove_namespace(api_client, ns: str) -> None:
    """Delete what was made in ``ns``, then ``ns``: pods at once (no kubelet confirms a graceful end), the NodeSets,
    and the namespace finalized (no namespace controller may run beside this API server)."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    for pod in core.list_namespaced_pod(ns).items:
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    for nodeset in custom.list_namespaced_custom_object(GROUP, VERSION, ns, "nodesets")["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", nodeset["metadata"]["name"])
    core.delete_namespace(ns)
    if core.list_namespace(field_selector=f"metadata.name={ns}").items:
        core.replace_namespace_finalize(ns, {"metadata": {"name": ns}, "spec": {"finalizers": []}})


def chart_nodeset(values: dict[str, Any], ns: str) -> dict[str, Any]:
    """The one NodeSet the real ``slurm`` chart 1.2.1 renders from ``values``."""
    from pytest_slurmflox.substrates.qemu.render import chart as rc

    root = rc.default_charts_root()
    chart = rc.find_slurm_charts(root).get("1.2.1")
    if chart is None:
        raise AssertionError(f"no slurm chart 1.2.1 below {root}")
    (nodeset,) = [o for o in rc.render_chart(chart, values, namespace=ns) if o["kind"] == "NodeSet"]
    return nodeset


def plain_values(image: str, flox_ref: str, replicas: int = 2) -> dict[str, Any]:
    """Upstream's values with nothing of the reference design's but the Flox RuntimeClass and annotation."""
    return {
        "nodesets": {
            "compute": {
                "replicas": replicas,
                "slurmd": {"image": image},
                "metadata": {"annotations": {"flox.dev/environment": flox_ref}},
                "podSpec": {"runtimeClassName": "flox"},
            }
        },
        "partitions": {"compute": {"enabled": True, "nodesets": ["compute"]}},
    }


def operator_pod(nodeset: dict[str, Any], ordinal: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod slurm-operator v1.2.1 builds for ``ordinal`` of a StatefulSet-mode NodeSet (see the module)."""
    name, spec = nodeset["metadata"]["name"], nodeset["spec"]
    template = copy.deepcopy(spec.get("template") or {})
    meta, podspec = template.get("metadata") or {}, template.get("spec") or {}
    pod_name = f"{name}-{ordinal}"
    hostname = f"{podspec['hostname']}{ordinal}" if podspec.get("hostname") else pod_name
    labels = {**(nodeset["metadata"].get("labels") or {}), **(meta.get("labels") or {})}
    labels |= {
        "app.kubernetes.io/name": "slurmd",
        "app.kubernetes.io/instance": name,
        "nodeset.slinky.slurm.net/pod-hostname": hostname,
        "nodeset.slinky.slurm.net/scaling-mode": spec.get("scalingMode") or "StatefulSet",
    }
    annotations = {**(meta.get("annotations") or {}), "kubectl.kubernetes.io/default-container": "slurmd"}
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeSet", "name": name}
    owner |= {"uid": nodeset["metadata"]["uid"], "controller": True}
    podspec |= {
        "hostname": hostname,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [{"name": "slurmd", **(spec.get("slurmd") or {})}],
        "tolerations": [WORKER_TOLERATION, *(podspec.get("tolerations") or [])],
    }
    podspec.pop("nodeName", None)
    return {"name": pod_name, "labels": labels, "annotations": annotations, "ownerReferences": [owner]}, podspec


def deploy(
    api_client,
    ns: str,
    nodes: list[str],
    values: dict[str, Any],
    *,
    ordinals: list[int] | None = None,
    hostname: str | None = None,
    change: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The NodeSet created, one pod per node built (ordinals 0.. unless given), admitted, bound and Running;
    ``change(i, pod)`` may alter a pod before it is created (a mutation); the NodeSet's status as the operator
    writes it. ``hostname``: the NodeSet's template hostname instead of the chart's ``<key>-`` (helm/slurm v1.2.1
    templates/nodeset/nodeset-cr.yaml sets it), as a NodeSet written without the chart may declare it."""
    from kubernetes import client

    custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    rendered = chart_nodeset(values, ns)
    if hostname is not None:
        rendered["spec"]["template"]["spec"]["hostname"] = hostname
    nodeset = custom.create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", rendered)
    for i, node in enumerate(nodes):
        meta, podspec = operator_pod(nodeset, ordinals[i] if ordinals else i)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": podspec}
        if change:
            change(i, pod)
        core.create_namespaced_pod(ns, pod)
        binding = {"metadata": {"name": meta["name"]}, "target": {"kind": "Node", "name": node}}
        core.create_namespaced_binding(ns, binding, _preload_content=False)
        ready = [{"type": "Ready", "status": "True"}]
        core.patch_namespaced_pod_status(meta["name"], ns, {"status": {"phase": "Running", "conditions": ready}})
    count = len(nodes)
    status = {"desired": count, "replicas": count, "readyReplicas": count, "updatedReplicas": count}
    status = {"status": {**status, "selector": "app.kubernetes.io/name=slurmd", "nodeSetHash": "kubeapi"}}
    name = nodeset["metadata"]["name"]
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "nodesets", name, status)
    return nodeset
