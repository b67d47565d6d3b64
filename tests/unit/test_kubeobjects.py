"""Which Kubernetes objects T1, T4 and T10 judge (issue 26: no false FAIL on a healthy shared cluster).

Replayed API objects: the dict shape ``KubeClient.pods()`` returns, and the kubernetes client's own models serialized
the way T4's watch serializes them (``ApiClient.sanitize_for_serialization``), so the shape read is the API's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kubernetes import client

from pytest_slurmflox.cluster.kubeobjects import tied_to_job, worker_pods

SUITES = Path(__file__).resolve().parents[2] / "suites"
NODESET = "slurm-worker-compute"


def _pod(name: str, *, owner: str = NODESET, phase: str = "Running", container: str = "slurmd") -> dict:
    return {
        "metadata": {"name": name, "namespace": "slurm", "ownerReferences": [{"kind": "NodeSet", "name": owner}]},
        "spec": {"hostname": name, "nodeName": "node2", "containers": [{"name": container}]},
        "status": {"phase": phase},
    }


def test_only_running_pods_of_the_declared_nodeset_are_its_workers():
    pods = [
        _pod("compute-0"),
        _pod("compute-1"),
        _pod("compute-2", phase="Failed"),  # evicted, left behind
        _pod("compute-3", phase="Pending"),
        _pod("gpu-0", owner="slurm-worker-gpu"),  # a second, healthy NodeSet
        _pod("compute-x", container="sidecar"),  # no slurmd container
        {**_pod("loose"), "metadata": {"name": "loose", "namespace": "slurm"}},  # owned by nothing
    ]
    assert [p["metadata"]["name"] for p in worker_pods(pods, NODESET)] == ["compute-0", "compute-1"]
    assert worker_pods(pods, "no-such-nodeset") == []


def _serialized(kind: str, namespace: str, name: str, **meta) -> dict:
    """What T4's watch records: the client's model serialized as the API's JSON, with the kind it watched."""
    model = client.V1Pod if kind == "pod" else client.V1Job
    obj = model(metadata=client.V1ObjectMeta(name=name, namespace=namespace, **meta))
    return {"kind": kind, **client.ApiClient().sanitize_for_serialization(obj)}


def _tied(obj: dict) -> str:
    return tied_to_job(obj, namespace="slurm", job_id="123", job_name="sfx-r1-test_submission")


def test_another_tenants_objects_are_not_the_jobs_doing():
    cron = client.V1OwnerReference(api_version="batch/v1", kind="CronJob", name="nightly-backup", uid="u1")
    job = _serialized("job", "tenant-b", "nightly-backup-29123", owner_references=[cron])
    pod = _serialized(
        "pod", "tenant-b", "web-7d9f", labels={"app": "web", "revision": "123"}, annotations={"note": "build 123"}
    )
    assert _tied(job) == "" and _tied(pod) == ""


def test_objects_tied_to_the_job_are_named_with_why():
    in_namespace = _serialized("pod", "slurm", "surprise")
    by_label = _serialized("pod", "bridge", "p1", labels={"slurm.net/job-id": "123"})
    by_name = _serialized("pod", "bridge", "p2", annotations={"origin": "sfx-r1-test_submission"})
    owner = client.V1OwnerReference(api_version="v1", kind="SlurmJob", name="slurmjob-123", uid="u2")
    by_owner = _serialized("job", "bridge", "j1", owner_references=[owner])
    assert "in the Slurm namespace slurm" in _tied(in_namespace)
    assert "slurm.net/job-id=123 names the job" in _tied(by_label)
    assert "origin=sfx-r1-test_submission names the job" in _tied(by_name)
    assert "owned by SlurmJob/slurmjob-123" in _tied(by_owner)


def _calls(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == name for n in ast.walk(tree))


def test_t1_t4_and_t10_judge_only_these_objects():
    """The suites use these filters (a suite that goes back to 'every slurmd pod' fails here)."""
    assert _calls(SUITES / "test_t01_flox_shim.py", "worker_pods")
    assert _calls(SUITES / "test_t10_isolation.py", "worker_pods")
    assert _calls(SUITES / "test_t04_ordinary_sbatch.py", "tied_to_job")
    for module in ("test_t01_flox_shim.py", "test_t10_isolation.py"):
        assert '"slurmd" for c in' not in (SUITES / module).read_text(), module
