"""The doctor's Kubernetes lines from objects shaped as Slinky v1.2.1 writes them: a DaemonSet-mode NodeSet's counts
from its status, each pod matched to ``sinfo``, the RuntimeClass, the declared pool against the nodes (a cordoned
node shown), and a missing NodeSet as the one blocking problem."""

from __future__ import annotations

from pytest_slurmflox.harness.kubedoctor import ACCESS, describe
from pytest_slurmflox.judges.kubechecks import Placement

POOL = Placement.parse("flox.dev/enabled=true", "nodeset.slinky.slurm.net/worker:NoExecute")
TAINT = {"key": "nodeset.slinky.slurm.net/worker", "effect": "NoExecute"}
NODESET = {
    "metadata": {"name": "slurm-worker-compute"},
    "spec": {"scalingMode": "DaemonSet", "replicas": 1},  # the CRD's default replicas, ignored in this mode
    "status": {"desired": 2, "readyReplicas": 1},
}


def pod(name: str, node: str, host: str, phase: str = "Running") -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {"nodeset.slinky.slurm.net/pod-hostname": host},
            "annotations": {"flox.dev/environment": "myorg/hpc:17"},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


NODES = [
    {"metadata": {"name": "n1", "labels": {"flox.dev/enabled": "true"}}, "spec": {"taints": [TAINT]}},
    {"metadata": {"name": "n2", "labels": {"flox.dev/enabled": "true"}}, "spec": {"unschedulable": True}},
]
RC = {"handler": "flox", "scheduling": {"nodeSelector": {"flox.dev/enabled": "true"}}}


def test_the_nodeset_pods_runtime_class_and_nodes_are_shown_from_what_the_api_holds():
    pods = [pod("slurm-worker-compute-n1", "n1", "n1"), pod("slurm-worker-compute-n2", "n2", "n2", "Pending")]
    facts = describe("slurm-worker-compute", "slurm", NODESET, pods, ["n1", "n9"], RC, NODES, POOL)
    assert facts.blocking == []
    assert facts.lines == [
        "NodeSet slurm-worker-compute: DaemonSet, desired 2, ready 1 (spec.replicas 1, ignored in DaemonSet mode)",
        "pod slurm-worker-compute-n1: node n1, Running, Slurm node n1 (in sinfo), myorg/hpc:17",
        "pod slurm-worker-compute-n2: node n2, Pending, Slurm node n2 (NOT in sinfo), myorg/hpc:17",
        "Slurm node n9: no pod of the NodeSet backs it",
        "RuntimeClass flox: handler flox, nodeSelector flox.dev/enabled=true",
        "node n1: labelled flox.dev/enabled=true, tainted nodeset.slinky.slurm.net/worker:NoExecute",
        "node n2: labelled flox.dev/enabled=true, NOT tainted nodeset.slinky.slurm.net/worker:NoExecute, cordoned",
    ]


def test_a_missing_nodeset_blocks_naming_it():
    facts = describe("slurm-worker-compute", "slurm", None, [], [], None, [], None)
    assert facts.blocking == ["NodeSet slurm-worker-compute does not exist in namespace slurm"]
    assert "RuntimeClass flox: absent" in facts.lines


def test_the_access_asked_covers_exec_scaling_and_node_repair():
    spelled = {a.spelled for a in ACCESS}
    assert {"create pods/exec", "update nodesets/scale.slinky.slurm.net", "get nodes", "patch nodes"} <= spelled
