"""Executes the Kubernetes-stage plan (:mod:`.kubeadm`, :mod:`.addons`) on the guests, in order.

The completion marker ``<workdir>/k8s/provisioned.json`` is removed first and written last, and the kubeconfig
and target file are only written once everything before them succeeded: an interrupted run leaves nothing a
later run (or the suites) could take for a finished deployment.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import TYPE_CHECKING

from ...model.labels import LABEL_NATIVE_WORKER, TAINT_NATIVE_WORKER
from ...model.revision import runtime_revision
from ...model.settings import KEYS_BY_NAME
from ...model.target import Endpoint, Expectations, Identity, KubeSpec, TargetSpec, write_target
from ...model.target import target_document as serialize_target
from ...model.workdir import WorkerRevisionFile, write_secret
from .. import SubstrateUnavailable
from . import fabric
from .addons import (
    NAMESPACE_SLURM,
    RUNTIME_HANDLER,
    SHIM_PATH,
    SLURM_RELEASE,
    flox_runtime_steps,
    identity_home_step,
    pin_check_steps,
    prewarm_steps,
    slinky_operator_steps,
    storage_and_certs_steps,
)
from .containerd import check_flox_runtime, containerd_problems
from .guest import OFFLINE_PREFIX
from .kubeadm import (
    JOIN_COMMAND,
    KUBECONFIG_IN_GUEST,
    Step,
    cluster_steps,
    join_steps,
    kubectl,
    node_role_steps,
    worker_nodes,
)
from .render.values import PARTITION, nodeset_name

if TYPE_CHECKING:
    from ...cluster.kube import KubeClient
    from . import QemuSubstrate


#: Output that means "no network" rather than "broken step": the guest scripts' own message first (their
#: ``fetch``/``apt_or_offline``/``dnf_or_offline`` in provision/guest/_lib.sh), then what kubectl/helm print.
OFFLINE_SIGNS = (
    OFFLINE_PREFIX,
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Cannot download repomd.xml",
    "Failed to download metadata",
    "no such host",
    "i/o timeout",
)


def offline_line(output: str) -> str | None:
    """The first output line that says the network was missing, or None."""
    return next((line.strip() for line in output.splitlines() if any(x in line for x in OFFLINE_SIGNS)), None)


#: check-pins.sh's one line for a pinned version that does not exist upstream.
MISSING_PREFIX = "slurmflox-missing: "


def missing_line(output: str) -> str | None:
    """check-pins.sh's message without its prefix (e.g. ``Slinky chart slurm 1.2.2 does not exist upstream
    (...)``), or None."""
    return next(
        (line.strip()[len(MISSING_PREFIX) :] for line in output.splitlines() if line.startswith(MISSING_PREFIX)),
        None,
    )


def run_step(sub: QemuSubstrate, step: Step) -> bool:
    """Run one step; raise on failure unless the step is soft (then warn). True if it succeeded."""
    sub.progress(f"[{fabric.hostname(step.node)}] {step.title}")
    guest = sub.guest(step.node)
    try:
        if step.script:
            result = guest.script(step.script, *step.args, timeout=step.timeout)
        elif step.put_path:
            result = guest.put(step.put_path, step.content, mode=step.mode)
        else:
            result = guest.root(step.command or "true", timeout=step.timeout)
    finally:
        guest.close()
    if result.ok:
        return True
    if step.soft:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        sub.progress(f"WARNING: {step.title} failed (exit {result.exit_status}); continuing: {' | '.join(tail)}")
        return False
    gone = missing_line(result.stdout + result.stderr)
    if gone is not None:
        raise SubstrateUnavailable(gone)
    sign = offline_line(result.stdout + result.stderr)
    if sign is not None:
        raise SubstrateUnavailable(
            f"offline: {step.title} on {fabric.hostname(step.node)} could not download what it needs ({sign})"
        )
    raise SubstrateUnavailable(f"{step.title} failed on {fabric.hostname(step.node)}:\n{result.describe()}")


FLOX_RUNTIME_MARKER = "/var/lib/slurmflox/flox-runtime.ok"


def verify_flox_runtime(sub: QemuSubstrate, node: int) -> None:
    """Judge node ``node``'s effective containerd configuration (``containerd config dump``, parsed as TOML on
    the host) and only then write the marker that says the Flox runtime is in place there."""
    guest = sub.guest(node)
    try:
        guest.root(f"rm -f {FLOX_RUNTIME_MARKER}").check()
        dump = guest.root("containerd config dump", timeout=60).check().stdout
        verdict = check_flox_runtime(dump, RUNTIME_HANDLER, SHIM_PATH)
        if not verdict.ok:
            raise SubstrateUnavailable(
                f"containerd on {fabric.hostname(node)} does not run runtime '{RUNTIME_HANDLER}' as Flox needs it:\n  "
                + "\n  ".join(verdict.problems)
            )
        marker = f"install -d -m 0755 /var/lib/slurmflox && echo '{RUNTIME_HANDLER} {SHIM_PATH}' >{FLOX_RUNTIME_MARKER}"
        guest.root(marker).check()
    finally:
        guest.close()
    sub.progress(f"[{fabric.hostname(node)}] containerd runtime {RUNTIME_HANDLER} -> {SHIM_PATH} verified")


def verify_containerd(sub: QemuSubstrate, node: int) -> None:
    """After node preparation: containerd's version and runc's cgroup driver, judged on the host from
    ``containerd --version`` and the parsed ``containerd config dump`` (as the Flox runtime is judged)."""
    guest = sub.guest(node)
    try:
        version = guest.root("containerd --version", timeout=60).check().stdout
        dump = guest.root("containerd config dump", timeout=60).check().stdout
    finally:
        guest.close()
    problems = containerd_problems(version, dump)
    if problems:
        raise SubstrateUnavailable(f"containerd on {fabric.hostname(node)}: " + "; ".join(problems))
    sub.progress(f"[{fabric.hostname(node)}] {version.strip()}: runc on the systemd cgroup driver")


def explicit_worker_keys(sub: QemuSubstrate) -> frozenset[str]:
    """Worker keys present in this process's environment (``SLURMFLOX_<KEY>``) or in the persisted
    worker-revision.env."""
    persisted = WorkerRevisionFile(sub.workdir.worker_revision_env).read()
    given = (k for k in ("WORKER_FLOX_ENV",) if KEYS_BY_NAME[k].env in os.environ or k in persisted)
    return frozenset(given) | sub.explicit


def kubeconfig_for_host(admin_conf: str, api_port: int) -> str:
    """node1's admin.conf with the server pointed at the host's loopback forward of the API."""
    text, count = re.subn(r"(server:\s*)https://[^\s]+", rf"\g<1>https://127.0.0.1:{api_port}", admin_conf)
    if count == 0:
        raise SubstrateUnavailable("node1's admin.conf names no API server")
    return text


def target_document(sub: QemuSubstrate) -> dict:
    """The target file of this deployment, through the one serializer (:func:`...target.target_document`)."""
    return serialize_target(target_spec(sub))


def target_spec(sub: QemuSubstrate) -> TargetSpec:
    """What this deployment is, as the suites see it: built from the settings object it was given."""
    s = sub.settings
    # known_hosts pins the node ports and, once the release runs, the login pod's keys (:func:`pin_login_keys`)
    login = Endpoint(
        "127.0.0.1",
        s.login_ssh_port,
        s.test_user if s.test_identity else "root",
        sub.workdir.ssh_key,
        sub.workdir.known_hosts,
    )
    return TargetSpec(
        path=None,
        name=f"qemu ({sub.workdir.root})",
        substrate="qemu",
        workdir=sub.workdir.root,
        login=login,
        admin=dataclasses.replace(login, user="root"),
        kubernetes=KubeSpec(
            sub.workdir.kubeconfig,
            None,
            NAMESPACE_SLURM,
            nodeset_name(SLURM_RELEASE),  # the values declare it: Slinky 1.2 has no default NodeSet
            worker_label=f"{LABEL_NATIVE_WORKER}=true",
            worker_taint=TAINT_NATIVE_WORKER,
        ),
        partition=PARTITION,  # the values declare it: Slinky 1.2 has no default partition
        identity=Identity(s.test_user, s.test_uid, s.test_gid, s.test_supp_group, s.test_supp_gid)
        if s.test_identity
        else None,
        expect=Expectations(s, runtime_revision(s), s.worker_image, s.compute_replicas),
        deployed=s,
    )


#: How long the slurm release may take to run after helm: image pulls plus each worker's first Flox realization
#: (REFERENCE-DESIGN "Pre-warming": a large first realization can outlast kubelet's runtime request timeout).
RELEASE_READY_SECONDS = 1800.0


def release_ready(sub: QemuSubstrate) -> None:
    """Wait for the controller, the login endpoint and the compute NodeSet, then pin the login's host keys."""
    from ...cluster.kube import KubeClient
    from .login import LOGINSET_NAME
    from .pool import NODESET_NAME
    from .ready import CONTROLLER_STATEFULSET, Release, wait_ready

    kube = KubeClient(sub.workdir.kubeconfig, None, NAMESPACE_SLURM)
    login = LOGINSET_NAME if sub.settings.login else None
    took = wait_ready(
        kube, Release(CONTROLLER_STATEFULSET, login, NODESET_NAME), RELEASE_READY_SECONDS, say=sub.progress
    )
    sub.progress(f"slurm release ready ({took:.0f}s)")
    if login:
        pin_login_keys(sub, kube)


def pin_login_keys(sub: QemuSubstrate, kube: KubeClient) -> None:
    """Pin the LoginSet's host keys (from the operator's Secret) for the forwarded login port."""
    from .login import host_keys_secret_name, host_public_keys, pin_host_keys

    name = host_keys_secret_name()
    keys = host_public_keys(kube.secret(name), name)
    pin_host_keys(sub.workdir.known_hosts, "127.0.0.1", sub.settings.login_ssh_port, keys)
    sub.progress(f"login host keys pinned for [127.0.0.1]:{sub.settings.login_ssh_port} from Secret {name}")


def provision_cluster(sub: QemuSubstrate) -> dict:
    """kubeadm, addons, Flox runtime, Slinky, identity, kubeconfig, first slurm chart; returns the target."""
    s = sub.settings
    marker = sub.workdir.root / "k8s" / "provisioned.json"
    marker.unlink(missing_ok=True)
    (sub.workdir.root / "target.yaml").unlink(missing_ok=True)
    t0 = time.monotonic()
    for step in [*pin_check_steps(s), *cluster_steps(s)]:
        run_step(sub, step)
        if step.script == "k8s-node-prep.sh":
            verify_containerd(sub, step.node)
    g1 = sub.guest(1)
    try:
        join = g1.root(JOIN_COMMAND, timeout=120).check().stdout.strip().splitlines()[-1]
    finally:
        g1.close()
    for n in range(2, s.nodes + 1):
        for step in join_steps(n, join):
            run_step(sub, step)
    run_step(
        sub,
        Step(
            1,
            "all nodes Ready",
            command=kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=900s"),
            timeout=960,
        ),
    )
    for step in [*node_role_steps(s), *storage_and_certs_steps(s), *flox_runtime_steps(s)]:
        run_step(sub, step)
    for n in worker_nodes(s):
        verify_flox_runtime(sub, n)
    for step in [
        *slinky_operator_steps(s),
        *prewarm_steps(s, explicit_worker_keys(sub)),
        *identity_home_step(s),
    ]:
        run_step(sub, step)
    g1 = sub.guest(1)
    try:
        admin = g1.root(f"cat {KUBECONFIG_IN_GUEST}").check().stdout
    finally:
        g1.close()
    write_secret(sub.workdir.kubeconfig, kubeconfig_for_host(admin, s.k8s_api_port))
    pool = sub.pool()
    if pool.desired_revision() is None:
        sub.progress("installing the slurm chart (first deployment; its partition starts DOWN until verified)")
        pool.apply(s)
    release_ready(sub)
    target = write_target(target_spec(sub), sub.workdir.root / "target.yaml")
    sub.record(
        "provisioned.json",
        {"kubernetes": s.kubernetes_version, "slinky": s.slinky_version, "seconds": round(time.monotonic() - t0)},
    )
    return target
