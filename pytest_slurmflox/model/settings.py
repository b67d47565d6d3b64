"""Settings: every key the reference design names, its default, its precedence and its validation.

One place decides what a setting is. Each key has exactly one spelling per source:

    CLI flag      --slurmflox-<key in lower case, '_' -> '-'>   e.g. --slurmflox-worker-flox-generation=18
    environment   SLURMFLOX_<KEY>                               e.g. SLURMFLOX_WORKER_FLOX_GENERATION=18
    ini key       slurmflox_<key in lower case>                 e.g. slurmflox_worker_flox_generation = 18
    files         <KEY> (worker-revision.env, a target file's expect.settings)   e.g. WORKER_FLOX_GENERATION=18

The environment of a login node or a CI job is not ours: a bare ``WORKDIR``, ``NODES`` or ``MEM`` there belongs
to something else and is never read; only the ``SLURMFLOX_`` spelling is.

Precedence, highest first (the same for every key):

    1. CLI flag
    2. environment variable (SLURMFLOX_<KEY>)
    3. persisted <WORKDIR>/worker-revision.env (worker runtime keys only)
    4. config file / ini key
    5. substrate default (the local substrate ships its own runtime environments), then built-in default

Only values given on the CLI or in the environment are *explicit*. Explicit worker runtime keys are what
``workdir.WorkerRevisionFile`` records, so a later bare ``up`` cannot silently revert a deployed runtime.
Validation happens before anything is written; a bad value raises ``SettingsError`` naming the key, the
value and the rule.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .parsers import (
    FLOX_ENV_PATTERN,
    IMAGE_PATTERN,
    PROTECTED_CONTAINERS,
    SIZE_PATTERN,
    USER_PATTERN,
    SettingsError,
    boolean,
    choice,
    cidr,
    env_exports,
    home_path,
    matching,
    one_line,
    path,
    skip_containers,
    whole,
)

__all__ = ["PROTECTED_CONTAINERS", "Resolved", "Settings", "SettingsError", "SubstrateOptions", "resolve"]

#: Version of the task-profile format written by provision/task-profile-init.sh. It takes part in the
#: runtime revision: a worker with another profile schema is another compatibility cohort.
TASK_PROFILE_SCHEMA = "slurmflox-task-profile/1"

DEFAULT_WORKER_IMAGE = (
    "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"
    "@sha256:f06ab7b1ce18b3d59c54c8c6f6b03698a28973d4d8fb30985bd0dfd673bd6dd9"
)


# --------------------------------------------------------------------------------------------- keys
def _key(
    default: str,
    parse: Callable[[str, str], Any],
    help: str,
    *,
    worker: bool = False,
    empty_ok: bool = False,
) -> Any:
    """Declare a setting. ``default`` is the raw string form, parsed like any other source."""
    return field(
        default=None,
        metadata={"default": default, "parse": parse, "help": help, "worker": worker, "empty_ok": empty_ok},
    )


@dataclass(frozen=True)
class Settings:
    """Resolved, validated settings. Build with :func:`resolve`; field names are the keys in lower case."""

    # substrate
    workdir: Path = _key("operator", path, "deployment work dir (state, keys, caches)")
    nodes: int = _key("3", whole(1, 9), "VM count: node1 is infrastructure, nodes 2..NODES are native workers")
    vcpus: int = _key("8", whole(1, 256), "vCPUs per VM")
    mem: int = _key("8192", whole(1024, 1048576), "MiB of RAM per VM")
    disk_size: str = _key("40G", matching(SIZE_PATTERN, "must be a size like 40G"), "VM overlay disk size")
    shared_home: bool = _key("1", boolean, "export /home from node1 over NFS to the other nodes")
    ssh_port_base: int = _key("2240", whole(1024, 65525), "VM N is reachable on 127.0.0.1:SSH_PORT_BASE+N")
    k8s_api_port: int = _key("6444", whole(1024, 65535), "host port forwarded to the Kubernetes API")
    pod_cidr: str = _key("10.244.0.0/16", cidr, "Kubernetes pod network")
    svc_cidr: str = _key("10.96.0.0/12", cidr, "Kubernetes service network")
    local_suite: str = _key(
        "trixie", choice("trixie", "bookworm", "sid"), "Debian suite of the local substrate's node image"
    )
    local_accept_expired_release: bool = _key(
        "0",
        boolean,
        "build the local node image from a mirror snapshot whose suite Release file has expired (apt's "
        "check-valid-until=no; recorded in the image record)",
    )
    # software pins
    kubernetes_version: str = _key("1.36.3", one_line, "Kubernetes (kubeadm, kubelet, kubectl)")
    flannel_version: str = _key("v0.28.9", one_line, "flannel CNI")
    # REFERENCE-DESIGN names Flox 1.15.0 and Slinky 1.2.2; upstream's newest releases are flox/flox v1.14.1 and
    # SlinkyProject/slurm-operator v1.2.1 (docs/reference-stack.md, "Pinned versions"), so the defaults are those.
    flox_version: str = _key("1.14.1", one_line, "Flox RPM on the Kubernetes nodes")
    flox_shim_installer: str = _key(
        "flox/containerd-shim-flox-installer", one_line, "Flox containerd shim installer image"
    )
    slinky_version: str = _key("1.2.1", one_line, "Slinky slurm-operator and slurm charts")
    cert_manager_version: str = _key("v1.19.2", one_line, "cert-manager")
    local_path_version: str = _key("v0.0.31", one_line, "local-path-provisioner")
    expected_slurm: str = _key("26.05.4", one_line, "Slurm version the target is expected to run")
    base_image: str = _key("AlmaLinux-10-GenericCloud-10.2-20260817.0.x86_64.qcow2", one_line, "VM base cloud image")
    # worker runtime (COMPUTE_REPLICAS is not part of the runtime revision)
    # up to Slurm's node limit (MAX_SLURM_NODES, slurm/slurm.h): a NodeSet or partition may be that large; the
    # local substrate refuses more than this host holds (substrates/local/capacity.py)
    compute_replicas: int = _key("2", whole(1, 65536), "slurmd worker pods (local: worker nodes)")
    worker_flox_env: str = _key(
        "flox/echoip",
        matching(FLOX_ENV_PATTERN, "must be a Flox environment owner/name"),
        "worker Flox environment",
        worker=True,
    )
    worker_flox_generation: int = _key(
        "2", whole(1, 10**9), "pinned generation of WORKER_FLOX_ENV (a positive integer)", worker=True
    )
    worker_flox_activate_mode: str = _key("run", choice("run", "dev"), "Flox activation mode", worker=True)
    worker_flox_skip_containers: tuple[str, ...] = _key(
        "logfile",
        skip_containers,
        "containers left on the stock runtime (comma-separated)",
        worker=True,
        empty_ok=True,
    )
    worker_env_exports: tuple[str, ...] = _key(
        "",
        env_exports,
        "activation-derived variables allowed into tasks (comma-separated)",
        worker=True,
        empty_ok=True,
    )
    worker_path_precedence: str = _key(
        "prepend",
        choice("prepend", "append"),
        "Flox PATH entries before (prepend) or after the task's",
        worker=True,
    )
    worker_cpus: int = _key("6", whole(1, 1024), "CPUs each worker declares to Slurm", worker=True)
    worker_mem_mb: int = _key("6144", whole(64, 4194304), "MiB each worker declares to Slurm", worker=True)
    worker_home_path: str = _key(
        "/home", home_path, "shared home mounted into the workers (empty: none)", worker=True, empty_ok=True
    )
    worker_image: str = _key(
        DEFAULT_WORKER_IMAGE,
        matching(IMAGE_PATTERN, "must be an immutable reference repository:tag@sha256:<64 hex digits>"),
        "immutable slurmd worker image",
        worker=True,
    )
    # login endpoint
    login: bool = _key("1", boolean, "deploy the user-facing login endpoint")
    login_nodeport: int = _key("32222", whole(30000, 32767), "Kubernetes NodePort of the login service")
    login_ssh_port: int = _key("2222", whole(1024, 65535), "host port of the login endpoint's SSH")
    # test identity
    test_identity: bool = _key("1", boolean, "create the unprivileged acceptance identity on the login endpoint")
    test_user: str = _key("slurmtest", matching(USER_PATTERN, "must be a lower-case POSIX user name"), "test user")
    test_uid: int = _key("4001", whole(1000, 60000), "test user's uid")
    test_gid: int = _key("4001", whole(1000, 60000), "test user's primary gid")
    test_supp_group: str = _key(
        "sharedgrp", matching(USER_PATTERN, "must be a lower-case POSIX group name"), "test user's supplementary group"
    )
    test_supp_gid: int = _key("4002", whole(1000, 60000), "gid of the supplementary group")

    @property
    def worker_flox_ref(self) -> str:
        """The pinned environment reference ``owner/name:generation``, as Flox annotations spell it."""
        return f"{self.worker_flox_env}:{self.worker_flox_generation}"

    def replace(self, **changes: Any) -> Settings:
        """A copy with typed changes, validated again (used by lifecycle tests and substrates)."""
        raw = {k.upper(): to_raw(v) for k, v in changes.items()}
        return resolve(cli={**{name.upper(): to_raw(getattr(self, name)) for name in KEYS_BY_FIELD}, **raw}).settings


@dataclass(frozen=True)
class KeySpec:
    """One setting's name in every source, its default, and how it is parsed."""

    key: str
    field: str
    default: str
    parse: Callable[[str, str], Any]
    help: str
    worker: bool
    empty_ok: bool

    @property
    def env(self) -> str:
        """The environment variable: the key with our prefix (a bare ``KEY`` in the environment is not ours)."""
        return f"SLURMFLOX_{self.key}"

    @property
    def ini(self) -> str:
        return f"slurmflox_{self.field}"

    @property
    def flag(self) -> str:
        return "--slurmflox-" + self.field.replace("_", "-")

    @property
    def dest(self) -> str:
        return f"slurmflox_{self.field}"


KEYS: tuple[KeySpec, ...] = tuple(
    KeySpec(
        key=f.name.upper(),
        field=f.name,
        default=f.metadata["default"],
        parse=f.metadata["parse"],
        help=f.metadata["help"],
        worker=f.metadata["worker"],
        empty_ok=f.metadata["empty_ok"],
    )
    for f in dataclasses.fields(Settings)
)
KEYS_BY_NAME: dict[str, KeySpec] = {spec.key: spec for spec in KEYS}
KEYS_BY_FIELD: dict[str, KeySpec] = {spec.field: spec for spec in KEYS}
WORKER_KEYS: tuple[str, ...] = tuple(spec.key for spec in KEYS if spec.worker)

#: Defaults a substrate brings for keys the reference defaults to something that substrate cannot realize
#: (the local substrate has no FloxHub; it ships ``local/*`` environments instead).
SUBSTRATE_DEFAULTS: dict[str, dict[str, str]] = {
    "local": {
        "WORKER_FLOX_ENV": "local/demo",
        "WORKER_FLOX_GENERATION": "1",
        # a non-empty allow-list, so a default local run exercises the allow-list path (demo's hook exports it)
        "WORKER_ENV_EXPORTS": "SLURMFLOX_DEMO_GENERATION",
        "WORKER_CPUS": "2",
        "WORKER_MEM_MB": "1024",
    },
}


def to_raw(value: Any) -> str:
    """The canonical string form of a typed value (what is persisted and what sources provide)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Resolved:
    """Settings plus where each value came from, and which worker keys were given explicitly."""

    settings: Settings
    sources: Mapping[str, str]
    explicit: Mapping[str, str]

    @property
    def explicit_worker(self) -> dict[str, str]:
        """Explicitly given worker runtime keys in canonical raw form: what gets persisted."""
        return {k: v for k, v in self.explicit.items() if k in WORKER_KEYS}


def resolve(
    *,
    cli: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
    persisted: Mapping[str, str] | None = None,
    config: Mapping[str, str | None] | None = None,
    substrate: str | None = None,
) -> Resolved:
    """Apply the documented precedence to raw sources, parse and validate every key.

    ``cli`` and ``config`` map KEY -> raw string, with ``None`` meaning "not given". ``env`` is the process
    environment: only ``SLURMFLOX_<KEY>`` of a known key is read (:attr:`KeySpec.env`). Empty strings count as
    given only for keys where empty has a meaning; elsewhere an empty CLI/env value is treated as not given, as
    the shell reference does.
    Raises :class:`SettingsError` on the first refused value; nothing is written by this function.
    """
    cli, env, persisted, config = cli or {}, env or {}, persisted or {}, config or {}
    substrate_defaults = SUBSTRATE_DEFAULTS.get(substrate or "", {})
    for name in persisted:
        if name not in WORKER_KEYS:
            raise SettingsError(name, persisted[name], "is not a worker runtime key and cannot be persisted")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    explicit: dict[str, str] = {}
    for spec in KEYS:
        chosen: tuple[str, str] | None = None
        for source, raw in (("cli", cli.get(spec.key)), ("env", env.get(spec.env))):
            if raw is not None and (raw != "" or spec.empty_ok):
                chosen = (source, raw)
                break
        if chosen is None and spec.worker and spec.key in persisted:
            chosen = ("persisted", persisted[spec.key])
        if chosen is None:
            raw = config.get(spec.key)
            if raw is not None and (raw != "" or spec.empty_ok):
                chosen = ("config", raw)
        if chosen is None:
            if spec.key in substrate_defaults:
                chosen = (f"default:{substrate}", substrate_defaults[spec.key])
            else:
                chosen = ("default", spec.default)
        source, raw = chosen
        value = spec.parse(spec.key, raw)
        values[spec.field] = value
        sources[spec.key] = source
        if source in ("cli", "env"):
            explicit[spec.key] = to_raw(value)
    settings = Settings(**values)
    validate(settings)
    return Resolved(settings=settings, sources=sources, explicit=explicit)


def validate(settings: Settings) -> None:
    """Rules that relate several keys to each other."""
    if settings.nodes < 2:
        raise SettingsError(
            "NODES", str(settings.nodes), "needs at least one native worker node beside node1 (NODES is 2 to 9)"
        )
    if settings.ssh_port_base + settings.nodes > 65535:
        raise SettingsError("SSH_PORT_BASE", str(settings.ssh_port_base), "SSH_PORT_BASE+NODES must be a valid port")
    if ipaddress.ip_network(settings.pod_cidr).overlaps(ipaddress.ip_network(settings.svc_cidr)):
        raise SettingsError("SVC_CIDR", settings.svc_cidr, f"must not overlap POD_CIDR {settings.pod_cidr}")
    if settings.test_gid == settings.test_supp_gid:
        raise SettingsError("TEST_SUPP_GID", str(settings.test_supp_gid), "must differ from TEST_GID")


@dataclass(frozen=True)
class SubstrateOptions:
    """How this host runs a substrate (base image, accelerator, isolation, image cache): not what the cluster is,
    so not settings. The plugin fills it from the option table; substrates take it from ``make_substrate``."""

    qemu_image: Path | None = None
    qemu_accel: str = "auto"
    qemu_restrict: bool = False
    local_cache: Path | None = None
    local_site_noise: bool = False
