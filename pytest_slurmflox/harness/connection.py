"""Live handles onto a target: runners, the Slurm client, Kubernetes, the worker pool, and the capabilities that
decide which checks can be exercised (the rest SKIP naming what is missing).

The suites see a login runner (the unprivileged user over SSH), optionally an administrative runner, a Slurm
client, optionally a Kubernetes client and a worker pool, and what the deployment is expected to run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..base.run import Observer, Result, Runner, SSHRunner
from ..base.sshconnect import Hop
from ..cluster.slurm import SlurmClient
from ..model.abilities import ABILITIES, RuntimeRecord
from ..model.pool import WorkerPool, WorkerView
from ..model.target import Endpoint, Expectations, TargetSpec
from .reach import reach


@dataclass
class Target:
    """Live handles onto a target. Built once per session; cheap to share between tests."""

    spec: TargetSpec
    login: Runner
    admin: Runner | None
    slurm: SlurmClient
    kube: Any | None = None  #: pytest_slurmflox.cluster.kube.KubeClient when the target has Kubernetes
    pool: WorkerView | None = None
    capabilities: frozenset[str] = frozenset()
    missing: Mapping[str, str] = field(default_factory=dict)  #: capability -> why it is missing
    #: One line when the login endpoint could not be reached at all (reach.py): then no check can run.
    unreachable: str | None = None

    @property
    def expect(self) -> Expectations:
        return self.spec.expect

    @property
    def records(self) -> RuntimeRecord | None:
        """The runtime record the workers are judged against (capability ``runtime-record``): the target file's
        declared ``runtime`` (a customer's record of the pinned generation) when it has one, else the pool's."""
        if self.spec.runtime is not None:
            from ..model.declaredruntime import DeclaredRecord

            mode = self.expect.settings.worker_flox_activate_mode
            return DeclaredRecord(self.spec.runtime, self.expect.environment, mode)
        return self.pool if isinstance(self.pool, RuntimeRecord) else None

    def why_missing(self, capability: str) -> str | None:
        """None if the capability is present, otherwise the reason it is not."""
        if capability in self.capabilities:
            return None
        return self.missing.get(capability, f"target {self.spec.name!r} lacks capability {capability!r}")

    def close(self) -> None:
        for runner in (self.login, self.admin):
            if runner is not None:
                runner.close()


def login_runner(endpoint: Endpoint, observer: Observer | None, where: str = "") -> SSHRunner:
    """The runner of an endpoint: its address, user, key (None: the agent's) and known_hosts, through its ProxyJump
    hops; ``where`` (default ``login(host:port)``, ``via`` the hops) names it in the evidence."""
    via = " via " + ",".join(f"{j.host}:{j.port}" for j in endpoint.jumps) if endpoint.jumps else ""
    return SSHRunner(
        host=endpoint.host,
        port=endpoint.port,
        user=endpoint.user,
        key_file=endpoint.key,
        known_hosts=endpoint.known_hosts,
        observer=observer,
        where=where or f"login({endpoint.host}:{endpoint.port}{via})",
        jumps=tuple(Hop(j.host, j.port, j.user, j.key, j.known_hosts) for j in endpoint.jumps),
    )


def _probe_slurm(slurm: SlurmClient, caps: set[str], missing: dict[str, str]) -> None:
    try:
        slurm.ping()
        caps.add("slurm")
    except Exception as exc:  # the reason is kept and shown on every check that needs Slurm
        missing["slurm"] = f"slurmctld not reachable from the login endpoint: {exc}"


def _probe_admin(admin: Runner | None, caps: set[str], missing: dict[str, str]) -> None:
    if admin is None:
        missing["admin"] = "the target file names no admin login"
        return
    res: Result | None = None
    try:
        res = admin.run("id -u")
    except Exception as exc:
        missing["admin"] = f"administrative login failed: {exc}"
    if res is not None and res.ok and res.stdout.strip() == "0":
        caps.add("admin")
    elif "admin" not in missing:
        missing["admin"] = "administrative login is not root"


def _probe_kubernetes(spec: TargetSpec, caps: set[str], missing: dict[str, str]) -> Any:
    """The Kubernetes client where the target names one (None otherwise), with the capabilities it proves."""
    if spec.kubernetes is None:
        reason = f"target {spec.name!r} ({spec.substrate}) has no Kubernetes API"
        missing["kubernetes"] = reason
        missing["flox-shim"] = reason + "; the Flox containerd shim exists only on Kubernetes nodes"
        return None
    from ..cluster.kube import KubeClient

    kube = KubeClient(spec.kubernetes.kubeconfig, spec.kubernetes.context, spec.kubernetes.namespace)
    if not kube.reachable():
        missing["kubernetes"] = "the Kubernetes API is not reachable with the given kubeconfig"
        missing["flox-shim"] = missing["kubernetes"]
        return kube
    caps.add("kubernetes")
    if kube.runtime_class("flox") is not None:
        caps.add("flox-shim")
    else:
        missing["flox-shim"] = "no RuntimeClass 'flox' in the cluster"
    return kube


def _probe_pool(pool: WorkerView | None, caps: set[str], missing: dict[str, str]) -> None:
    """``worker-pool``, ``worker-owner`` and one capability per ability the pool declares (abilities.py)."""
    if pool is None:
        reason = "nothing on this target lists the workers (no Kubernetes, no substrate)"
        for capability in ("worker-pool", "worker-owner", *ABILITIES):
            missing[capability] = reason
        return
    caps.add("worker-pool")
    if isinstance(pool, WorkerPool):
        caps.add("worker-owner")
    else:
        missing["worker-owner"] = "the workers are only read on this target (a customer's NodeSet), never changed"
    for capability, (ability, why_not) in ABILITIES.items():
        if isinstance(pool, ability):
            caps.add(capability)
        else:
            missing[capability] = why_not


def probe_runtime(spec: TargetSpec, caps: set[str], missing: dict[str, str]) -> None:
    """``runtime-record`` when the target file declares a ``runtime`` section (declaredruntime.py): the customer's
    record of the pinned generation, whatever the pool keeps (after :func:`_probe_pool`)."""
    if spec.runtime is not None:
        caps.add("runtime-record")
        missing.pop("runtime-record", None)


def _probe_directory(spec: TargetSpec, runner: Runner, caps: set[str], missing: dict[str, str]) -> None:
    """``directory``: declared, and it answers ldapsearch from the admin endpoint (else the login one)."""
    if spec.directory is None:
        missing["directory"] = f"target {spec.name!r} declares no directory service (directory: uri, base, user)"
        return
    from ..model.directory import probe

    try:
        why = probe(runner, spec.directory)
    except Exception as exc:
        why = f"ldapsearch could not run: {exc}"
    if why is None:
        caps.add("directory")
    else:
        missing["directory"] = why


def _probe_accounting(spec: TargetSpec, login: Runner, caps: set[str], missing: dict[str, str]) -> None:
    """accounting: present when the target file declares it and slurmdbd answers; the reason otherwise
    (undeclared: the group SKIPs naming it; declared but silent: the suites FAIL with this reason)."""
    if spec.accounting is None:
        missing["accounting"] = f"target {spec.name!r} declares no accounting (slurmdbd)"
        return
    try:
        res = login.run("sacctmgr -n -P show cluster format=cluster", timeout=30)
        if res.ok and res.stdout.strip():
            caps.add("accounting")
        else:
            missing["accounting"] = f"slurmdbd does not answer sacctmgr on the login endpoint: {res.describe()}"
    except Exception as exc:
        missing["accounting"] = f"slurmdbd does not answer sacctmgr on the login endpoint: {exc}"


def _probe_rest(spec: TargetSpec, caps: set[str], missing: dict[str, str]) -> None:
    """rest: present when the target file declares it and slurmrestd answers; the reason otherwise."""
    if spec.rest is None:
        missing["rest"] = f"target {spec.name!r} declares no REST API (slurmrestd)"
        return
    import httpx

    try:
        httpx.get(spec.rest.url + "/openapi/v3", timeout=10)
        caps.add("rest")
    except httpx.HTTPError as exc:
        missing["rest"] = f"slurmrestd at {spec.rest.url} does not answer: {exc!r}"


def connect(
    spec: TargetSpec,
    *,
    observer: Observer | None = None,
    pool_factory: Callable[[TargetSpec, Any], WorkerView | None] | None = None,
) -> Target:
    """Open runners and clients for a target and work out its capabilities.

    The login endpoint is reached once first (reach.py): unreachable, :attr:`Target.unreachable` says why in one
    line and nothing more is asked of it. Capabilities: ``login`` (an SSH session opens), ``slurm`` (login reaches
    slurmctld), ``admin`` (root access for drain/resume),
    ``kubernetes`` (API reachable), ``flox-shim`` (a Kubernetes RuntimeClass ``flox`` exists),
    ``worker-pool`` (something lists the workers), ``worker-owner`` (it can also change them: the lifecycle
    groups need it), the pool's abilities (:mod:`~pytest_slurmflox.model.abilities`: ``node-admin``, root on the
    Kubernetes nodes of our qemu deployment; ``isolated-worker``, ``service-restart``, ``runtime-record``,
    ``nix-store-record`` and ``directory-changes``, the local substrate's; ``runtime-record`` also when the target
    file declares a ``runtime`` section), ``accounting`` and ``rest`` (declared in the target file and answering).
    """
    login = login_runner(spec.login, observer)
    admin = login_runner(spec.admin, observer) if spec.admin else None
    slurm = SlurmClient(user=login, admin=admin, partition=spec.partition)
    caps: set[str] = set()
    missing: dict[str, str] = {}

    def on_login(caps: set[str], missing: dict[str, str]) -> None:
        _probe_rest(spec, caps, missing)
        away = reach(login)
        if away is not None:  # one attempt; every capability asked of the login carries its one reason
            missing["login"] = missing["slurm"] = away.line()
            if spec.accounting is not None:
                missing["accounting"] = away.line()
            else:
                _probe_accounting(spec, login, caps, missing)  # undeclared: says so without asking
            return
        caps.add("login")
        _probe_slurm(slurm, caps, missing)
        _probe_accounting(spec, login, caps, missing)

    def on_admin(caps: set[str], missing: dict[str, str]) -> None:
        _probe_admin(admin, caps, missing)
        _probe_directory(spec, admin if admin is not None and "admin" in caps else login, caps, missing)

    # The login and the admin endpoint (and Kubernetes, here) are asked at once: in a row, their round trips were
    # 0.75 s of every process's first check. Each probe keeps its own findings; merged in a fixed order.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="sfx-probe") as probes:
        answers = [probes.submit(_probed, probe) for probe in (on_login, on_admin)]
        kube = _probe_kubernetes(spec, caps, missing)
        pool = pool_factory(spec, kube) if pool_factory else None
        _probe_pool(pool, caps, missing)
        probe_runtime(spec, caps, missing)
        for answer in answers:
            found, why = answer.result()
            caps |= found
            missing.update(why)
    unreachable = missing["login"] if "login" not in caps else None
    return Target(spec, login, admin, slurm, kube, pool, frozenset(caps), missing, unreachable)


def _probed(probe: Callable[[set[str], dict[str, str]], None]) -> tuple[set[str], dict[str, str]]:
    caps: set[str] = set()
    missing: dict[str, str] = {}
    probe(caps, missing)
    return caps, missing
