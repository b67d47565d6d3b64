"""After ``helm upgrade --install slurm``: the readiness wait and the login host-key pinning, over replayed API
objects read by the real :class:`~pytest_slurmflox.cluster.kube.KubeClient` (no Kubernetes API server runs here; see
tests/unit/test_reference_reconcile.py for why and how the replay works).

The objects have upstream's shapes: the operator's host-key Secret as slurm-operator v1.2.1
``internal/builder/loginbuilder/login_secret.go`` builds it (name from ``api/v1beta1/loginset_keys.go``, data keys
from ``login_app.go``, each public key ``ssh.MarshalAuthorizedKey`` output), with real keys generated here; the
controller StatefulSet and login Deployment as ``apps/v1`` returns them.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from kubernetes.client import rest

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.cluster.kube import KubeClient
from pytest_slurmflox.substrates import SubstrateUnavailable
from pytest_slurmflox.substrates.qemu.login import host_keys_secret_name, host_public_keys, pin_host_keys
from pytest_slurmflox.substrates.qemu.ready import Release, not_ready, wait_ready

NS = "slurm"


class _Resp:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.reason = status, "OK" if status == 200 else "Not Found"
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}


class Replay:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        path = urllib.parse.urlsplit(url).path
        assert method == "GET", path
        if path in self.objects:
            return rest.RESTResponse(_Resp(200, self.objects[path]))
        return rest.RESTResponse(_Resp(404, {"kind": "Status", "code": 404, "reason": "NotFound"}))


def kube_over(tmp: Path, objects: dict[str, dict[str, Any]]) -> KubeClient:
    cfg = tmp / "kubeconfig"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "replay"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    kube = KubeClient(cfg, None, NS)
    kube._api.rest_client = Replay(objects)
    return kube


def authorized_key(private: Any) -> bytes:
    """What Go's ``ssh.MarshalAuthorizedKey`` prints: ``<type> <base64>\\n``, no comment."""
    pub = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pub + b"\n"


def operator_secret(loginset: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Secret as the operator stores it, and the private keys (the login pod's sshd would present them)."""
    keys = {
        "ed25519": ed25519.Ed25519PrivateKey.generate(),
        "ecdsa": ec.generate_private_key(ec.SECP256R1()),
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }
    data = {}
    for kind, key in keys.items():
        priv = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        data[f"ssh_host_{kind}_key"] = base64.b64encode(priv).decode()
        data[f"ssh_host_{kind}_key.pub"] = base64.b64encode(authorized_key(key)).decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{loginset}-ssh-host-keys", "namespace": NS},
        "immutable": True,
        "type": "Opaque",
        "data": data,
    }
    return secret, keys


def test_the_login_host_keys_are_read_from_the_operators_secret_and_pinned(tmp_path):
    name = host_keys_secret_name()
    assert name == "slurm-login-login-ssh-host-keys"
    secret, keys = operator_secret("slurm-login-login")
    kube = kube_over(tmp_path, {f"/api/v1/namespaces/{NS}/secrets/{name}": secret})
    known = tmp_path / "known_hosts"
    node1 = authorized_key(ed25519.Ed25519PrivateKey.generate()).decode().strip()
    stale = authorized_key(ed25519.Ed25519PrivateKey.generate()).decode().strip()
    known.write_text(f"[127.0.0.1]:2201 {node1}\n[127.0.0.1]:2222 {stale}\n")

    pin_host_keys(known, "127.0.0.1", 2222, host_public_keys(kube.secret(name), name))

    # what the SSH runner loads (paramiko) now accepts exactly the operator's keys for the login port
    hk = paramiko.HostKeys(str(known))
    entry = hk.lookup("[127.0.0.1]:2222")
    assert entry is not None
    pinned = {k: entry[k].get_base64() for k in entry}
    expected = {authorized_key(k).split()[0].decode(): authorized_key(k).split()[1].decode() for k in keys.values()}
    assert pinned == expected
    assert hk.lookup("[127.0.0.1]:2201") is not None  # the node entries stay
    assert stale.split()[1] not in known.read_text()
    assert oct(known.stat().st_mode & 0o777) == "0o600"


def test_a_real_ssh_server_with_the_operators_key_is_accepted_and_another_refused(tmp_path):
    """The SSH runner against a paramiko server presenting the Secret's ed25519 key: pinned, the connection gets
    to authentication; with another host key it is refused as unpinned."""
    import socket
    import threading

    secret, keys = operator_secret("slurm-login-login")
    name = host_keys_secret_name()
    known = tmp_path / "known_hosts"

    def serve(host_key: Any) -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)

        def run() -> None:
            conn, _ = sock.accept()
            t = paramiko.Transport(conn)
            pem = host_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            )
            import io

            t.add_server_key(paramiko.Ed25519Key.from_private_key(io.StringIO(pem.decode())))
            try:
                t.start_server(server=paramiko.ServerInterface())
                t.accept(5)
            except Exception:
                pass
            finally:
                t.close()
                sock.close()

        threading.Thread(target=run, daemon=True).start()
        return sock.getsockname()[1]

    port = serve(keys["ed25519"])
    pin_host_keys(known, "127.0.0.1", port, host_public_keys(secret, name))
    key_file = tmp_path / "id"
    key_file.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    # past the host key check: the server (which accepts nobody) refuses the user, not its own key
    with pytest.raises(paramiko.AuthenticationException):
        SSHRunner(host="127.0.0.1", port=port, user="slurmtest", key_file=key_file, known_hosts=known).run("true")

    other = serve(ed25519.Ed25519PrivateKey.generate())
    pin_host_keys(known, "127.0.0.1", other, host_public_keys(secret, name))
    with pytest.raises(Exception, match="not pinned"):
        SSHRunner(host="127.0.0.1", port=other, user="slurmtest", key_file=key_file, known_hosts=known).run("true")


def test_a_missing_or_incomplete_secret_is_named(tmp_path):
    name = host_keys_secret_name()
    with pytest.raises(SubstrateUnavailable, match="has not created Secret slurm-login-login-ssh-host-keys"):
        host_public_keys(None, name)
    secret, _ = operator_secret("slurm-login-login")
    del secret["data"]["ssh_host_rsa_key.pub"]
    with pytest.raises(SubstrateUnavailable, match=r"lacks ssh_host_rsa_key\.pub"):
        host_public_keys(secret, name)


# ------------------------------------------------------------------------------------------ readiness
def workload(kind: str, name: str, want: int, ready: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": want, "selector": {"matchLabels": {"app": name}}, "template": {}},
        "status": {"replicas": want, "readyReplicas": ready, "updatedReplicas": want},
    }


def nodeset_pod(i: int, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"slurm-worker-compute-{i}",
            "namespace": NS,
            "labels": {"nodeset.slinky.slurm.net/pod-hostname": f"compute-{i}"},
            "ownerReferences": [{"apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet", "name": "w", "uid": "1"}],
        },
        "spec": {"containers": [{"name": "slurmd", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def release_objects(ctl_ready: int, login_ready: int, pods_ready: list[bool]) -> dict[str, dict[str, Any]]:
    return {
        f"/apis/apps/v1/namespaces/{NS}/statefulsets/slurm-controller": workload(
            "StatefulSet", "slurm-controller", 1, ctl_ready
        ),
        f"/apis/apps/v1/namespaces/{NS}/deployments/slurm-login-login": workload(
            "Deployment", "slurm-login-login", 1, login_ready
        ),
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/w": {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": "NodeSet",
            "metadata": {"name": "w", "namespace": NS},
            "spec": {"replicas": len(pods_ready)},
        },
        f"/api/v1/namespaces/{NS}/pods": {
            "apiVersion": "v1",
            "kind": "PodList",
            "metadata": {},
            "items": [nodeset_pod(i, r) for i, r in enumerate(pods_ready)],
        },
    }


RELEASE = Release("slurm-controller", "slurm-login-login", "w")


def test_readiness_names_each_workload_that_is_not_ready(tmp_path):
    kube = kube_over(tmp_path, release_objects(0, 1, [True, False]))
    missing = not_ready(kube, RELEASE)
    assert missing == [
        "StatefulSet slurm-controller: 0/1 ready, 1/1 updated",
        "NodeSet w: 1/2 pods ready (not ready: compute-1)",
    ]
    with pytest.raises(SubstrateUnavailable, match=r"not ready after 0s: StatefulSet slurm-controller: 0/1 ready"):
        wait_ready(kube, RELEASE, 0, poll=0, say=lambda _: None)


def test_readiness_waits_until_everything_runs(tmp_path):
    objects = release_objects(0, 0, [False, False])
    kube = kube_over(tmp_path, objects)
    said: list[str] = []
    rounds = iter([release_objects(1, 0, [True, False]), release_objects(1, 1, [True, True])])

    def progress(line: str) -> None:
        said.append(line)
        objects.update(next(rounds, {}))

    wait_ready(kube, RELEASE, 30, poll=0, say=progress)
    assert not_ready(kube, RELEASE) == []
    assert said[0].startswith("waiting for the slurm release: StatefulSet slurm-controller: 0/1 ready")
    assert "Deployment slurm-login-login: 0/1 ready" in said[0]


def test_nothing_created_yet_is_named_too(tmp_path):
    kube = kube_over(tmp_path, {})
    assert not_ready(kube, RELEASE) == [
        "StatefulSet slurm-controller: not created yet",
        "Deployment slurm-login-login: not created yet",
        "NodeSet w not found in namespace slurm",
    ]
