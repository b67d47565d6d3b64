"""T1's node access the Kubernetes way (pytest_slurmflox/model/nodedebug.py): the debug pod is kubectl's node debug pod
with
the sysadmin profile, the target key is validated and written back, a customer target without it is NOT RUN naming
the key, and the whole read (create, wait Running, exec, delete) runs through the real KubeClient over a replayed
API (no API server can run here; the replay answers in the API server's JSON, as tests/test_reference_*.py do)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client import rest
from pytest_slurmflox.suites.test_t01_flox_shim import _node_reader

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.cluster.kube import KubeClient
from pytest_slurmflox.model.nodedebug import DEBUG_CONTAINER, READ_CONFIG, containerd_config, debug_pod, pod_name
from pytest_slurmflox.model.target import TargetError, parse_target, target_document
from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

LOGIN = {"host": "127.0.0.1", "port": 22, "user": "u", "key": "/dev/null"}
KUBE = {"namespace": "slurm", "nodeset": "slurm-worker-compute"}
IMAGE = "registry.example/debug:1.0@sha256:" + "a" * 64


def test_the_pod_is_kubectls_node_debug_pod_with_the_sysadmin_profile():
    pod = debug_pod("node-2", IMAGE, "slurmflox-node-debugger-node-2-abc123")
    spec = pod["spec"]
    assert spec["nodeName"] == "node-2" and spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["hostPID"] and spec["hostNetwork"] and spec["hostIPC"]
    (container,) = spec["containers"]
    assert container["name"] == DEBUG_CONTAINER and container["image"] == IMAGE
    assert container["securityContext"] == {"privileged": True}
    assert container["volumeMounts"] == [{"name": "host-root", "mountPath": "/host"}]
    assert spec["volumes"] == [{"name": "host-root", "hostPath": {"path": "/"}}]
    assert "/host/etc/containerd/config.toml" in READ_CONFIG and "chroot /host containerd config dump" in READ_CONFIG


def test_pod_names_are_dns_labels_whatever_the_node_is_called():
    name = pod_name("Very.Long_node-name." + "x" * 80, "abc123")
    assert len(name) <= 63 and name.endswith("-abc123") and name == name.lower()
    assert all(c.isalnum() or c == "-" for c in name)


def test_the_key_is_validated_and_written_back():
    doc = {"login": LOGIN, "kubernetes": {**KUBE, "node_debug_image": IMAGE}}
    spec = parse_target(doc)
    assert spec.kubernetes.node_debug_image == IMAGE
    assert parse_target(target_document(spec)).kubernetes == spec.kubernetes
    for bad in ("debug image", 42, "-rm"):
        with pytest.raises(TargetError, match=r"kubernetes\.node_debug_image"):
            parse_target({"login": LOGIN, "kubernetes": {**KUBE, "node_debug_image": bad}})


def _target(kube: dict, *, substrate: str = "existing") -> SimpleNamespace:
    """A target whose pool has no node access (a customer's): ``why_missing('node-admin')`` names it."""
    spec = parse_target({"login": LOGIN, "substrate": substrate, "kubernetes": kube})
    return SimpleNamespace(spec=spec, kube=None, why_missing=lambda cap: f"no {cap}")


def test_without_the_declaration_the_node_check_is_not_run_naming_the_key():
    with pytest.raises(pytest.skip.Exception) as skipped:
        _node_reader(_target(KUBE))
    assert str(skipped.value).startswith(NOT_RUN_PREFIX) and "kubernetes.node_debug_image" in str(skipped.value)
    assert callable(_node_reader(_target({**KUBE, "node_debug_image": IMAGE})))


# ------------------------------------------------------------------------------------------ the replayed API
class _Response:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.reason = status, "OK" if status < 300 else "Error"
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}


class ReplayPods:
    """``kubernetes.client.rest.RESTClientObject`` for pods of one namespace: POST creates (Pending), each GET moves
    a pod one phase on (Pending, then Running), DELETE removes it."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        path = urllib.parse.urlsplit(url).path
        self.requests.append(f"{method} {path}")
        base = "/api/v1/namespaces/slurm/pods"
        if method == "POST" and path == base:
            pod = {**body, "status": {"phase": "Pending"}}
            self.pods[body["metadata"]["name"]] = pod
            return rest.RESTResponse(_Response(201, pod))
        name = path.removeprefix(base + "/")
        if name not in self.pods:
            return rest.RESTResponse(_Response(404, {"kind": "Status", "code": 404, "reason": "NotFound"}))
        if method == "DELETE":
            return rest.RESTResponse(_Response(200, self.pods.pop(name)))
        pod = self.pods[name]
        shown = json.loads(json.dumps(pod))
        pod["status"] = {"phase": "Running"}
        return rest.RESTResponse(_Response(200, shown))


class ReplayKube(KubeClient):
    """The real KubeClient over :class:`ReplayPods`; ``exec`` (a websocket upgrade) answers with a config dump."""

    def __init__(self, tmp: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
            "users": [{"name": "u", "user": {"token": "replay"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        (tmp / "kubeconfig").write_text(yaml.safe_dump(config))
        super().__init__(tmp / "kubeconfig", None, "slurm")
        self.rest = ReplayPods()
        self._api.rest_client = self.rest
        self.execs: list[tuple[str, str, str, str]] = []

    def exec(self, pod: str, container: str, command: str, *, timeout: float = 120.0) -> Result:
        phase = self.rest.pods[pod]["status"]["phase"]
        self.execs.append((pod, container, command, phase))
        return Result(command, f"pod/{pod}:{container}", "root", 0, 'version = 2\n[plugins."x"]\n', "", 0.0)


def test_the_read_creates_the_pod_waits_for_it_execs_and_deletes_it(tmp_path):
    kube = ReplayKube(tmp_path)
    got = containerd_config(kube, "node-2", IMAGE, timeout=10)
    assert got.ok and got.stdout.startswith("version = 2")
    ((pod, container, command, phase),) = kube.execs
    assert container == DEBUG_CONTAINER and command == READ_CONFIG and phase == "Running"
    assert pod.startswith("slurmflox-node-debugger-node-2-")
    assert kube.rest.requests[0] == "POST /api/v1/namespaces/slurm/pods"
    assert kube.rest.requests[-1] == f"DELETE /api/v1/namespaces/slurm/pods/{pod}"
    assert kube.rest.pods == {}  # nothing left on the cluster
