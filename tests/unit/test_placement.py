"""T10's placement check with the worker pool a target declares (issue 26): node objects as the Kubernetes API
returns them (``kubectl get nodes -o json`` items, trimmed to the fields read), judged against the reference's pool
and a customer's own."""

from __future__ import annotations

import pytest

from pytest_slurmflox.judges.kubechecks import REFERENCE_PLACEMENT, Placement, node_pool_problems, placement_problems
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
