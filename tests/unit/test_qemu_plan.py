"""The Kubernetes-stage plan of the qemu substrate: every command and manifest it would apply (pure)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from pytest_slurmflox.cluster.nodeset import nodeset_revision, owned_by, worker_from_pod
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates.qemu import QemuSubstrate, addons, kubeadm
from pytest_slurmflox.substrates.qemu.guest import guest_script_dir
from pytest_slurmflox.substrates.qemu.provision import kubeconfig_for_host, target_document


def settings(**raw: str):
    return resolve(cli={k.upper(): v for k, v in raw.items()}).settings


def commands(steps) -> list[str]:
    return [s.command for s in steps if s.command]


def test_kubeadm_config_pins_version_networks_and_loopback_san():
    docs = list(yaml.safe_load_all(kubeadm.kubeadm_config(settings(kubernetes_version="1.36.3"))))
    init, cluster, kubelet = docs
    assert init["kind"] == "InitConfiguration" and init["localAPIEndpoint"]["advertiseAddress"] == "10.20.0.11"
    assert {"name": "node-ip", "value": "10.20.0.11"} in init["nodeRegistration"]["kubeletExtraArgs"]
    assert cluster["kubernetesVersion"] == "v1.36.3"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    assert "127.0.0.1" in cluster["apiServer"]["certSANs"]
    assert kubelet["cgroupDriver"] == "systemd"


def test_every_node_is_prepared_with_the_pinned_packages_then_node1_inits():
    steps = kubeadm.cluster_steps(settings(nodes="3", kubernetes_version="1.36.3"))
    prep = [s for s in steps if s.script == "k8s-node-prep.sh"]
    assert [s.node for s in prep] == [1, 2, 3]
    assert prep[1].args == ("v1.36", "1.36.3", "10.20.0.12")
    init = next(s for s in steps if s.script == "kubeadm-init.sh")
    assert init.node == 1 and init.args == (kubeadm.KUBEADM_CONFIG_PATH,)
    flannel = next(s for s in steps if s.script == "flannel.sh")
    assert flannel.args == ("v0.28.9", "10.244.0.0/16", "fabric0")
    assert steps.index(next(s for s in steps if s.put_path == kubeadm.KUBEADM_CONFIG_PATH)) < steps.index(init)


def test_worker_label_and_taint_on_nodes_2_to_n_never_node1():
    steps = kubeadm.node_role_steps(settings(nodes="4"))
    reserve = [c for c in commands(steps) if "--overwrite" in c and "taint" in c]
    assert len(reserve) == 3
    for n, command in zip((2, 3, 4), reserve, strict=True):
        words = shlex.split(command.replace("&&", ";"))
        assert f"node{n}" in words
        assert "slinky.local/native-worker=true" in words and "flox.dev/enabled=true" in words
        assert "slinky.local/native-worker=true:NoSchedule" in words
    node1 = commands(steps)[-1]
    assert "node1" in node1 and "slinky.local/native-worker-" in node1 and "flox.dev/enabled-" in node1
    assert not any("node1" in c and "=true" in c for c in commands(steps))


def test_runtime_class_selects_flox_nodes():
    doc = yaml.safe_load(addons.runtime_class_manifest())
    assert doc == {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "flox"},
        "handler": "flox",
        "scheduling": {"nodeSelector": {"flox.dev/enabled": "true"}},
    }


def test_flox_runtime_goes_on_workers_only_and_runtimeclass_after():
    steps = addons.flox_runtime_steps(settings(nodes="3", flox_version="1.15.0"))
    shim = [s for s in steps if s.script == "flox-runtime.sh"]
    assert [s.node for s in shim] == [2, 3]
    assert shim[0].args == ("1.15.0", "flox/containerd-shim-flox-installer", addons.SHIM_PATH)
    assert steps[-1].command and "runtimeclass-flox.yaml" in steps[-1].command


def test_flox_packages_come_from_their_own_format_directory():
    """floxdocs install.md: .../stable/deb/flox-V.x86_64-linux.deb and .../stable/rpm/flox-V.x86_64-linux.rpm (the
    .deb URL once derived from the .rpm one pointed into rpm/, a 404)."""
    assert addons.flox_package_url("1.15.0", "deb") == (
        "https://downloads.flox.dev/by-env/stable/deb/flox-1.15.0.x86_64-linux.deb"
    )
    assert addons.flox_package_url("1.15.0", "rpm") == (
        "https://downloads.flox.dev/by-env/stable/rpm/flox-1.15.0.x86_64-linux.rpm"
    )
    script = (guest_script_dir() / "flox-runtime.sh").read_text()
    assert "${base}/deb/flox-${flox_version}.x86_64-linux.deb" in script
    rpm_import = script.index('rpm --import "$work/flox-archive-keyring.asc"')
    assert rpm_import < script.index('dnf_or_offline install "$work/flox.rpm"')  # the key before the package
    assert "flox activate -r" in script and "--trust" in script and "ctr " not in script


def test_helm_is_called_by_absolute_path_because_sudo_secure_path_lacks_usr_local_bin():
    s = settings()
    helm_commands = [c for c in commands(addons.slinky_operator_steps(s)) if "helm" in c]
    helm_commands.append(addons.slurm_chart_command(s))
    assert helm_commands and all(shlex.split(c)[0] == "/usr/local/bin/helm" for c in helm_commands)
    assert "helm=/usr/local/bin/helm" in (guest_script_dir() / "install-helm.sh").read_text()


def test_cert_manager_webhook_must_answer_before_the_operator_is_installed():
    s = settings()
    certs = addons.storage_and_certs_steps(s)
    titles = [st.title for st in certs]
    assert titles.index("cert-manager webhook answers") > titles.index(f"cert-manager {s.cert_manager_version}")
    probe = yaml.safe_load(next(st.content for st in certs if st.put_path == addons.WEBHOOK_PROBE_PATH))
    assert probe["apiVersion"] == "cert-manager.io/v1" and probe["kind"] == "Issuer"
    ready = next(st.command for st in certs if st.title == "cert-manager webhook answers")
    assert "--dry-run=server" in ready and addons.WEBHOOK_PROBE_PATH in ready


def test_offline_precheck_names_every_download_host():
    from pytest_slurmflox.substrates.qemu.network import DOWNLOAD_HOSTS

    needed = {"registry.k8s.io", "docker.io", "get.helm.sh", "raw.githubusercontent.com", "download.docker.com"}
    needed |= {"downloads.flox.dev", "hub.flox.dev", "pkgs.k8s.io", "github.com", "ghcr.io", "quay.io"}
    assert needed <= set(DOWNLOAD_HOSTS)
    hosts_in_scripts = set()
    for script in guest_script_dir().glob("*.sh"):
        hosts_in_scripts |= set(re.findall(r"https://([a-z0-9.-]+)/", script.read_text()))
    assert hosts_in_scripts <= set(DOWNLOAD_HOSTS), hosts_in_scripts - set(DOWNLOAD_HOSTS)


def test_the_debian_test_image_carries_curl():
    from pytest_slurmflox.substrates.qemu.testimage import PACKAGES

    assert {"curl", "ca-certificates"} <= set(PACKAGES)


def test_prewarm_only_when_the_environment_was_explicit_and_never_aborts():
    s = settings(nodes="3", worker_flox_env="myorg/hpc", worker_flox_generation="17")
    assert addons.prewarm_steps(s, frozenset()) == []
    steps = addons.prewarm_steps(s, frozenset({"WORKER_FLOX_ENV"}))
    assert [(st.node, st.script, st.args, st.soft) for st in steps] == [
        (2, "flox-prewarm.sh", ("myorg/hpc", "17"), True),
        (3, "flox-prewarm.sh", ("myorg/hpc", "17"), True),
    ]


def test_addon_versions_are_pinned():
    s = settings(cert_manager_version="v1.19.2", local_path_version="v0.0.31", slinky_version="1.2.2")
    text = " ".join(commands(addons.storage_and_certs_steps(s)) + commands(addons.slinky_operator_steps(s)))
    assert "cert-manager/releases/download/v1.19.2/cert-manager.yaml" in text
    assert "local-path-provisioner/v0.0.31/deploy/local-path-storage.yaml" in text
    assert "slurm-operator-crds --version 1.2.2" in text and "slurm-operator --version 1.2.2" in text
    chart = addons.slurm_chart_command(s)
    assert "upgrade --install slurm oci://ghcr.io/slinkyproject/charts/slurm --version 1.2.2" in chart
    assert f"-f {addons.VALUES_PATH}" in chart and "--namespace slurm" in chart


def test_test_identity_home_is_owned_by_the_test_user():
    [step] = addons.identity_home_step(settings(test_uid="4001", test_gid="4001"))
    assert step.command == "install -d -m 0750 -o 4001 -g 4001 /home/slurmtest"
    assert addons.identity_home_step(settings(test_identity="0")) == []


def test_login_image_files_are_split_by_marker():
    files = addons.split_login_files(
        "=== passwd\nroot:x:0:0::/root:/bin/bash\n=== group\nroot:x:0:\n=== shadow\nroot:*:1::::::\n"
    )
    assert files == {"passwd": "root:x:0:0::/root:/bin/bash\n", "group": "root:x:0:\n", "shadow": "root:*:1::::::\n"}
    with pytest.raises(ValueError, match="shadow"):
        addons.split_login_files("=== passwd\n=== group\n")


def test_kubeconfig_points_at_the_loopback_forward():
    conf = "clusters:\n- cluster:\n    server: https://10.20.0.11:6443\n  name: kubernetes\n"
    assert "server: https://127.0.0.1:6444\n" in kubeconfig_for_host(conf, 6444)


def test_target_document_names_the_login_and_the_nodeset(tmp_path):
    sub = QemuSubstrate(settings(login_ssh_port="2222"), Workdir(tmp_path), print)
    doc = target_document(sub)
    assert doc["substrate"] == "qemu" and doc["login"]["port"] == 2222 and doc["login"]["user"] == "slurmtest"
    assert doc["kubernetes"]["kubeconfig"] == str(tmp_path / "k8s" / "kubeconfig")
    assert doc["identity"]["supp_gid"] == 4002


def test_nodeset_pool_reads_revision_and_workers_from_kubernetes_json():
    rev = "sha256:" + "ab" * 32
    nodeset = {
        "metadata": {"name": "slurm-worker-compute"},
        "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"slinky.local/runtime-revision": rev}}}},
    }
    assert nodeset_revision(nodeset) == rev and nodeset_revision(None) is None
    pod = {
        "metadata": {
            "name": "slurm-worker-compute-0",
            "annotations": {"slinky.local/runtime-revision": rev, "flox.dev/environment": "flox/echoip:2"},
            "ownerReferences": [{"kind": "NodeSet", "name": "slurm-worker-compute"}],
        },
        "spec": {
            "hostname": "compute-0",
            "nodeName": "node2",
            "runtimeClassName": "flox",
            "containers": [{"name": "slurmd", "image": "img@sha256:" + "0" * 64}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    info = worker_from_pod(pod)
    assert (info.name, info.ready, info.revision, info.environment, info.runtime_class, info.host) == (
        "compute-0",
        True,
        rev,
        "flox/echoip:2",
        "flox",
        "node2",
    )
    assert owned_by(pod, "NodeSet", "slurm-worker-compute") and not owned_by(pod, "NodeSet", "other")


def test_a_failed_download_is_reported_as_offline_not_as_a_broken_step():
    from pytest_slurmflox.substrates.qemu.provision import offline_line

    out = "Kubernetes 1.36\nErrors during downloading metadata:\ncurl: (6) Could not resolve host: pkgs.k8s.io\n"
    assert offline_line(out) == "curl: (6) Could not resolve host: pkgs.k8s.io"
    assert offline_line("kubeadm: error execution phase preflight: port 6443 is in use") is None


def test_prewarm_counts_persisted_and_process_environment_as_explicit(tmp_path, monkeypatch):
    from pytest_slurmflox.model.workdir import WorkerRevisionFile
    from pytest_slurmflox.substrates.qemu.provision import explicit_worker_keys

    monkeypatch.delenv("SLURMFLOX_WORKER_FLOX_ENV", raising=False)
    monkeypatch.setenv("WORKER_FLOX_ENV", "myorg/not-ours")  # a bare name is not ours
    wd = Workdir(tmp_path)
    sub = QemuSubstrate(settings(), wd, print)
    assert explicit_worker_keys(sub) == frozenset()
    WorkerRevisionFile(wd.worker_revision_env).write({"WORKER_FLOX_ENV": "myorg/hpc"})
    assert explicit_worker_keys(sub) == {"WORKER_FLOX_ENV"}
    wd.worker_revision_env.unlink()
    monkeypatch.setenv("SLURMFLOX_WORKER_FLOX_ENV", "myorg/hpc")
    assert explicit_worker_keys(sub) == {"WORKER_FLOX_ENV"}
