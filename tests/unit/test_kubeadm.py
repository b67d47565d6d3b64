"""Our kubeadm InitConfiguration/ClusterConfiguration/JoinConfiguration, validated field by field against v1beta4.

No Go and no kubeadm binary here (kubeadm's packages come from pkgs.k8s.io, not reachable), so the check is the
published type reference turned into a table: "kubeadm Configuration (v1beta4)",
https://kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4/ (kubernetes/website
``content/en/docs/reference/config-api/kubeadm-config.v1beta4.md``, generated from
``cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go``), plus core/v1 ``Taint`` (key, value, effect, timeAdded; effect
one of NoSchedule, PreferNoSchedule, NoExecute). Only the types our documents reach are transcribed, completely
(every field of each), so an unknown key, a wrong shape (v1beta3's ``kubeletExtraArgs`` map, say) or a missing
required field fails. Expectations on the values come from the kubeadm "Creating a cluster" page and the settings.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.substrates.qemu import fabric, kubeadm

# ---------------------------------------------------------------------------------------- the v1beta4 reference
# field -> type; a leading "!" marks a field the reference lists as [Required] and that kubeadm cannot default.
V1BETA4: dict[str, dict[str, str]] = {
    "InitConfiguration": {
        "apiVersion": "string",
        "kind": "string",
        "bootstrapTokens": "[]BootstrapToken",
        "dryRun": "bool",
        "nodeRegistration": "NodeRegistrationOptions",
        "localAPIEndpoint": "APIEndpoint",
        "certificateKey": "string",
        "skipPhases": "[]string",
        "patches": "Patches",
        "timeouts": "Timeouts",
    },
    "ClusterConfiguration": {
        "apiVersion": "string",
        "kind": "string",
        "etcd": "Etcd",
        "networking": "Networking",
        "kubernetesVersion": "string",
        "controlPlaneEndpoint": "string",
        "apiServer": "APIServer",
        "controllerManager": "ControlPlaneComponent",
        "scheduler": "ControlPlaneComponent",
        "dns": "DNS",
        "proxy": "Proxy",
        "certificatesDir": "string",
        "imageRepository": "string",
        "featureGates": "map[string]bool",
        "clusterName": "string",
        "encryptionAlgorithm": "enum:RSA-2048,RSA-3072,RSA-4096,ECDSA-P256",
        "certificateValidityPeriod": "Duration",
        "caCertificateValidityPeriod": "Duration",
    },
    "JoinConfiguration": {
        "apiVersion": "string",
        "kind": "string",
        "dryRun": "bool",
        "nodeRegistration": "NodeRegistrationOptions",
        "caCertPath": "string",
        "!discovery": "Discovery",
        "controlPlane": "JoinControlPlane",
        "skipPhases": "[]string",
        "patches": "Patches",
        "timeouts": "Timeouts",
    },
    "NodeRegistrationOptions": {
        "name": "string",
        "criSocket": "string",
        "taints": "[]Taint",
        "kubeletExtraArgs": "[]Arg",
        "ignorePreflightErrors": "[]string",
        "imagePullPolicy": "enum:Always,IfNotPresent,Never",
        "imagePullSerial": "bool",
    },
    "APIEndpoint": {"advertiseAddress": "string", "bindPort": "int32"},
    "APIServer": {  # ControlPlaneComponent is embedded (inline)
        "extraArgs": "[]Arg",
        "extraVolumes": "[]HostPathMount",
        "extraEnvs": "[]EnvVar",
        "certSANs": "[]string",
    },
    "ControlPlaneComponent": {"extraArgs": "[]Arg", "extraVolumes": "[]HostPathMount", "extraEnvs": "[]EnvVar"},
    "Arg": {"!name": "string", "!value": "string"},
    "Networking": {"serviceSubnet": "string", "podSubnet": "string", "dnsDomain": "string"},
    "Discovery": {"bootstrapToken": "BootstrapTokenDiscovery", "file": "FileDiscovery", "tlsBootstrapToken": "string"},
    "BootstrapTokenDiscovery": {
        "!token": "string",
        "apiServerEndpoint": "string",
        "caCertHashes": "[]string",
        "unsafeSkipCAVerification": "bool",
    },
    "FileDiscovery": {"!kubeConfigPath": "string"},
    "Taint": {"!key": "string", "value": "string", "!effect": "enum:NoSchedule,PreferNoSchedule,NoExecute"},
}
#: Types our documents never reach: present in the reference, not transcribed here, so using one fails loudly.
UNTRANSCRIBED = {"BootstrapToken", "Patches", "Timeouts", "Etcd", "DNS", "Proxy", "HostPathMount", "EnvVar"}
UNTRANSCRIBED |= {"JoinControlPlane", "Duration"}


def violations(value: Any, type_name: str, where: str) -> list[str]:
    if type_name.startswith("[]"):
        if not isinstance(value, list):
            return [f"{where}: expected a list of {type_name[2:]}, got {type(value).__name__}"]
        return [v for i, item in enumerate(value) for v in violations(item, type_name[2:], f"{where}[{i}]")]
    if type_name.startswith("enum:"):
        allowed = type_name[5:].split(",")
        return [] if value in allowed else [f"{where}: {value!r} is not one of {allowed}"]
    if type_name.startswith("map["):
        return [] if isinstance(value, dict) else [f"{where}: expected a map"]
    scalar = {"string": str, "bool": bool, "int32": int}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name == "int32" and isinstance(value, bool))
        return [] if ok else [f"{where}: expected {type_name}, got {value!r}"]
    if type_name in UNTRANSCRIBED:
        return [f"{where}: uses {type_name}, which this check does not transcribe (extend V1BETA4 first)"]
    fields = V1BETA4[type_name]
    if not isinstance(value, dict):
        return [f"{where}: expected a {type_name} object"]
    known = {k.lstrip("!"): t for k, t in fields.items()}
    problems = [f"{where}.{k}: unknown field of {type_name}" for k in value if k not in known]
    problems += [
        f"{where}.{k[1:]}: required by {type_name}" for k in fields if k.startswith("!") and k[1:] not in value
    ]
    for key, item in value.items():
        if key in known:
            problems += violations(item, known[key], f"{where}.{key}")
    return problems


def validate(doc: dict) -> list[str]:
    kind = doc.get("kind")
    if doc.get("apiVersion") != "kubeadm.k8s.io/v1beta4" or kind not in V1BETA4:
        return [f"{doc.get('apiVersion')}/{kind} is not a kubeadm v1beta4 document"]
    return violations(doc, kind, kind)


def settings(**raw: str):
    return resolve(cli={k.upper(): v for k, v in raw.items()}).settings


JOIN_LINE = (
    "kubeadm join 10.20.0.11:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:" + "0f" * 32
)


@pytest.fixture
def init_docs():
    return list(yaml.safe_load_all(kubeadm.kubeadm_config(settings(kubernetes_version="1.36.3"))))


# ---------------------------------------------------------------------------------------- the checks
def test_the_check_itself_rejects_what_v1beta4_does_not_accept():
    bad_init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "nodeRegistration": {"kubeletExtraArgs": {"node-ip": "10.0.0.1"}, "taint": []},  # v1beta3 map; typo
    }
    problems = validate(bad_init)
    assert any("kubeletExtraArgs: expected a list of Arg" in p for p in problems)
    assert any("taint: unknown field" in p for p in problems)
    assert validate({"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration"}) == [
        "JoinConfiguration.discovery: required by JoinConfiguration"
    ]
    assert validate({**bad_init, "apiVersion": "kubeadm.k8s.io/v1beta3"})[0].endswith("not a kubeadm v1beta4 document")
    taint = {"key": "k", "effect": "NoScheduled"}
    assert violations(taint, "Taint", "t") == [
        "t.effect: 'NoScheduled' is not one of ['NoSchedule', 'PreferNoSchedule', 'NoExecute']"
    ]


def test_init_and_cluster_configuration_are_valid_v1beta4(init_docs):
    init, cluster, kubelet = init_docs
    assert validate(init) == [] and validate(cluster) == []
    # the third document belongs to the kubelet's own API group (kubelet.config.k8s.io/v1beta1)
    assert kubelet["apiVersion"] == "kubelet.config.k8s.io/v1beta1" and kubelet["kind"] == "KubeletConfiguration"
    assert set(kubelet) == {"apiVersion", "kind", "cgroupDriver"} and kubelet["cgroupDriver"] == "systemd"


def test_node1_registers_without_the_control_plane_taint(init_docs):
    """``taints`` must be present and empty: absent (nil) means kubeadm adds node-role.kubernetes.io/control-plane
    :NoSchedule (v1beta4 NodeRegistrationOptions.taints), and nothing but DaemonSets could then run anywhere."""
    registration = init_docs[0]["nodeRegistration"]
    assert "taints" in registration and registration["taints"] == []
    assert registration["name"] == "node1"
    assert {"name": "node-ip", "value": fabric.fabric_ip(1)} in registration["kubeletExtraArgs"]


def test_existing_node1_loses_the_control_plane_taint_after_the_join():
    """A node1 initialised by an earlier run still carries the taint: the role step removes it as kubeadm's
    "Control plane node isolation" section does (``kubectl taint ... node-role.kubernetes.io/control-plane-``)."""
    steps = kubeadm.node_role_steps(settings(nodes="3"))
    node1 = steps[-1].command
    assert "node-role.kubernetes.io/control-plane:NoSchedule-" in node1 and " node1 " in node1


@pytest.mark.parametrize("node", [2, 3])
def test_worker_join_configuration_is_valid_v1beta4_with_labels_and_taint(node):
    doc = yaml.safe_load(kubeadm.join_config(node, JOIN_LINE))
    assert validate(doc) == []
    discovery = doc["discovery"]["bootstrapToken"]
    assert discovery == {
        "apiServerEndpoint": "10.20.0.11:6443",
        "token": "abcdef.0123456789abcdef",
        "caCertHashes": ["sha256:" + "0f" * 32],
    }
    registration = doc["nodeRegistration"]
    assert registration["name"] == f"node{node}"
    assert registration["taints"] == [{"key": "slinky.local/native-worker", "value": "true", "effect": "NoSchedule"}]
    args = {a["name"]: a["value"] for a in registration["kubeletExtraArgs"]}
    assert args["node-ip"] == fabric.fabric_ip(node)
    labels = dict(item.split("=") for item in args["node-labels"].split(","))
    assert labels == {"slinky.local/native-worker": "true", "flox.dev/enabled": "true"}
    # NodeRestriction: a kubelet may not self-apply labels in the kubernetes.io / k8s.io namespaces
    assert not any(k.split("/")[0].endswith(("kubernetes.io", "k8s.io")) for k in labels)


def test_join_steps_place_the_configuration_secretly_then_join_with_it():
    put, join = kubeadm.join_steps(3, JOIN_LINE)
    assert put.node == join.node == 3
    assert put.put_path == kubeadm.KUBEADM_JOIN_CONFIG_PATH and put.mode == "0600"  # it holds the token
    assert join.script == "kubeadm-join.sh" and join.args == ("node3", kubeadm.KUBEADM_JOIN_CONFIG_PATH)


@pytest.mark.parametrize(
    "line",
    [
        "rm -rf /",
        "kubeadm join 10.20.0.11:6443 --token abc.def",
        "kubeadm join 10.20.0.11:6443 --discovery-token-ca-cert-hash sha256:00",
        "kubeadm join 10.20.0.11:6443 --token a.b --discovery-token-ca-cert-hash sha256:00 --control-plane",
    ],
)
def test_a_join_line_that_is_not_a_worker_bootstrap_is_refused(line):
    with pytest.raises(ValueError):
        kubeadm.join_config(2, line)
