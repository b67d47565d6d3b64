"""The Reconciler's update path over the qemu substrate's NodeSet pool, with the Kubernetes API replayed.

Why a stand-in API here, and only here: no Kubernetes API server can run on these machines (no internet for its
images), yet the qemu pool shipped with four of seven WorkerPool methods and every reconcile after
``--slurmflox-up=qemu`` died with AttributeError inside the maintenance barrier. So this test runs the real
:class:`~pytest_slurmflox.cluster.kube.KubeClient` (its real ``kubernetes`` ApiClient deserialization and our
``_plain``)
against a REST layer that answers with API objects in the exact JSON the API server returns (``NodeSet``
``slinky.slurm.net/v1beta1``, ``PodList`` ``v1``; shapes per slurm-operator v1.2.1
``config/crd/bases/slinky.slurm.net_nodesets.yaml`` and ``helm/slurm/templates/nodeset/nodeset-cr.yaml``). The
objects after the rollout are built from the values our pool really hands to ``helm upgrade`` (the chart copies
``nodesets.<key>.metadata`` onto the pod template), so the replay cannot agree with the pool by construction.

Slurm is a small in-memory controller answering the ``scontrol``/``squeue`` lines :class:`SlurmClient` sends: the
subject is the pool contract and the barrier's order over a NodeSet, not Slurm; the barrier against real Slurm
daemons is proven by ``tests/integration/test_lifecycle_local.py`` (integration).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import rest

from pytest_slurmflox.base.run import Result, command_line
from pytest_slurmflox.cluster.kube import KubeClient
from pytest_slurmflox.cluster.lifecycle import STEPS, Reconciler
from pytest_slurmflox.cluster.slurm import SlurmClient
from pytest_slurmflox.model.revision import runtime_revision
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.substrates.qemu.addons import HELM_BIN, VALUES_PATH, slurm_chart_command
from pytest_slurmflox.substrates.qemu.pool import NODESET_NAME, NodeSetPool

NAMESPACE = "slurm"
REVISION_KEY = "slinky.local/runtime-revision"


# ------------------------------------------------------------------------------------------ Kubernetes replay
def nodeset_object(template_meta: dict[str, Any], replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": NODESET_NAME, "namespace": NAMESPACE, "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": template_meta, "spec": {"hostname": "compute-"}},
        },
        "status": {"replicas": replicas},
    }


def pod_object(index: int, template_meta: dict[str, Any], image: str, *, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{NODESET_NAME}-{index}",
            "namespace": NAMESPACE,
            "annotations": dict(template_meta.get("annotations") or {}),
            "labels": dict(template_meta.get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "slinky.slurm.net/v1beta1",
                    "kind": "NodeSet",
                    "name": NODESET_NAME,
                    "uid": "11111111-2222-3333-4444-555555555555",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "hostname": f"compute-{index}",
            "nodeName": f"node{index + 2}",
            "runtimeClassName": "flox",
            "containers": [{"name": "slurmd", "image": image}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@dataclass
class Cluster:
    """What the API server would hold: one NodeSet and its pods, and each pod's task-profile revision."""

    nodeset: dict[str, Any]
    pods: list[dict[str, Any]]
    profiles: dict[str, str]
    reads_until_ready: int = 0  #: pod list reads left before a rolled-out pod reports Ready

    def pod_list(self) -> dict[str, Any]:
        if self.reads_until_ready > 0:
            self.reads_until_ready -= 1
            pods = [
                {**p, "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}
                for p in self.pods
            ]
        else:
            pods = self.pods
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": pods}


class _Urllib3Like:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.reason = status, "OK" if status == 200 else "Not Found"
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}


class ReplayREST:
    """Stands in for ``kubernetes.client.rest.RESTClientObject``: GETs are answered from :class:`Cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.requests: list[str] = []

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        path = urllib.parse.urlsplit(url).path
        self.requests.append(f"{method} {path}")
        assert method == "GET", f"the pool must only read through the API, not {method} {path}"
        if path == f"/apis/slinky.slurm.net/v1beta1/namespaces/{NAMESPACE}/nodesets/{NODESET_NAME}":
            return rest.RESTResponse(_Urllib3Like(200, self.cluster.nodeset))
        if path == f"/api/v1/namespaces/{NAMESPACE}/pods":
            return rest.RESTResponse(_Urllib3Like(200, self.cluster.pod_list()))
        return rest.RESTResponse(_Urllib3Like(404, {"kind": "Status", "code": 404, "reason": "NotFound"}))


class ReplayKube(KubeClient):
    """The real KubeClient over :class:`ReplayREST`; ``exec`` (a websocket upgrade) reads the recorded profile."""

    def __init__(self, tmp: Path, cluster: Cluster) -> None:
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(
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
        super().__init__(kubeconfig, None, NAMESPACE)
        self.cluster = cluster
        self.rest = ReplayREST(cluster)
        self._api.rest_client = self.rest
        self.execs: list[tuple[str, str, str]] = []

    def exec(self, pod: str, container: str, command: str, *, timeout: float = 120.0) -> Result:
        self.execs.append((pod, container, command))
        match = re.fullmatch(r"cat (\S+)", command)
        assert match and container == "slurmd", command
        rev = self.cluster.profiles.get(pod)
        status = 0 if rev is not None else 1
        return Result(command, f"pod/{pod}:{container}", "root", status, (rev or "") + "\n", "", 0.0)


# ------------------------------------------------------------------------------------------ node1 (helm)
@dataclass
class Node1:
    """node1 as the pool reaches it: files placed with ``put``, helm run with ``root``. A helm upgrade rolls the
    replayed NodeSet to the values it was given, as the operator would (pods first not Ready)."""

    cluster: Cluster
    image: str
    files: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)

    def put(self, path: str, content: str, mode: str = "0644") -> Result:
        self.files[path] = content
        return Result(f"put {path}", "node1", "root", 0, "", "", 0.0)

    def root(self, command: str, *, timeout: float = 120, input: str | None = None) -> Result:
        self.commands.append(command)
        if shlex.split(command)[:3] == [HELM_BIN, "--kubeconfig", "/etc/kubernetes/admin.conf"]:
            values = yaml.safe_load(self.files[VALUES_PATH])
            compute = values["nodesets"]["compute"]
            meta = compute["metadata"]
            self.cluster.nodeset = nodeset_object(meta, compute["replicas"])
            self.cluster.pods = [
                pod_object(i, meta, compute["slurmd"]["image"], ready=True) for i in range(compute["replicas"])
            ]
            # the profile initializer of each new pod records the revision its pod was created with
            self.cluster.profiles = {
                p["metadata"]["name"]: meta["annotations"][REVISION_KEY] for p in self.cluster.pods
            }
            self.cluster.reads_until_ready = 2
        return Result(command, "node1", "root", 0, "", "", 0.0)

    def close(self) -> None:
        pass


@dataclass
class Substrate:
    settings: Any
    node1: Node1
    workdir: Any

    def guest(self, n: int) -> Node1:
        assert n == 1
        return self.node1


# ------------------------------------------------------------------------------------------ Slurm
@dataclass
class Controller:
    """An in-memory slurmctld answering exactly the command lines SlurmClient sends (see the module docstring)."""

    nodes: dict[str, dict[str, Any]]
    partition: str = "UP"
    log: list[str] = field(default_factory=list)
    where: str = "login"
    user: str = "root"

    def run(self, command: str, *args: str, input=None, timeout: float = 120.0, env=None) -> Result:
        command = command_line(command, args)  # the Runner contract: arguments quoted
        self.log.append(command)
        words = shlex.split(command)
        out, rc = "", 0
        if words == ["scontrol", "ping"]:
            out = "Slurmctld(primary) at slurm-controller-0 is UP\n"
        elif words[:4] == ["scontrol", "-o", "show", "partition"]:
            out = f"PartitionName={words[4]} State={self.partition} Nodes=compute-[0-1]\n"
        elif words == ["scontrol", "-o", "show", "node"]:
            out = "".join(
                f"NodeName={n} State={v['state']} CPUTot={v['cpus']} RealMemory={v['mem']} Reason={v['reason']}\n"
                for n, v in self.nodes.items()
            )
        elif words[:2] == ["scontrol", "update"] and words[2].startswith("partitionname="):
            self.partition = words[3].split("=", 1)[1]
        elif words[:2] == ["scontrol", "update"] and words[2].startswith("nodename="):
            state = words[3].split("=", 1)[1]
            for name in words[2].split("=", 1)[1].split(","):
                node = self.nodes[name]
                node["state"] = "IDLE+DRAIN" if state == "DRAIN" else "IDLE"
                node["reason"] = words[4].split("=", 1)[1] if state == "DRAIN" else "none"
        elif words[0] == "squeue":
            out = ""
        else:
            rc = 127
        return Result(command, self.where, self.user, rc, out, "" if rc == 0 else "unknown command", 0.0)


# ------------------------------------------------------------------------------------------ the test
@pytest.fixture
def deployment(tmp_path):
    settings = resolve(cli={"LOGIN": "0", "TEST_IDENTITY": "0"}).settings
    old_rev = runtime_revision(settings)
    old_meta = {"annotations": {REVISION_KEY: old_rev, "flox.dev/environment": settings.worker_flox_ref}}
    cluster = Cluster(
        nodeset=nodeset_object(old_meta, settings.compute_replicas),
        pods=[pod_object(i, old_meta, settings.worker_image, ready=True) for i in range(settings.compute_replicas)],
        profiles={f"{NODESET_NAME}-{i}": old_rev for i in range(settings.compute_replicas)},
    )
    (tmp_path / "operator.pub").write_text("ssh-ed25519 AAAAC3Nza replay@test\n")
    workdir = type("W", (), {"ssh_pubkey": tmp_path / "operator.pub"})()
    node1 = Node1(cluster, settings.worker_image)
    kube = ReplayKube(tmp_path, cluster)
    pool = NodeSetPool(Substrate(settings, node1, workdir), kube)  # type: ignore[arg-type]
    nodes = {
        f"compute-{i}": {"state": "IDLE", "cpus": settings.worker_cpus, "mem": settings.worker_mem_mb, "reason": "none"}
        for i in range(settings.compute_replicas)
    }
    ctl = Controller(nodes)
    return settings, pool, kube, node1, ctl


def test_update_path_over_a_replayed_nodeset_runs_every_barrier_step_in_order(deployment):
    settings, pool, kube, node1, ctl = deployment
    new = dataclasses.replace(settings, worker_flox_generation=settings.worker_flox_generation + 1)
    wanted = runtime_revision(new)
    said: list[str] = []
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=said.append, timeout=10, poll=0.01)

    outcome = rec.reconcile(new)

    assert outcome.path == "update" and outcome.revision == wanted
    assert [s for s, _ in outcome.steps] == list(STEPS)
    # progress lines carry the step numbers in order, 1..12
    numbered = [int(m.group(1)) for line in said if (m := re.match(r"reconcile \[\s*(\d+)/", line))]
    assert numbered == list(range(1, len(STEPS) + 1))
    # the partition went DOWN before anything else, and came back UP only at the end
    updates = [c for c in ctl.log if c.startswith("scontrol update")]
    assert updates[0].startswith("scontrol update partitionname=all state=DOWN")
    assert updates[-1].startswith("scontrol update partitionname=all state=UP")
    drain = next(i for i, c in enumerate(ctl.log) if "state=DRAIN" in c)
    resume = next(i for i, c in enumerate(ctl.log) if "state=RESUME" in c)
    assert drain < resume
    # exactly one helm upgrade, with values that stamp the new revision and the new generation on the pods
    helm = [c for c in node1.commands if c.startswith(HELM_BIN)]
    assert helm == [slurm_chart_command(new)]
    meta = yaml.safe_load(node1.files[VALUES_PATH])["nodesets"]["compute"]["metadata"]
    assert meta["annotations"][REVISION_KEY] == wanted
    assert meta["annotations"]["flox.dev/environment"] == new.worker_flox_ref
    # the pool read the cohort through the API and each profile through pod exec, never wrote to the API
    assert {r.split()[0] for r in kube.rest.requests} == {"GET"}
    assert sorted(p for p, _, _ in kube.execs) == [f"{NODESET_NAME}-{i}" for i in range(new.compute_replicas)]
    assert pool.desired_revision() == wanted
    assert ctl.partition == "UP"


def test_unchanged_revision_over_the_replayed_nodeset_is_the_fast_path(deployment):
    settings, pool, _kube, node1, ctl = deployment
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=lambda _: None, timeout=5, poll=0.01)
    outcome = rec.reconcile(settings)
    assert outcome.path == "fast-path" and outcome.steps == []
    assert node1.commands == [] and not any(c.startswith("scontrol update") for c in ctl.log)


def test_a_worker_whose_profile_disagrees_stops_the_barrier_with_the_partition_down(deployment):
    settings, pool, _kube, node1, ctl = deployment
    new = dataclasses.replace(settings, worker_flox_generation=settings.worker_flox_generation + 1)
    original_root = node1.root

    def root_then_break_one_profile(command: str, **kw: Any) -> Result:
        res = original_root(command, **kw)
        if command.startswith(HELM_BIN):
            node1.cluster.profiles[f"{NODESET_NAME}-1"] = runtime_revision(settings)  # an old profile survived
        return res

    node1.root = root_then_break_one_profile  # type: ignore[method-assign]
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=lambda _: None, timeout=5, poll=0.01)
    with pytest.raises(Exception) as err:
        rec.reconcile(new)
    assert getattr(err.value, "step", None) == "verify-profiles"
    assert ctl.partition == "DOWN"


# ------------------------------------------------------------------------------------------ the operator's part
#: The slurm-operator's own reason prefix and its two reason strings that meet our barrier (slurm-operator v1.2.1):
#: the slurmd preStop hook (internal/builder/workerbuilder/worker_app.go) and MakeNodeUndrain's reason for
#: syncCordon's uncordon case (internal/controller/nodeset/nodeset_sync.go, slurmcontrol.go FormatNodeReason).
OPERATOR_PREFIX = "slurm-operator: "
PRESTOP_REASON = "slurm-operator: Pod is terminating"


def uncordon_reason(pod: str) -> str:
    return f"{OPERATOR_PREFIX}Pod ({NAMESPACE}/{pod}) was uncordoned"


@dataclass
class OperatorController(Controller):
    """The in-memory slurmctld with the Slinky operator acting on it as v1.2.1 does:

    * a rollout runs each old pod's preStop (``state=down reason='slurm-operator: Pod is terminating'``;
      Slurm keeps the DRAIN flag of a node set DOWN);
    * a new pod's slurmd registers (ReturnToService=2: DOWN becomes IDLE, DRAIN stays);
    * syncCordon, on every pass, undrains a node whose reason ``IsNodeReasonOurs`` (empty or prefixed) while
      its pod is up and not cordoned: ``state=UNDRAIN`` with ``Pod (ns/name) was uncordoned``.
    """

    cluster: Cluster | None = None
    undrained: list[str] = field(default_factory=list)
    passes: int = 0  #: syncCordon passes with the new pods up (when it would undrain what it believes its own)

    def prestop_all(self) -> None:
        for node in self.nodes.values():
            flags = set(node["state"].split("+")) - {"IDLE", "ALLOCATED", "MIXED"}
            node["state"] = "+".join(["DOWN", *sorted(flags)])
            node["reason"] = PRESTOP_REASON

    def operator_pass(self) -> None:
        assert self.cluster is not None
        if self.cluster.reads_until_ready > 0:
            return  # new pods not up yet: nothing registers, syncCordon sees no running pod
        self.passes += 1
        for index in range(len(self.cluster.pods)):
            node = self.nodes[f"compute-{index}"]
            flags = set(node["state"].split("+"))
            if "DOWN" in flags:  # slurmd of the new pod registers
                node["state"] = "+".join(["IDLE", *sorted(flags - {"DOWN"})])
                flags = set(node["state"].split("+"))
            ours = node["reason"] in ("", "none") or node["reason"].startswith(OPERATOR_PREFIX)
            if ours and "DRAIN" in flags:
                node["state"], node["reason"] = "IDLE", uncordon_reason(f"{NODESET_NAME}-{index}")
                self.undrained.append(f"compute-{index}")

    def run(self, command: str, *args: str, input=None, timeout: float = 120.0, env=None) -> Result:
        if command == "scontrol -o show node" or (command, *args) == ("scontrol", "-o", "show", "node"):
            self.operator_pass()
        words = shlex.split(" ".join([command, *(shlex.quote(a) for a in args)]))
        if words[:2] == ["scontrol", "update"] and words[2].startswith("nodename=") and words[3] == "state=DRAIN":
            reason = words[4].split("=", 1)[1]
            for name in words[2].split("=", 1)[1].split(","):
                node = self.nodes[name]
                base = "DOWN" if "DOWN" in node["state"].split("+") else "IDLE"
                node["state"], node["reason"] = f"{base}+DRAIN", reason
            self.log.append(" ".join(words))
            return Result(" ".join(words), self.where, self.user, 0, "", "", 0.0)
        return super().run(command, *args, input=input, timeout=timeout, env=env)


def drained_by_us(ctl: Controller) -> dict[str, bool]:
    return {
        name: "DRAIN" in n["state"].split("+") and n["reason"].startswith("slurmflox maintenance")
        for name, n in ctl.nodes.items()
    }


def test_the_barrier_keeps_the_cohort_drained_although_the_operator_undrains_what_it_believes_its_own(deployment):
    settings, pool, _kube, node1, ctl0 = deployment
    ctl = OperatorController(ctl0.nodes, cluster=node1.cluster)
    original_root = node1.root

    def helm_rolls_with_prestop(command: str, **kw: Any) -> Result:
        if command.startswith(HELM_BIN):
            ctl.prestop_all()  # every old pod terminates during the rollout
        return original_root(command, **kw)

    node1.root = helm_rolls_with_prestop  # type: ignore[method-assign]
    held: dict[str, dict[str, bool]] = {}

    def say(line: str) -> None:
        m = re.match(r"reconcile: step (\S+) begins", line)
        if m and m.group(1) in ("verify-workers", "verify-profiles", "repair-stale", "wait-registered", "resume"):
            held[m.group(1)] = drained_by_us(ctl)

    new = dataclasses.replace(settings, worker_flox_generation=settings.worker_flox_generation + 1)
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=say, timeout=10, poll=0.01)
    outcome = rec.reconcile(new)

    assert outcome.path == "update" and ctl.partition == "UP"
    for step, nodes in held.items():
        assert all(nodes.values()), f"at {step} the cohort was not held drained by our reason: {nodes}"
    assert ctl.passes > 0, "the replayed operator never ran with the new pods up: the test exercises nothing"
    drains = [c for c in ctl.log if "state=DRAIN" in c]
    assert len(drains) >= 2, f"the preStop reason was never replaced by ours again: {drains}"
    assert ctl.undrained == [], f"the operator undrained {ctl.undrained} under the barrier"
    assert set(held) == {"verify-workers", "verify-profiles", "repair-stale", "wait-registered", "resume"}


# ------------------------------------------------------------------------------------------ first deploy, replicas
def test_a_first_deployment_is_verified_by_the_barrier_not_taken_as_the_fast_path(deployment):
    """The chart starts the partition DOWN (values ``partitions.all.configMap.State``), so the first reconcile after
    the first ``helm upgrade --install`` completes a cycle: wait-ready ... verify-usable, then reopen."""
    settings, pool, _kube, node1, ctl = deployment
    node1.cluster.nodeset, node1.cluster.pods, node1.cluster.profiles = None, [], {}  # type: ignore[assignment]
    ctl.nodes.clear()
    ctl.partition = "UNKNOWN"

    pool.apply(settings)  # what provision_cluster does on a first deployment
    values = yaml.safe_load(node1.files[VALUES_PATH])
    ctl.partition = values["partitions"]["all"]["configMap"]["State"]  # slurmctld starts from the rendered config
    ctl.nodes.update(
        {
            f"compute-{i}": {"state": "IDLE", "cpus": settings.worker_cpus, "mem": settings.worker_mem_mb, "reason": ""}
            for i in range(settings.compute_replicas)
        }
    )
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=lambda _: None, timeout=10, poll=0.01)
    outcome = rec.reconcile(settings)

    assert ctl.partition == "UP"
    assert outcome.path == "recovery"
    assert [s for s, _ in outcome.steps] == list(STEPS)


def test_a_changed_compute_replicas_is_applied_through_the_barrier(deployment):
    settings, pool, _kube, node1, ctl = deployment
    more = dataclasses.replace(settings, compute_replicas=settings.compute_replicas + 1)
    assert runtime_revision(more) == runtime_revision(settings)  # not part of the revision (REFERENCE-DESIGN)
    name = f"compute-{settings.compute_replicas}"
    ctl.nodes[name] = {"state": "IDLE", "cpus": settings.worker_cpus, "mem": settings.worker_mem_mb, "reason": ""}
    rec = Reconciler(slurm=SlurmClient(user=ctl, admin=ctl), pool=pool, say=lambda _: None, timeout=10, poll=0.01)
    outcome = rec.reconcile(more)

    assert outcome.path == "update"
    assert yaml.safe_load(node1.files[VALUES_PATH])["nodesets"]["compute"]["replicas"] == more.compute_replicas
    assert pool.desired_count() == more.compute_replicas and len(pool.workers()) == more.compute_replicas


def test_the_step_timeout_budgets_a_sequential_replacement_of_every_worker(deployment):
    """maxUnavailable replaces one pod per wave for these cohorts (slurm-operator v1.2.1 nodeset_sync.go), so a
    waiting step must outlast one worker replacement per replica, not one for the whole cohort."""
    from pytest_slurmflox.substrates.qemu.pool import WORKER_REPLACEMENT_SECONDS

    settings, pool, *_ = deployment
    for replicas in (1, 2, 8):
        budget = pool.step_timeout(dataclasses.replace(settings, compute_replicas=replicas))
        assert budget >= replicas * WORKER_REPLACEMENT_SECONDS
    assert WORKER_REPLACEMENT_SECONDS >= 600  # a first realization may outlast kubelet's 2-minute runtime timeout
    assert pool.step_timeout(settings) > Reconciler.timeout  # the generic default would cut a rollout short
