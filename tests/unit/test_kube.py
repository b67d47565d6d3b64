"""KubeClient: construction errors, reachability, JSON shape, exec status parsing; real reads when a cluster is
given with SLURMFLOX_KUBECONFIG (there is no Kubernetes API on this machine otherwise)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import yaml

from pytest_slurmflox.cluster.kube import KubeClient, KubeError, _plain, exit_code_from_status


def _closed_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _kubeconfig(path: Path, server: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "slurm"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_missing_kubeconfig_is_a_clear_error(tmp_path):
    with pytest.raises(KubeError, match="does not exist"):
        KubeClient(tmp_path / "nope", None, "slurm")


def test_unknown_context_is_a_clear_error(tmp_path):
    conf = _kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    with pytest.raises(KubeError, match="no usable kubeconfig"):
        KubeClient(conf, "no-such-context", "slurm")


def test_unreachable_api_is_reported_false_quickly(tmp_path):
    conf = _kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{_closed_loopback_port()}")
    kube = KubeClient(conf, None, "slurm")
    t0 = time.monotonic()
    assert kube.reachable(timeout=2) is False
    assert time.monotonic() - t0 < 10


def test_models_become_kubernetes_json():
    from kubernetes import client

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", annotations={"a": "b"}),
        spec=client.V1PodSpec(runtime_class_name="flox", containers=[client.V1Container(name="slurmd")]),
    )
    assert _plain([pod]) == [
        {
            "metadata": {"name": "p", "annotations": {"a": "b"}},
            "spec": {"runtimeClassName": "flox", "containers": [{"name": "slurmd"}]},
        }
    ]


def test_exec_status_channel_gives_the_exit_code():
    assert exit_code_from_status('{"metadata":{},"status":"Success"}') == 0
    failure = (
        '{"metadata":{},"status":"Failure","reason":"NonZeroExitCode",'
        '"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    assert exit_code_from_status(failure) == 3
    assert exit_code_from_status('{"status":"Failure","message":"container not found"}') == 1


@pytest.fixture
def live_kube():
    conf = os.environ.get("SLURMFLOX_KUBECONFIG")
    if not conf:
        pytest.skip("no Kubernetes API here: set SLURMFLOX_KUBECONFIG to a cluster's kubeconfig to run")
    kube = KubeClient(Path(conf), os.environ.get("SLURMFLOX_KUBE_CONTEXT"), os.environ.get("SLURMFLOX_NS", "slurm"))
    if not kube.reachable():
        pytest.fail(f"SLURMFLOX_KUBECONFIG={conf} was given but its API server does not answer")
    return kube


def test_live_reads_return_kubernetes_json(live_kube):
    nodes = live_kube.nodes()
    assert nodes and all("metadata" in n and "name" in n["metadata"] for n in nodes)
    assert all(p["metadata"]["namespace"] == live_kube.namespace for p in live_kube.pods())
    assert isinstance(live_kube.pods_all_namespaces(), list) and isinstance(live_kube.jobs_all_namespaces(), list)
    assert live_kube.runtime_class("no-such-runtime-class-slurmflox") is None
    assert isinstance(live_kube.nodesets(), list) and isinstance(live_kube.loginsets(), list)
