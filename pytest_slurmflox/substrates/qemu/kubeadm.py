"""What the Kubernetes stage does to the guests, as data: an ordered list of steps. Pure; no I/O.

Why data: every command and manifest the substrate would apply can be inspected and unit-tested here
without a cluster, and the executor (:mod:`.provision`) stays a dumb loop. The plan covers node preparation,
kubeadm init/join with the pinned version, flannel on the fabric NIC, the worker-pool label and taint on
nodes 2..N only (never node1), and the node label the ``flox`` RuntimeClass selects.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import yaml

from ...base.run import command_line
from ...model.labels import LABEL_CONTROL_PLANE, LABEL_FLOX_NODE, LABEL_NATIVE_WORKER, TAINT_NATIVE_WORKER
from ...model.settings import Settings
from . import fabric

KUBECONFIG_IN_GUEST = "/etc/kubernetes/admin.conf"
KUBEADM_CONFIG_PATH = "/etc/slurmflox/kubeadm.yaml"
FABRIC_IFACE = "fabric0"

CRI_SOCKET = "unix:///run/containerd/containerd.sock"
KUBEADM_JOIN_CONFIG_PATH = "/etc/slurmflox/kubeadm-join.yaml"


@dataclass(frozen=True)
class Step:
    """One action on one node. Exactly one of ``script``, ``command`` or ``put_path`` is set.

    ``script``: a shipped guest script run as root with ``args``; ``command``: a root shell command;
    ``put_path``: write ``content`` there (mode ``mode``). ``soft``: a failure warns instead of aborting.
    """

    node: int
    title: str
    script: str | None = None
    args: tuple[str, ...] = ()
    command: str | None = None
    put_path: str | None = None
    content: str = ""
    mode: str = "0644"
    soft: bool = False
    timeout: float = 900.0


def kubectl(*args: str) -> str:
    """A kubectl command line run as root on node1 against the admin kubeconfig."""
    return command_line(f"kubectl --kubeconfig {KUBECONFIG_IN_GUEST}", args)


def k8s_minor(version: str) -> str:
    """``1.36.3`` -> ``v1.36`` (the pkgs.k8s.io repository is per minor version)."""
    parts = version.lstrip("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"KUBERNETES_VERSION {version!r} is not MAJOR.MINOR.PATCH")
    return f"v{parts[0]}.{parts[1]}"


def kubeadm_config(settings: Settings) -> str:
    """kubeadm v1beta4 Init/Cluster/Kubelet configuration for node1 (field names: kubeadm Configuration (v1beta4)
    reference, kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4/).

    The API server advertises its fabric address; 127.0.0.1 is a certificate SAN because the host reaches the
    API through the QEMU port forward on 127.0.0.1:K8S_API_PORT.
    """
    ip1 = fabric.fabric_ip(1)
    docs = [
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "InitConfiguration",
            "localAPIEndpoint": {"advertiseAddress": ip1, "bindPort": fabric.K8S_GUEST_API_PORT},
            "nodeRegistration": {
                "name": fabric.hostname(1),
                "criSocket": CRI_SOCKET,
                # No control-plane taint: node1 is the only node outside the native worker pool, so cert-manager,
                # local-path, the Slinky operator, slurmctld and login must schedule there. kubeadm v1beta4
                # NodeRegistrationOptions.taints: "If you don't want to taint your control-plane node, set this
                # field to an empty list"; kubeadm "Creating a cluster", "Control plane node isolation".
                "taints": [],
                "kubeletExtraArgs": [{"name": "node-ip", "value": ip1}],
            },
        },
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "ClusterConfiguration",
            "kubernetesVersion": f"v{settings.kubernetes_version.lstrip('v')}",
            "controlPlaneEndpoint": f"{ip1}:{fabric.K8S_GUEST_API_PORT}",
            "networking": {"podSubnet": settings.pod_cidr, "serviceSubnet": settings.svc_cidr},
            "apiServer": {"certSANs": ["127.0.0.1", ip1, fabric.hostname(1)]},
        },
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "systemd",
        },
    ]
    return yaml.safe_dump_all(docs, sort_keys=False)


def worker_nodes(settings: Settings) -> range:
    """Nodes 2..NODES: the reserved native Slurm capacity. node1 is never part of it."""
    return range(2, settings.nodes + 1)


def cluster_steps(settings: Settings) -> list[Step]:
    """Prepare every node, init node1, join nodes 2..N (the join arguments are fetched at run time)."""
    version = settings.kubernetes_version.lstrip("v")
    steps = [
        Step(
            n,
            f"prepare {fabric.hostname(n)} for Kubernetes {version}",
            script="k8s-node-prep.sh",
            args=(k8s_minor(version), version, fabric.fabric_ip(n)),
        )
        for n in range(1, settings.nodes + 1)
    ]
    steps.append(
        Step(1, "kubeadm configuration", put_path=KUBEADM_CONFIG_PATH, content=kubeadm_config(settings), mode="0600")
    )
    steps.append(Step(1, "kubeadm init", script="kubeadm-init.sh", args=(KUBEADM_CONFIG_PATH,)))
    steps.append(
        Step(
            1,
            "flannel on the fabric NIC",
            script="flannel.sh",
            args=(settings.flannel_version, settings.pod_cidr, FABRIC_IFACE),
        )
    )
    return steps


def parse_join_command(join_command: str) -> dict[str, str | list[str]]:
    """The discovery part of node1's ``kubeadm token create --print-join-command`` line: endpoint, token and CA
    public-key pins (``kubeadm join`` reference: ``--token``, ``--discovery-token-ca-cert-hash``)."""
    words = shlex.split(join_command)
    if words[:2] != ["kubeadm", "join"] or len(words) < 3:
        raise ValueError(f"not a kubeadm join command: {join_command!r}")
    endpoint, token, hashes = words[2], None, []
    rest = iter(words[3:])
    for word in rest:
        if word == "--token":
            token = next(rest, None)
        elif word == "--discovery-token-ca-cert-hash":
            hashes.append(next(rest, ""))
        else:
            raise ValueError(f"unexpected argument {word!r} in the join command")
    if not token or not hashes:
        raise ValueError("the join command names no token or no CA certificate hash")
    return {"apiServerEndpoint": endpoint, "token": token, "caCertHashes": hashes}


def join_config(node: int, join_command: str) -> str:
    """kubeadm v1beta4 JoinConfiguration for worker ``node``: registered with the native-worker labels and taint
    from its first moment, so nothing but Slurm workers (and DaemonSets) ever lands on it.

    Labels go through the kubelet's ``--node-labels``: the NodeRestriction admission plugin lets a kubelet set
    labels outside the ``kubernetes.io``/``k8s.io`` namespaces itself (kubeadm "Creating a cluster", "Managed node
    labels"); the taint through ``nodeRegistration.taints`` (v1beta4 NodeRegistrationOptions).
    """
    ip = fabric.fabric_ip(node)
    key, _, rest = TAINT_NATIVE_WORKER.partition("=")
    value, _, effect = rest.partition(":")
    doc = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": parse_join_command(join_command)},
        "nodeRegistration": {
            "name": fabric.hostname(node),
            "criSocket": CRI_SOCKET,
            "taints": [{"key": key, "value": value, "effect": effect}],
            "kubeletExtraArgs": [
                {"name": "node-ip", "value": ip},
                {"name": "node-labels", "value": f"{LABEL_NATIVE_WORKER}=true,{LABEL_FLOX_NODE}=true"},
            ],
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def join_steps(node: int, join_command: str) -> list[Step]:
    """Place worker ``node``'s JoinConfiguration (it carries the bootstrap token: mode 0600), then join with it."""
    return [
        Step(
            node,
            f"kubeadm join configuration for {fabric.hostname(node)}",
            put_path=KUBEADM_JOIN_CONFIG_PATH,
            content=join_config(node, join_command),
            mode="0600",
        ),
        Step(
            node,
            f"kubeadm join {fabric.hostname(node)}",
            script="kubeadm-join.sh",
            args=(fabric.hostname(node), KUBEADM_JOIN_CONFIG_PATH),
        ),
    ]


JOIN_COMMAND = "kubeadm token create --print-join-command --ttl 30m"


def node_role_steps(settings: Settings) -> list[Step]:
    """Label and taint nodes 2..N as native Slurm capacity with the Flox runtime; make sure node1 is neither."""
    steps = []
    for n in worker_nodes(settings):
        name = fabric.hostname(n)
        steps.append(
            Step(
                1,
                f"reserve {name} for native Slurm workers",
                command=" && ".join(
                    [
                        kubectl(
                            "label",
                            "node",
                            name,
                            f"{LABEL_NATIVE_WORKER}=true",
                            f"{LABEL_FLOX_NODE}=true",
                            "--overwrite",
                        ),
                        kubectl("taint", "node", name, TAINT_NATIVE_WORKER, "--overwrite"),
                    ]
                ),
            )
        )
    node1 = fabric.hostname(1)
    # node1 carries the infrastructure: no worker label, and neither the worker taint nor the control-plane taint
    # (a node1 initialised before InitConfiguration said ``taints: []`` still has it; kubeadm "Creating a
    # cluster", "Control plane node isolation": ``kubectl taint nodes --all node-role.kubernetes.io/control-plane-``).
    steps.append(
        Step(
            1,
            f"{node1} is infrastructure, not worker capacity",
            command=" ; ".join(
                [
                    kubectl("label", "node", node1, f"{LABEL_NATIVE_WORKER}-", f"{LABEL_FLOX_NODE}-"),
                    kubectl("taint", "node", node1, f"{LABEL_NATIVE_WORKER}-") + " 2>/dev/null",
                    kubectl("taint", "node", node1, f"{LABEL_CONTROL_PLANE}:NoSchedule-") + " 2>/dev/null",
                    "true",
                ]
            ),
        )
    )
    return steps
