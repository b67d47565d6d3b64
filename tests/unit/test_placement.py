"""T10's placement check with the worker pool a target declares (issue 26): node objects as the Kubernetes API
returns them (``kubectl get nodes -o json`` items, trimmed to the fields read), judged against the reference's pool
and a customer's own."""

from __future__ import annotations

import pytest

from pytest_slurmflox.judges.kubechecks import (
    REFERENCE_PLACEMENT,
    Placement,
    cohort_problems,
    node_pool_problems,
    placement_problems,
)
from pytest_slurmflox.model.target import parse_target, target_document

SITE = Placement.parse("pool.example.org/hpc=compute", "pool.example.org/hpc=compute:NoExecute")


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"podCIDR": "10.244.1.0/24", **({"taints": taints} if taints else {})},
    }


CONTROL = node("cp0", {"node-role.kubernetes.io/control-plane": ""})
SITE_NODES = [
    CONTROL,
    node(
        "hpc1",
        {"pool.example.org/hpc": "compute"},
        [{"key": "pool.example.org/hpc", "value": "compute", "effect": "NoExecute"}],
    ),
    node("hpc2", {"pool.example.org/hpc": "compute"}),  # labelled, not tainted
]


def test_parse_and_spell():
    assert SITE.label == "pool.example.org/hpc=compute" and SITE.taint == "pool.example.org/hpc=compute:NoExecute"
    assert Placement.parse("a/b=1", "a/b:NoSchedule").taint == "a/b:NoSchedule"
    assert Placement.parse(REFERENCE_PLACEMENT.label, REFERENCE_PLACEMENT.taint) == REFERENCE_PLACEMENT  # round trip
    for label, taint in (("nolabelvalue", "a:NoSchedule"), ("a=b", "no-effect")):
        with pytest.raises(ValueError):
            Placement.parse(label, taint)


def test_a_customer_pool_is_judged_by_its_own_label_and_taint():
    assert node_pool_problems(SITE_NODES, ["hpc1"], SITE) == []
    assert node_pool_problems(SITE_NODES, ["hpc1", "hpc2"], SITE) == [
        "worker node hpc2 lacks taint pool.example.org/hpc=compute:NoExecute"
    ]
    # the reference's label means nothing on this site: judged by it, every worker node would be a false FAIL
    assert len(node_pool_problems(SITE_NODES, ["hpc1"])) == 2
    tainted_cp = node(
        "cp0",
        CONTROL["metadata"]["labels"],
        [{"key": "pool.example.org/hpc", "value": "compute", "effect": "NoExecute"}],
    )
    assert node_pool_problems([tainted_cp, *SITE_NODES[1:]], ["hpc1"], SITE) == [
        "control-plane node cp0 carries the worker pool's label or taint"
    ]


def test_the_template_selects_and_tolerates_the_declared_pool():
    template = {
        "spec": {
            "nodeSelector": {"pool.example.org/hpc": "compute"},
            "tolerations": [{"key": "pool.example.org/hpc", "operator": "Exists"}],  # no effect: tolerates all
        }
    }
    assert placement_problems(template, SITE) == []
    assert placement_problems(template) == [
        "nodeSelector does not require slinky.local/native-worker=true",
        "no toleration for slinky.local/native-worker=true:NoSchedule",
    ]
    wrong = {
        "spec": {
            **template["spec"],
            "tolerations": [{"key": "pool.example.org/hpc", "value": "x", "effect": "NoExecute"}],
        }
    }
    assert placement_problems(wrong, SITE) == ["no toleration for pool.example.org/hpc=compute:NoExecute"]


def test_the_target_file_round_trips_the_declared_pool():
    doc = {
        "login": {"host": "h", "user": "u", "key": "/dev/null"},
        "kubernetes": {"namespace": "s", "nodeset": "n", "worker_label": SITE.label, "worker_taint": SITE.taint},
    }
    spec = parse_target(doc)
    assert {"kubernetes.worker_label", "kubernetes.worker_taint"} <= spec.declared
    again = target_document(spec)["kubernetes"]
    assert again["worker_label"] == SITE.label and again["worker_taint"] == SITE.taint


#: A worker pod as the API holds it after slurm-operator v1.2.1 built it (internal/builder/workerbuilder/
#: worker_app.go: the toleration of nodeset.slinky.slurm.net/worker:NoExecute, operator Equal, no value;
#: pkg/taints/taints.go) and RuntimeClass admission merged RuntimeClass flox's scheduling.nodeSelector into it
#: (kubernetes plugin/pkg/admission/runtimeclass/admission.go setScheduling). Its NodeSet's template has neither.
UPSTREAM = Placement.parse("flox.dev/enabled=true", "nodeset.slinky.slurm.net/worker:NoExecute")


def upstream_pod(name: str, node: str, *, tolerated: bool = True) -> dict:
    tolerations = [{"key": "nodeset.slinky.slurm.net/worker", "operator": "Equal", "effect": "NoExecute"}]
    tolerations += [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]
    return {
        "metadata": {"name": name, "ownerReferences": [{"kind": "NodeSet", "name": "slurm-worker-compute"}]},
        "spec": {
            "nodeName": node,
            "runtimeClassName": "flox",
            "nodeSelector": {"flox.dev/enabled": "true"},
            "tolerations": tolerations if tolerated else tolerations[1:],
            "containers": [{"name": "slurmd"}],
        },
    }


def test_the_pods_carry_what_upstream_adds_and_the_template_does_not():
    template = {"spec": {"runtimeClassName": "flox"}}  # the chart's podSpec: no selector, no toleration
    assert len(placement_problems(template, UPSTREAM)) == 2  # the template is not what runs
    pods = [upstream_pod("slurm-worker-compute-0", "n1"), upstream_pod("slurm-worker-compute-1", "n2")]
    assert cohort_problems(pods, lambda p: placement_problems(p, UPSTREAM)) == []
    pods[1] = upstream_pod("slurm-worker-compute-1", "n2", tolerated=False)
    assert cohort_problems(pods, lambda p: placement_problems(p, UPSTREAM)) == [
        "pod slurm-worker-compute-1 on node n2: no toleration for nodeset.slinky.slurm.net/worker:NoExecute"
    ]


def test_a_required_node_affinity_on_the_label_selects_the_pool():
    term = {"matchExpressions": [{"key": "flox.dev/enabled", "operator": "In", "values": ["true"]}]}
    pod = upstream_pod("p", "n1")
    del pod["spec"]["nodeSelector"]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    assert placement_problems(pod, UPSTREAM) == ["nodeSelector does not require flox.dev/enabled=true"]
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [term]
    }
    assert placement_problems(pod, UPSTREAM) == []


def test_a_pool_never_tainted_is_named_once():
    nodes = [node("n1", {"flox.dev/enabled": "true"}), node("n2", {"flox.dev/enabled": "true"})]
    assert node_pool_problems(nodes, ["n1", "n2"], UPSTREAM) == [
        "every worker node (2) lacks taint nodeset.slinky.slurm.net/worker:NoExecute"
    ]
