"""Slinky v1.2.1 as it really is, on a real kube-apiserver: the kubernetes-profile groups' Kubernetes checks and the
doctor judge what the operator and admission write, and a healthy cluster passes.

Runs against the kubeconfig ``$SLURMFLOX_TEST_KUBECONFIG`` names (marker ``kubeapi``), in a namespace of its own,
deleted afterwards, with nodes of its own (deleted too). The six CRDs are upstream's of tag v1.2.1
(``config/crd/bases`` of the shared reference copy), applied unchanged when the server lacks them. The NodeSet is
rendered by the real ``slurm`` chart (reference values, or plain upstream values plus the Flox RuntimeClass and
annotation); its pods are built as the operator builds them (slurm-operator v1.2.1
``internal/builder/workerbuilder/worker_app.go`` ``BuildWorkerPodTemplate``: the template's metadata and pod spec,
the slurmd container from ``spec.slurmd``, the toleration of ``nodeset.slinky.slurm.net/worker:NoExecute``
(``pkg/taints/taints.go``); ``internal/controller/nodeset/utils/utils.go``: the ordinal name, hostname and
``pod-hostname`` label), created through the API so RuntimeClass admission adds the node selector, bound to a node
as the scheduler binds (``pods/binding``) and marked Running as a kubelet reports it (``pods/status``). Nothing of
what the checks expect is written into these objects by hand.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from slinkyapi import (
    KUBECONFIG_ENV,
    NO_API,
    POOL_LABEL,
    POOL_TAINT,
    REFERENCE_POOL,
    WORKER_TOLERATION,
    namespace_and_nodes,
    slinky_api,
)

from pytest_slurmflox.model.settings import resolve

pytestmark = pytest.mark.kubeapi
pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: cannot render the Slinky chart")
import slinkyapi  # noqa: E402

from pytest_slurmflox.substrates.qemu.render import values as rv  # noqa: E402

SETTINGS = resolve(cli={"WORKER_FLOX_ENV": "myorg/hpc", "WORKER_FLOX_GENERATION": "17", "TEST_IDENTITY": "0"}).settings


@pytest.fixture(scope="module")
def api():
    """The real API server: a client of the test's own kubeconfig, the CRDs and RuntimeClass ``flox`` present;
    what this module created of them (cluster-scoped) is deleted again at its end."""
    conf = os.environ.get(KUBECONFIG_ENV)
    if not conf:
        pytest.skip(f"{NO_API} to run the kubeapi tests")
    with slinky_api(conf) as api_client:
        yield Path(conf), api_client


@pytest.fixture
def cluster(api):
    """A namespace and two worker nodes of this test's own (labelled and tainted as the declared pool), removed
    afterwards."""
    conf, api_client = api
    with namespace_and_nodes(api_client, "slurmflox-kubeapi") as (ns, nodes):
        yield conf, api_client, ns, nodes


def plain_values() -> dict[str, Any]:
    """Upstream's values with nothing of the reference design's but the Flox RuntimeClass and annotation."""
    return slinkyapi.plain_values(SETTINGS.worker_image, SETTINGS.worker_flox_ref)


def deploy(cluster, values: dict[str, Any], *, change=None) -> dict[str, Any]:
    """The NodeSet created, its two pods built, admitted, bound and Running (slinkyapi.deploy)."""
    _, api_client, ns, nodes = cluster
    return slinkyapi.deploy(api_client, ns, nodes, values, change=change)


def target_of(cluster, nodeset: str, *, pool: tuple[str, str] = (POOL_LABEL, POOL_TAINT), kubeconfig=None, **kube):
    """A customer's target over this API (substrate existing, every expectation declared), connected as a run
    connects it (connection.py's Kubernetes and pool probes); its login is never used here."""
    from pytest_slurmflox.cluster.kube import KubeClient
    from pytest_slurmflox.cluster.nodeset import NodeSetView
    from pytest_slurmflox.harness.connection import Target, _probe_kubernetes, _probe_pool
    from pytest_slurmflox.model.target import parse_target, worker_settings_document

    conf, _, ns, _ = cluster
    section = {"kubeconfig": str(kubeconfig or conf), "namespace": ns, "nodeset": nodeset}
    section |= {"worker_label": pool[0], "worker_taint": pool[1], **kube}
    expect = {"image": SETTINGS.worker_image, "replicas": 2}
    expect["settings"] = worker_settings_document(SETTINGS, SETTINGS.worker_image)
    doc = {"name": "kubeapi", "substrate": "existing", "kubernetes": section, "expect": expect}
    spec = parse_target({**doc, "login": {"host": "127.0.0.1", "user": "nobody", "key": "/dev/null"}})
    caps: set[str] = set()
    missing: dict[str, str] = {}
    client = _probe_kubernetes(spec, caps, missing)
    assert isinstance(client, KubeClient) and "kubernetes" in caps, missing
    view = NodeSetView(client, nodeset)
    _probe_pool(view, caps, missing)
    return Target(spec, None, None, None, client, view, frozenset(caps), missing)  # type: ignore[arg-type]


def verdict(check, *args) -> tuple[str, str]:
    """A suite check's outcome as the sign-off reads it: PASS, FAIL, NOT RUN or SKIP, with its text."""
    from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

    try:
        check(*args)
    except pytest.fail.Exception as exc:
        return "FAIL", str(exc)
    except pytest.skip.Exception as exc:
        return ("NOT RUN" if str(exc).startswith(NOT_RUN_PREFIX) else "SKIP"), str(exc)
    return "PASS", ""


def kubernetes_checks(target) -> dict[str, tuple[str, str]]:
    """The Kubernetes-side checks of T1, T10 and T11 (their Slurm-side checks need a login and are not run here)."""
    import pytest_slurmflox.suites.test_t01_flox_shim as t1
    import pytest_slurmflox.suites.test_t10_isolation as t10
    import pytest_slurmflox.suites.test_t11_revision as t11

    from pytest_slurmflox.judges.expectations import expected_revision

    expect = target.spec.expect
    workers = sorted(w.name for w in target.pool.workers())
    revision = expected_revision(expect.settings, expect.image)
    return {
        "T1 runtimeclass": verdict(t1.test_worker_pods_run_under_runtimeclass_flox, target, expect),
        "T1 handler": verdict(t1.test_runtimeclass_flox_is_handled_by_the_flox_shim, target),
        "T1 init": verdict(t1.test_profile_initializer_runs_the_expected_image, target, expect),
        "T1 slurmd": verdict(t1.test_slurmd_process_runs_inside_the_pinned_environment, target, expect),
        "T10 placement": verdict(t10.test_worker_pods_only_on_reserved_nodes, target, expect),
        "T11 records": verdict(
            t11.test_every_worker_record_carries_the_expected_revision,
            target,
            expect,
            workers,
            revision,
            SimpleNamespace(held={}),  # the session's state: no worker quarantined
        ),
    }


def test_a_healthy_reference_cluster_passes_its_kubernetes_checks(cluster):
    nodeset = deploy(cluster, rv.render_slurm_values(SETTINGS))
    target = target_of(cluster, nodeset["metadata"]["name"], pool=REFERENCE_POOL)
    got = kubernetes_checks(target)
    slurmd = got.pop("T1 slurmd")  # no kubelet behind these nodes: NOT RUN naming the node, never a PASS
    assert all(v == "PASS" for v, _ in got.values()), got
    assert slurmd[0] == "NOT RUN" and "reached no kubelet on node slurmflox-kubeapi-" in slurmd[1], slurmd
    assert "Handshake" not in slurmd[1] and "invalid literal" not in slurmd[1]


def test_plain_upstream_values_pass_placement_and_name_each_addition_once(cluster):
    nodeset = deploy(cluster, plain_values())
    got = kubernetes_checks(target_of(cluster, nodeset["metadata"]["name"]))
    assert got["T10 placement"][0] == "PASS", got["T10 placement"]
    assert got["T1 handler"][0] == "PASS"
    for check, part in (
        ("T1 runtimeclass", "annotation slinky.local/runtime-revision is missing"),
        ("T1 init", "init container flox-task-profile-init is missing"),
        ("T11 records", "annotation slinky.local/runtime-revision is missing"),
    ):
        outcome, text = got[check]
        assert outcome == "FAIL" and text.count(part) == 1 and "docs/reference-stack.md" in text, (check, text)
    assert "flox.dev/environment" not in got["T1 runtimeclass"][1]  # the generation is right on every pod
    assert "flox.dev/activate-mode" not in got["T1 runtimeclass"][1]  # absent: Flox's default, run, as declared


def test_a_pod_without_the_worker_toleration_fails_placement_naming_pod_and_node(cluster):
    def untolerated(i, pod):
        if i == 1:
            pod["spec"]["tolerations"] = [t for t in pod["spec"]["tolerations"] if t != WORKER_TOLERATION]

    nodeset = deploy(cluster, plain_values(), change=untolerated)
    outcome, text = kubernetes_checks(target_of(cluster, nodeset["metadata"]["name"]))["T10 placement"]
    _, _, _, nodes = cluster
    pod = nodeset["metadata"]["name"] + "-1"
    assert outcome == "FAIL" and f"pod {pod} on node {nodes[1]}: no toleration for {POOL_TAINT}" in text, text
    assert f"{nodeset['metadata']['name']}-0 " not in text


def test_a_pod_at_another_generation_fails_naming_that_worker(cluster):
    def other_generation(i, pod):
        if i == 1:
            pod["metadata"]["annotations"]["flox.dev/environment"] = "myorg/hpc:18"

    nodeset = deploy(cluster, rv.render_slurm_values(SETTINGS), change=other_generation)
    got = kubernetes_checks(target_of(cluster, nodeset["metadata"]["name"], pool=REFERENCE_POOL))
    name = nodeset["metadata"]["name"]
    outcome, text = got["T1 runtimeclass"]
    assert outcome == "FAIL" and f"pod {name}-1 on node" in text and "'myorg/hpc:18'" in text, text
    assert f"pod {name}-0 " not in text
    outcome, text = got["T11 records"]
    assert outcome == "FAIL" and "runs myorg/hpc:17 (flox.dev/environment: myorg/hpc:18)" in text, text
    assert text.count("flox.dev/environment: myorg/hpc:18") == 1


def test_the_doctor_shows_the_nodeset_pods_runtime_class_and_access(cluster):
    from pytest_slurmflox.harness.kubedoctor import ask_kubernetes

    nodeset = deploy(cluster, plain_values())
    target = target_of(cluster, nodeset["metadata"]["name"])
    hosts = sorted(w.name for w in target.pool.workers())
    facts = ask_kubernetes(target, hosts)
    shown = "\n".join(facts.lines)
    assert facts.blocking == [] and shown.startswith("server v"), shown
    assert f"NodeSet {nodeset['metadata']['name']}: StatefulSet, desired 2, ready 2" in shown
    assert shown.count("(in sinfo), myorg/hpc:17") == 2
    assert "RuntimeClass flox: handler flox, nodeSelector flox.dev/enabled=true" in shown
    assert "may create pods/exec: allowed" in shown
    gone = ask_kubernetes(target_of(cluster, "no-such-nodeset"), [])
    assert gone.blocking == [f"NodeSet no-such-nodeset does not exist in namespace {cluster[2]}"]


@pytest.fixture
def reader(cluster, tmp_path):
    """A kubeconfig of a ServiceAccount of the test's namespace that may read pods, NodeSets, nodes and
    RuntimeClasses but not ``create pods/exec`` (RBAC), its token requested through ``serviceaccounts/token``; the
    cluster-scoped role and binding are removed afterwards."""
    from kubernetes import client

    conf, api_client, ns, _ = cluster
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    read = ["get", "list", "watch"]
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": read}]
    rules += [{"apiGroups": ["slinky.slurm.net"], "resources": ["nodesets"], "verbs": read}]
    rbac.create_namespaced_role(ns, {"metadata": {"name": "reader"}, "rules": rules})
    subject = [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
    rbac.create_namespaced_role_binding(ns, {"metadata": {"name": "reader"}, "subjects": subject, "roleRef": role_ref})
    cluster_rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": read}]
    cluster_rules += [{"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": read}]
    name = f"{ns}-reader"
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": cluster_rules})
    ref = {**role_ref, "kind": "ClusterRole", "name": name}
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "subjects": subject, "roleRef": ref})
    try:
        token = core.create_namespaced_service_account_token("reader", ns, {"spec": {"expirationSeconds": 900}})
        doc = yaml.safe_load(conf.read_text())
        current = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]["cluster"]
        server = next(c for c in doc["clusters"] if c["name"] == current)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [server],
            "users": [{"name": "reader", "user": {"token": token.status.token}}],
            "contexts": [{"name": "reader", "context": {"cluster": current, "user": "reader"}}],
            "current-context": "reader",
        }
        path = tmp_path / "reader.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        yield path, f"system:serviceaccount:{ns}:reader"
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        rbac.delete_namespaced_role_binding("reader", ns)
        rbac.delete_namespaced_role("reader", ns)
        core.delete_namespaced_service_account("reader", ns)


def test_a_forbidden_exec_is_not_run_naming_verb_resource_and_user_unless_declared(cluster, reader):
    from pytest_slurmflox.harness.kubedoctor import ask_kubernetes

    path, user = reader
    nodeset = deploy(cluster, plain_values())
    name = nodeset["metadata"]["name"]
    import pytest_slurmflox.suites.test_t01_flox_shim as t1

    target = target_of(cluster, name, kubeconfig=path)
    outcome, text = verdict(t1.test_slurmd_process_runs_inside_the_pinned_environment, target, target.spec.expect)
    said = re.compile(
        rf'forbidden: user "{re.escape(user)}" may not (get|create) pods/exec on pod {name}-0 in namespace '
        rf"{cluster[2]} \(RBAC\)"
    )
    assert outcome == "NOT RUN" and said.search(text), text
    declared = target_of(cluster, name, kubeconfig=path, pod_exec=True)
    outcome, text = verdict(t1.test_slurmd_process_runs_inside_the_pinned_environment, declared, declared.spec.expect)
    assert outcome == "FAIL" and said.search(text), text
    shown = "\n".join(ask_kubernetes(target, []).lines)
    assert "may create pods/exec: DENIED" in shown and "may patch nodes: DENIED" in shown, shown


def test_an_exec_whose_kubelet_cannot_be_reached_is_not_run_naming_the_node(cluster):
    """Nodes with an address: the API server opens the exec and fails dialing the kubelet (the T1 finding, where the
    client's ``WSClient.returncode`` raised ``ValueError`` on the error channel's text). One reason of ours."""
    import pytest_slurmflox.suites.test_t01_flox_shim as t1
    from kubernetes import client

    _, api_client, _, nodes = cluster
    for node in nodes:  # a kubelet's address as a node reports it (TEST-NET-1: never routed, never dialled here)
        status = {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}
        status |= {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
        client.CoreV1Api(api_client).patch_node_status(node, {"status": status})
    target = target_of(cluster, deploy(cluster, plain_values())["metadata"]["name"])
    outcome, text = verdict(t1.test_slurmd_process_runs_inside_the_pinned_environment, target, target.spec.expect)
    assert outcome == "NOT RUN" and f"the API server reached no kubelet on node {nodes[0]}" in text, text
    assert "error sending request" not in text and "invalid literal" not in text and "dial" not in text


def test_the_doctor_run_names_a_missing_nodeset_and_exits_1(cluster, tmp_path):
    """``--slurmflox-check-target`` as a user runs it (a pytest process), its login on a closed loopback port: the
    Kubernetes lines are printed from the API and a declared NodeSet that is not there blocks, named."""
    import socket
    import subprocess
    import sys

    conf, _, ns, _ = cluster
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    doc = {
        "version": 1,
        "name": "kubeapi",
        "login": {"host": "127.0.0.1", "port": port, "user": "u", "key": "/dev/null"},
    }
    doc["kubernetes"] = {"kubeconfig": str(conf), "namespace": ns, "nodeset": "no-such-nodeset"}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
    argv = [sys.executable, "-m", "pytest", f"--slurmflox-check-target={tmp_path / 't.yaml'}", "-p", "no:cacheprovider"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    lines = (out.stdout + out.stderr).splitlines()
    assert out.returncode == 1, lines
    assert any("server v" in line for line in lines), lines
    assert any(f"NodeSet no-such-nodeset: MISSING in namespace {ns}" in line for line in lines), lines
    assert f"NodeSet no-such-nodeset does not exist in namespace {ns}" in lines[-1], lines[-1]
