"""Why a pod exec could not run, in one sentence of ours: the real kubernetes client against a loopback HTTP server
that answers as kube-apiserver does (a 403 ``Status`` on the exec upgrade, the pod read), and the classification of
what the server answered (kubeexec.refusal) for each case a customer's cluster shows.

The 403 body is the API server's (apiserver ``pkg/endpoints/handlers/responsewriters/errors.go``
``ForbiddenStatusError``: ``pods "<name>" is forbidden: User "<user>" cannot create resource "pods/exec" in API
group "" in the namespace "<ns>"``); the error channel's ``Failure`` without an exit code is what an exec whose
kubelet the server cannot reach ends with (the T1 finding: ``error sending request: Post "https://.../exec/..."``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from pytest_slurmflox.base.kubeexec import (
    FORBIDDEN,
    NO_KUBELET,
    NOT_RUNNING,
    REFUSED,
    ExecRefused,
    failed_status,
    refusal,
)
from pytest_slurmflox.cluster.kube import KubeClient

USER = "system:serviceaccount:ci:slurmflox"
FORBIDDEN_BODY = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": f'pods "compute-0" is forbidden: User "{USER}" cannot create resource "pods/exec" in API group "" in '
    'the namespace "slurm"',
    "reason": "Forbidden",
    "details": {"name": "compute-0", "kind": "pods"},
    "code": 403,
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "compute-0", "namespace": "slurm"},
    "spec": {"nodeName": "n1", "containers": [{"name": "slurmd", "image": "i"}]},
    "status": {"phase": "Running"},
}


class Replay(BaseHTTPRequestHandler):
    """kube-apiserver's answers: the pod on GET, a 403 Status on the exec upgrade."""

    def _send(self, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if "/exec" in self.path:
            self._send(403, FORBIDDEN_BODY)
        else:
            self._send(200, POD)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def replayed_api(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    conf = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(conf))
    yield KubeClient(tmp_path / "kubeconfig", None, "slurm")
    server.shutdown()
    server.server_close()


def test_a_forbidden_exec_names_the_verb_the_resource_the_pod_and_the_user(replayed_api):
    with pytest.raises(ExecRefused) as refused:
        replayed_api.exec("compute-0", "slurmd", "true", timeout=10)
    assert refused.value.kind == FORBIDDEN
    assert str(refused.value) == (
        f'forbidden: user "{USER}" may not create pods/exec on pod compute-0 in namespace slurm (RBAC)'
    )
    assert "Handshake" not in str(refused.value) and "-+-+-" not in str(refused.value)  # none of the client's text


def test_an_error_channel_failure_without_an_exit_code_is_no_kubelet():
    unreachable = (
        '{"metadata":{},"status":"Failure","message":"error sending request: Post \\"https://10.0.0.5:10250/exec/'
        'slurm/compute-0/slurmd?command=true\\": dial tcp 10.0.0.5:10250: connect: connection refused",'
        '"reason":"InternalError","code":500}'
    )
    status = failed_status(unreachable)
    assert status is not None
    got = refusal(0, status, POD, pod_name="compute-0", namespace="slurm")
    assert got.kind == NO_KUBELET
    assert str(got) == (
        "cannot create pods/exec on pod compute-0 in namespace slurm: the API server reached no kubelet on node n1 "
        "(HTTP -)"
    )
    exit3 = (
        '{"metadata":{},"status":"Failure","reason":"NonZeroExitCode",'
        '"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    missing = '{"metadata":{},"status":"Failure","message":"exec: \\"bash\\": not found","reason":"InternalError"}'
    other = refusal(0, failed_status(missing), POD, pod_name="compute-0", namespace="slurm")
    assert other.kind == REFUSED and other.reason.endswith("the exec ended before the command ran (InternalError)")
    assert failed_status(exit3) is None and failed_status('{"status":"Success"}') is None and failed_status("") is None


def test_a_pod_that_is_not_running_is_named_with_its_phase():
    pending = {**POD, "spec": {"containers": []}, "status": {"phase": "Pending"}}
    got = refusal(400, None, pending, pod_name="compute-0", namespace="slurm")
    assert got.kind == NOT_RUNNING and got.reason.endswith("the pod is Pending, not scheduled on a node")
    gone = refusal(404, None, None, pod_name="compute-0", namespace="slurm")
    assert gone.kind == NOT_RUNNING and gone.reason.endswith("the pod does not exist")
    create = {
        **FORBIDDEN_BODY,
        "message": f'pods is forbidden: User "{USER}" cannot create resource "pods" in API group ""',
    }
    debug = refusal(403, create, None, pod_name="dbg", namespace="slurm", resource="pods")
    assert debug.reason.startswith(f'forbidden: user "{USER}" may not create pods on pod dbg')
