"""Target: the cluster the suites run against, described by a target file and nothing else.

A substrate writes a target file when it brings a cluster up (through :func:`target_document`, the one
serializer); a customer writes one by hand for an existing cluster. Either way the suites see the same thing (see
:mod:`~pytest_slurmflox.harness.connection` for the live handles): what the deployment is expected to run, where its
login is, and, for a substrate-backed target, the settings it was deployed with.

Target file (YAML)::

    version: 1
    name: site-a                    # free text, shown in reports
    substrate: existing             # local | qemu | existing  (every key: schemas/target.json)
    workdir: /abs/operator          # substrate-backed targets only
    login: {host: login.example, port: 22, user: alice, key: ~/.ssh/id_ed25519, known_hosts: ~/.ssh/known_hosts}
                                    # + ssh_config: path | none (default ~/.ssh/config when present), proxy_jump:
                                    # "[user@]host[:port],..."; host is looked up there (HostName, Port, User,
                                    # IdentityFile, ProxyJump, UserKnownHostsFile), a value given here wins;
                                    # no key anywhere: the SSH agent's keys (endpoint.py)
    admin: {user: root}             # optional; every other login key unless given
    kubernetes: {kubeconfig: ~/.kube/config, context: prod, namespace: slurm, nodeset: slurm-compute}  # optional
                                    # + worker_label: key=value, worker_taint: key[=value]:Effect (T10 placement)
                                    # + node_debug_image: repo:tag (T1 reads nodes via kubectl-debug pods)
                                    # + pod_exec: true (the run may exec into worker pods: a refusal FAILs)
    slurm: {partition: all, busy_timeout: 600, mpi: pmix}  # + account, qos, reservation, extra_args (siteaccess.py);
                                    # busy_timeout: seconds a step waits for workers others' jobs hold (busy.py)
    identity: {user: alice, uid: 1234, gid: 1234, supp_group: hpc, supp_gid: 2000}   # optional
    directory: {uri: ldap://ldap.example/, base: dc=example,dc=org, user: alice, groups: [hpc]}  # optional (TD,
                                    # pytest_slurmflox/model/directory.py: also bind_dn, bind_password_file, modify)
    expect:                         # what the deployment should run; + limits: how far the cluster may loosen a
                                    # job's limits (declaredlimits.py)
      revision: sha256:...          # optional; computed from settings when absent
      image: repo:tag@sha256:...    # optional; WORKER_IMAGE otherwise
      replicas: 2
      settings: {WORKER_FLOX_ENV: myorg/hpc, WORKER_FLOX_GENERATION: "17", ...}
    deployment:                     # written by a substrate: every setting it deployed with
      settings: {NODES: "3", LOGIN_SSH_PORT: "2222", ...}
    accounting: {account: hpc, ...} # optional services: see capabilities.py
    rest: {url: https://..., token_command: scontrol token}
    flox: {lock_file: hpc-17.lock}  # optional: the pinned generation's manifest.lock (T2 on Kubernetes, floxlock.py)
    runtime: {realized_path: /nix/store/..., path: [...], ...}  # optional: what workers realize (declaredruntime.py)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import busy, capabilities, targetschema
from .capabilities import AccountingSpec, RestSpec
from .declared import declared_keys
from .declaredlimits import DeclaredLimits, limits_document, parse_limits
from .declaredruntime import DeclaredRuntime, parse_runtime, runtime_document
from .directory import Directory, parse_directory
from .endpoint import Endpoint, EndpointError, endpoint_document, parse_endpoint
from .floxlock import lock_file
from .mpiplugin import DEFAULT_MPI_PLUGIN, parse_mpi_plugin
from .nodedebug import parse_image
from .revision import runtime_revision
from .settings import KEYS, WORKER_KEYS, Settings, SettingsError, resolve, to_raw
from .siteaccess import SiteAccess, parse_site_access, slurm_document
from .workdir import atomic_write


class TargetError(ValueError):
    """The target file is unusable; the message names the field."""


@dataclass(frozen=True)
class KubeSpec:
    kubeconfig: Path | None
    context: str | None
    namespace: str
    nodeset: str
    login_set: str | None = None
    #: The worker pool's node label (``key=value``) and taint (``key[=value]:Effect``) T10's placement check expects;
    #: a customer target declares its own, a substrate's target the reference's.
    worker_label: str | None = None
    worker_taint: str | None = None
    #: The image of a privileged node debug pod (``kubectl debug node/...``) T1 may run to read a node's containerd
    #: configuration (nodedebug.py); undeclared on a customer target, that check is NOT RUN naming the key.
    node_debug_image: str | None = None
    #: The target declares that the run may exec into the worker pods (``create pods/exec``): a refused exec is then
    #: a FAIL naming it; undeclared, a check that needs it is NOT RUN naming the verb, the resource and the user.
    pod_exec: bool = False


@dataclass(frozen=True)
class Identity:
    user: str
    uid: int
    gid: int
    supp_group: str | None
    supp_gid: int | None


@dataclass(frozen=True)
class Expectations:
    """What the deployment is supposed to run: the settings it was deployed with and their revision."""

    settings: Settings
    revision: str
    image: str
    replicas: int

    @property
    def environment(self) -> str:
        return self.settings.worker_flox_ref


@dataclass(frozen=True)
class TargetSpec:
    path: Path | None
    name: str
    substrate: str
    workdir: Path | None
    login: Endpoint
    admin: Endpoint | None
    kubernetes: KubeSpec | None
    partition: str
    identity: Identity | None
    expect: Expectations
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)
    slurm_version: str | None = None  #: what the substrate installed (informational)
    #: The full settings a substrate deployed with (substrate-backed targets only): what a test session needs
    #: to operate the deployment's worker pool, read from the target instead of resolving settings again.
    deployed: Settings | None = None
    limitations: Mapping[str, str] = field(default_factory=dict)  #: what it cannot enforce: its checks SKIP, naming why
    #: The keys the target file declares, as its own paths (declared.py); None for a target a substrate wrote,
    #: whose settings are all ours (a customer's expectations are declared, never defaulted).
    declared: frozenset[str] | None = None
    directory: Directory | None = None  #: the directory service (group TD), when declared
    accounting: AccountingSpec | None = None  #: slurmdbd behind the cluster (TA)
    rest: RestSpec | None = None  #: slurmrestd (TR)
    flox_lock: Path | None = None  #: the pinned generation's lock, obtained off-cluster (``flox.lock_file``)
    runtime: DeclaredRuntime | None = None  #: what the workers must realize, declared (``runtime``)
    site: SiteAccess = field(default_factory=SiteAccess)  #: account, QOS, reservation, extra options of every job
    busy_timeout: float | None = None  #: ``slurm.busy_timeout`` (busy.py), None when the file does not say
    mpi: str = DEFAULT_MPI_PLUGIN  #: ``slurm.mpi``: the MPI plugin T6 and TB launch with (mpiplugin.py)
    #: ``expect.limits``: how far the cluster may loosen a job's limits (declaredlimits.py; Slurm's defaults)
    limits: DeclaredLimits = field(default_factory=DeclaredLimits)

    def declares(self, capability: str) -> bool:
        """Whether the target file declares an optional service capability (its group is then required)."""
        declared = {"directory": self.directory, "accounting": self.accounting, "rest": self.rest}
        return declared.get(capability) is not None

    def declares_key(self, path: str) -> bool:
        """Whether the target file gives a non-empty value at ``path`` (dotted, e.g. ``expect.performance``)."""
        value: Any = self.raw
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return bool(value)

    @property
    def performance(self) -> Mapping[str, Any]:
        """``expect.performance``: metric -> its declared reference (judges/baselines.py), empty when undeclared."""
        return (self.raw.get("expect") or {}).get("performance") or {}


def _limitations(doc: Mapping[str, Any]) -> dict[str, str]:
    value = doc.get("limitations") or {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) and v for v in value.values()):
        raise TargetError("target.limitations must map each limitation to the reason (text)")
    return {str(k): v for k, v in value.items()}


def _need(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(doc, Mapping) or doc.get(key) in (None, ""):
        raise TargetError(f"{where}.{key} is required")
    return doc[key]


def _path(value: Any, base: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _endpoints(doc: Mapping[str, Any], base: Path) -> tuple[Endpoint, Endpoint | None]:
    """The login, and the admin login (root unless named), which shares every key of the login it does not give."""
    try:
        login = parse_endpoint(_need(doc, "login", "target"), base, "login")
        if not doc.get("admin"):
            return login, None
        if not isinstance(doc["admin"], Mapping):
            raise TargetError("target.admin must be a mapping")
        shared = {k: v for k, v in doc["login"].items() if k != "user"}
        return login, parse_endpoint({**shared, "user": "root", **doc["admin"]}, base, "admin")
    except EndpointError as exc:
        raise TargetError(str(exc)) from None


def _kubernetes(doc: Mapping[str, Any], base: Path) -> KubeSpec | None:
    if not doc.get("kubernetes"):
        return None
    k = doc["kubernetes"]
    return KubeSpec(
        kubeconfig=_path(k["kubeconfig"], base) if k.get("kubeconfig") else None,
        context=k.get("context"),
        namespace=str(k.get("namespace", "slurm")),
        nodeset=str(k.get("nodeset", "slurm-worker-compute")),
        login_set=k.get("loginset"),
        worker_label=str(k["worker_label"]) if k.get("worker_label") else None,
        worker_taint=str(k["worker_taint"]) if k.get("worker_taint") else None,
        node_debug_image=_checked(parse_image, k.get("node_debug_image")),
        pod_exec=bool(k.get("pod_exec", False)),
    )


def _checked(parse: Any, value: Any) -> Any:
    """``parse(value)`` (None for an absent value); its ValueError, which names the key, is a TargetError."""
    try:
        return None if value in (None, "") else parse(value)
    except ValueError as exc:
        raise TargetError(str(exc)) from None


def _identity(doc: Mapping[str, Any]) -> Identity | None:
    if not doc.get("identity"):
        return None
    i = doc["identity"]
    return Identity(
        user=str(_need(i, "user", "identity")),
        uid=int(_need(i, "uid", "identity")),
        gid=int(_need(i, "gid", "identity")),
        supp_group=i.get("supp_group"),
        supp_gid=int(i["supp_gid"]) if i.get("supp_gid") is not None else None,
    )


def _expectations(doc: Mapping[str, Any], substrate: str) -> Expectations:
    """``expect``: the worker runtime keys parsed once, here; revision computed from them when not given."""
    expect_doc = doc.get("expect") or {}
    raw_settings = {str(k): str(v) for k, v in (expect_doc.get("settings") or {}).items()}
    unknown = sorted(set(raw_settings) - set(WORKER_KEYS) - {"COMPUTE_REPLICAS"})
    if unknown:
        raise TargetError(f"expect.settings.{unknown[0]} is not a worker runtime setting")
    try:
        settings = resolve(cli=raw_settings, substrate=substrate).settings
    except SettingsError as exc:
        raise TargetError(f"expect.settings: {exc}") from None
    image = str(expect_doc.get("image") or settings.worker_image)
    return Expectations(
        settings=settings,
        revision=str(expect_doc.get("revision") or runtime_revision(settings, image=image)),
        image=image,
        replicas=int(expect_doc.get("replicas", settings.compute_replicas)),
    )


def _deployed(doc: Mapping[str, Any], substrate: str) -> Settings | None:
    raw = (doc.get("deployment") or {}).get("settings")
    if not raw:
        return None
    try:
        return resolve(cli={str(k): str(v) for k, v in raw.items()}, substrate=substrate).settings
    except SettingsError as exc:
        raise TargetError(f"deployment.settings: {exc}") from None


def parse_target(doc: Mapping[str, Any], *, path: Path | None = None) -> TargetSpec:
    """Validate a target document; every problem is a :class:`TargetError` naming the field."""
    if not isinstance(doc, Mapping):
        raise TargetError("a target file must be a YAML mapping")
    _checked(targetschema.check, doc)  # every key, type, choice and required key (schemas/target.json)
    base = path.parent if path else Path.cwd()
    substrate = str(doc.get("substrate", "existing"))
    login, admin = _endpoints(doc, base)
    return TargetSpec(
        path=path,
        name=str(doc.get("name", substrate)),
        substrate=substrate,
        workdir=_path(doc["workdir"], base) if doc.get("workdir") else None,
        login=login,
        admin=admin,
        kubernetes=_kubernetes(doc, base),
        partition=str((doc.get("slurm") or {}).get("partition", "all")),
        identity=_identity(doc),
        expect=_expectations(doc, substrate),
        raw=dict(doc),
        slurm_version=(doc.get("slurm") or {}).get("version"),
        deployed=_deployed(doc, substrate),
        limitations=_limitations(doc),
        directory=_checked(parse_directory, doc.get("directory")),
        flox_lock=_checked(lambda v: lock_file(v, base), doc.get("flox")),
        runtime=_checked(parse_runtime, doc.get("runtime")),
        site=_checked(parse_site_access, doc.get("slurm") or {}),
        busy_timeout=_checked(busy.parse_busy_timeout, (doc.get("slurm") or {}).get("busy_timeout")),
        mpi=_checked(parse_mpi_plugin, (doc.get("slurm") or {}).get("mpi")) or DEFAULT_MPI_PLUGIN,
        limits=_checked(parse_limits, (doc.get("expect") or {}).get("limits")) or DeclaredLimits(),
        **_services(doc),
        declared=declared_keys(doc) if substrate == "existing" else None,
    )


def _services(doc: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return {"accounting": capabilities.parse_accounting(doc), "rest": capabilities.parse_rest(doc)}
    except capabilities.CapabilityError as exc:
        raise TargetError(str(exc)) from None


def expect_document(expect: Expectations) -> dict[str, Any]:
    """The ``expect`` section: the worker runtime keys (WORKER_IMAGE as the image the owner runs), revision,
    image and replicas."""
    settings = worker_settings_document(expect.settings, expect.image)
    return {"revision": expect.revision, "image": expect.image, "replicas": expect.replicas, "settings": settings}


def worker_settings_document(settings: Settings, image: str) -> dict[str, str]:
    """The worker runtime keys as text, with WORKER_IMAGE the image the owner really runs (on the local substrate
    the node image digest)."""
    raw = {key: to_raw(getattr(settings, key.lower())) for key in WORKER_KEYS}
    raw["WORKER_IMAGE"] = image
    return raw


def target_document(spec: TargetSpec) -> dict[str, Any]:
    """The one serializer of a target file: what :func:`parse_target` reads back into an equal spec."""
    doc: dict[str, Any] = {
        "version": 1,
        "name": spec.name,
        "substrate": spec.substrate,
        "workdir": str(spec.workdir) if spec.workdir else None,
        "login": endpoint_document(spec.login),
        "admin": None,
        "kubernetes": None,
        "slurm": slurm_document(spec.partition, spec.slurm_version, spec.site, spec.busy_timeout, spec.mpi),
        "expect": expect_document(spec.expect),
    }
    if spec.admin is not None:  # an admin on the login's host, port and key is written as just its user
        same_host = dataclasses.replace(spec.login, user=spec.admin.user) == spec.admin
        doc["admin"] = {"user": spec.admin.user} if same_host else endpoint_document(spec.admin)
    if spec.kubernetes is not None:
        kube = spec.kubernetes
        doc["kubernetes"] = {
            "kubeconfig": str(kube.kubeconfig) if kube.kubeconfig else None,
            "context": kube.context,
            "namespace": kube.namespace,
            "nodeset": kube.nodeset,
        }
        if kube.login_set:
            doc["kubernetes"]["loginset"] = kube.login_set
        for key in ("worker_label", "worker_taint", "node_debug_image", "pod_exec"):
            if getattr(kube, key):
                doc["kubernetes"][key] = getattr(kube, key)
    if limits_document(spec.limits):
        doc["expect"]["limits"] = limits_document(spec.limits)
    if spec.identity is not None:
        doc["identity"] = dataclasses.asdict(spec.identity)  # user, uid, gid, supp_group, supp_gid
    if spec.limitations:
        doc["limitations"] = dict(spec.limitations)
    if spec.directory is not None:
        doc["directory"] = {k: v for k, v in dataclasses.asdict(spec.directory).items() if v is not None}
        doc["directory"]["groups"] = list(spec.directory.groups)
    if spec.accounting is not None:
        doc["accounting"] = capabilities.accounting_document(spec.accounting)
    if spec.rest is not None:
        doc["rest"] = capabilities.rest_document(spec.rest)
    if spec.flox_lock is not None:
        doc["flox"] = {"lock_file": str(spec.flox_lock)}
    if spec.runtime is not None:
        doc["runtime"] = runtime_document(spec.runtime)
    if spec.deployed is not None:
        doc["deployment"] = {"settings": {key.key: to_raw(getattr(spec.deployed, key.field)) for key in KEYS}}
    return doc


def write_target(spec: TargetSpec, path: Path) -> dict[str, Any]:
    """Write ``spec`` to ``path`` (atomically) and return the document written."""
    doc = target_document(spec)
    atomic_write(path, yaml.safe_dump(doc, sort_keys=False))
    return doc


def write_runtime(path: Path, settings: Settings, revision: str, image: str) -> None:
    """Point a written target file at ``settings``' worker runtime (expectations, and the deployed settings'
    worker keys), keeping every other field as ``up`` wrote it: the pool of a deployment calls this after
    ``apply``. Read and written here, through the one serializer, so no other module edits a target's YAML.
    A missing or unreadable file is left alone (nothing was deployed through it)."""
    try:
        spec = load_target(path)
    except TargetError:
        return
    deployed = spec.deployed
    if deployed is not None:  # the deployment now runs this runtime
        deployed = dataclasses.replace(deployed, **{k.lower(): getattr(settings, k.lower()) for k in WORKER_KEYS})
    expect = Expectations(settings, revision, image, spec.expect.replicas)
    write_target(dataclasses.replace(spec, expect=expect, deployed=deployed), path)


def load_target(path: Path) -> TargetSpec:
    """The target file at ``path``, parsed; :class:`TargetError` in one line (missing, not YAML, schema)."""
    return parse_target(_checked(targetschema.read_document, path), path=path)
