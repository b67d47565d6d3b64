"""Node access the Kubernetes way: a privileged debug pod on a node, as ``kubectl debug node/<name>
--profile=sysadmin`` makes one, so T1 can read the configuration containerd really runs with on a customer's node.

Why a debug pod: on a customer's cluster nobody hands us root over SSH on the nodes, but an operator who may run
``kubectl debug node/...`` may let the test do the same, declared in the target file
(``kubernetes.node_debug_image``: the image the debug container runs; it needs ``sleep`` and ``cat``, and
``chroot`` to run the node's own ``containerd config dump``). Undeclared, T1's node check is NOT RUN naming the key.

The pod is upstream kubectl's, field for field (kubernetes/kubectl ``pkg/cmd/debug/debug.go``
``generateNodeDebugPod``: one container ``debugger``, ``nodeName`` the node, ``restartPolicy: Never``, a toleration
``operator: Exists``; ``pkg/cmd/debug/profiles.go`` sysadmin profile for a node: ``privileged: true``, the host's
PID, network and IPC namespaces, ``hostPath /`` mounted at ``/host``; documented at
https://kubernetes.io/docs/tasks/debug/debug-cluster/kubectl-node-debug/), in the target's namespace, labelled as
ours and deleted when the read is done. It sleeps; the read is an exec into it (kube.py).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from ..base.kubeexec import answered, refusal
from ..base.run import Result
from ..base.waits import poll

DEBUG_CONTAINER = "debugger"  #: kubectl's name for the node debug container
HOST_ROOT = "/host"  #: where the node's filesystem is mounted (kubectl's sysadmin profile)
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
#: What the debug container runs while T1 reads (seconds): long enough for one exec, gone soon if a delete failed.
LIFETIME = 600
LABEL = {"app.kubernetes.io/managed-by": "pytest-slurmflox", "slurmflox.dev/purpose": "node-debug"}
#: The node's effective containerd configuration: its own ``containerd config dump`` (imports merged), run in the
#: node's root; a node whose containerd binary cannot run there gives the file it reads.
READ_CONFIG = f"chroot {HOST_ROOT} containerd config dump 2>/dev/null || cat {HOST_ROOT}{CONTAINERD_CONFIG}"
_IMAGE = re.compile(r"[a-z0-9][a-zA-Z0-9._/:@+-]*\Z")


def parse_image(value: object) -> str:
    """``kubernetes.node_debug_image``: a container image reference (``registry/repo:tag``, ``repo@sha256:...``),
    no whitespace, nothing else; ValueError naming the key otherwise."""
    if not isinstance(value, str) or not _IMAGE.match(value):
        raise ValueError(f"kubernetes.node_debug_image must be a container image reference, not {value!r}")
    return value


def pod_name(node: str, suffix: str) -> str:
    """``slurmflox-node-debugger-<node>-<suffix>``, a DNS-1123 name of at most 63 characters."""
    node = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")
    return f"slurmflox-node-debugger-{node}"[: 63 - len(suffix) - 1].rstrip("-") + f"-{suffix}"


def debug_pod(node: str, image: str, name: str) -> dict[str, Any]:
    """The debug pod for ``node`` (Kubernetes JSON), kubectl's node debug pod with the sysadmin profile."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(LABEL)},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "hostPID": True,
            "hostNetwork": True,
            "hostIPC": True,
            "containers": [
                {
                    "name": DEBUG_CONTAINER,
                    "image": image,
                    "command": ["sleep", str(LIFETIME)],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host-root", "mountPath": HOST_ROOT}],
                    "terminationMessagePolicy": "File",
                }
            ],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        },
    }


def containerd_config(kube, node: str, image: str, *, timeout: float = 180.0) -> Result:
    """The node's containerd configuration, read through a debug pod on it (created, waited for, deleted)."""
    name = pod_name(node, secrets.token_hex(3))
    try:
        kube.create_pod(debug_pod(node, image, name))
    except Exception as exc:  # forbidden (RBAC, a pod security policy): one reason of ours, never the client's
        code, status = answered(exc)
        raise refusal(code, status, None, pod_name=name, namespace=kube.namespace, resource="pods") from None
    try:
        try:
            poll(lambda: _running(kube, name), what=f"debug pod {name} on {node} running", timeout=timeout, interval=1)
        except TimeoutError:
            raise refusal(0, None, kube.pod(name) or {}, pod_name=name, namespace=kube.namespace) from None
        return kube.exec(name, DEBUG_CONTAINER, READ_CONFIG, timeout=60.0)
    finally:
        kube.delete_pod(name)


def _running(kube, name: str) -> bool | None:
    """True once the pod runs; raises ExecRefused when it ended (no reason to wait), None while pending."""
    pod = kube.pod(name) or {}
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running":
        return True
    if phase in ("Succeeded", "Failed"):
        raise refusal(0, None, pod, pod_name=name, namespace=kube.namespace)
    return None
