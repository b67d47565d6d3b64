"""pytest hooks only: options, markers, session fixtures, the report header and the lifecycle verbs.

Everything the plugin knows during a run lives in ``config.stash`` (see :class:`SessionState`); nothing is kept in
module globals, so several pytest sessions in one process (pytester) never see each other's state.

Options. Every option is a CLI flag, an environment variable and an ini key, with one precedence:
CLI flag > environment variable > ini key > default. Runtime *settings* (WORKER_*, NODES, ...) follow the same
order with one more layer, the persisted ``worker-revision.env`` between environment and ini (see settings.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import settings as settings_mod
from .evidence import EvidenceLog
from .revision import runtime_revision
from .settings import KEYS, Resolved, SettingsError
from .state import Workdir, WorkerRevisionFile

# ------------------------------------------------------------------------------------------------ groups
#: Acceptance groups in report order. Lifecycle groups are destructive and opt-in.
GROUPS: dict[str, str] = {
    "T1": "Flox shim executed on the slurmd CRI sandbox",
    "T2": "generation-pinned realization inside every worker",
    "T3": "task-profile initialization complete and consistent",
    "T4": "ordinary sbatch, no per-job Kubernetes object",
    "T5": "interactive and multi-step Slurm work",
    "T6": "multi-node MPI (pmix)",
    "T7": "arrays, dependencies, hold/release, scancel, time limits",
    "T8": "resources and process cleanup",
    "T9": "shared storage and the login endpoint",
    "T10": "worker safety, isolation and placement",
    "T11": "runtime-revision consistency",
    "TP": "task-environment provenance across export modes",
    "TI": "unprivileged identity end to end",
    "TF": "failure isolation of an unrealizable runtime",
    "TW": "customer workload corpus",
    "T11R": "rerun idempotency and incomplete-maintenance recovery",
    "T11U": "live whole-cohort runtime update",
    "T11C": "CPU-capacity revision and stale node-record cleanup",
    "T11F": "a failed runtime revision stays unavailable",
}
DESTRUCTIVE_GROUPS = frozenset({"T11R", "T11U", "T11C", "T11F"})
#: Groups whose SKIP fails a sign-off (TW only exists when a workload corpus is given).
REQUIRED_GROUPS = tuple(g for g in GROUPS if g not in DESTRUCTIVE_GROUPS)

MARKERS = {
    "acceptance": "an acceptance check against a target (selected with -m acceptance)",
    **{g: f"acceptance group {g}: {text}" for g, text in GROUPS.items()},
    "destructive": "mutates or disrupts the worker deployment; runs only when asked for",
    "needs_kube": "needs the target's Kubernetes API (SKIPs naming it otherwise)",
    "needs_flox": "needs the Flox containerd shim (SKIPs naming it otherwise)",
    "integration": "project test: needs root and the embedded local substrate",
    "kvm": "project test: boots QEMU VMs (KVM where it works, TCG otherwise)",
}


# ------------------------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class Option:
    name: str  #: flag without the leading dashes
    help: str
    kind: str = "str"  #: str | bool | up
    default: Any = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return self.dest.upper()

    @property
    def ini(self) -> str:
        return self.dest


OPTIONS: tuple[Option, ...] = (
    Option(
        "slurmflox-up",
        "provision (or converge) a substrate, then run the selected tests: local (default) or qemu",
        kind="up",
    ),
    Option("slurmflox-status", "report the recorded deployment's state and exit", kind="bool"),
    Option("slurmflox-down", "stop the recorded deployment, keeping its state, and exit", kind="bool"),
    Option(
        "slurmflox-destroy",
        "remove the recorded deployment's nodes and state (caches kept) and exit",
        kind="bool",
    ),
    Option(
        "slurmflox-strip-secrets",
        "remove keys, kubeconfig, seeds and disks from the work dir and exit",
        kind="bool",
    ),
    Option("slurmflox-target", "target file (YAML) of an existing cluster; nothing is provisioned"),
    Option("slurmflox-groups", "comma-separated acceptance groups to run, e.g. T3,T5,TP,TI"),
    Option("slurmflox-destructive", "allow the destructive lifecycle groups (T11R/U/C/F)", kind="bool"),
    Option("slurmflox-signoff", "sign-off mode: a SKIP of a required group fails the run", kind="bool"),
    Option("slurmflox-workloads", "directory of customer sbatch scripts to run as group TW"),
    Option(
        "slurmflox-reports",
        "directory for reports/<run-id>/ (HTML, JUnit XML, evidence.json)",
        default="reports",
    ),
    Option("slurmflox-run-id", "run id used in job names and the report directory (default: generated)"),
)
OPTIONS_BY_DEST = {o.dest: o for o in OPTIONS}


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def get_option(config: pytest.Config, dest: str) -> Any:
    """CLI > env > ini > default for one plugin option."""
    opt = OPTIONS_BY_DEST[dest]
    cli = config.getoption(dest)
    if cli not in (None, False):
        return cli
    env = os.environ.get(opt.env)
    if env not in (None, ""):
        if opt.kind == "bool":
            return _truthy(env)
        if opt.kind == "up":
            return env if env in ("local", "qemu") else ("local" if _truthy(env) else None)
        return env
    ini = config.getini(opt.ini)
    if ini not in (None, ""):
        if opt.kind == "bool":
            return _truthy(str(ini))
        return str(ini)
    return opt.default if opt.kind != "bool" else False


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("slurmflox", "slurmflox: provision and sign off Slurm-on-Kubernetes with Flox")
    for opt in OPTIONS:
        suffix = f" [env {opt.env}, ini {opt.ini}]"
        if opt.kind == "bool":
            group.addoption(f"--{opt.name}", action="store_true", default=None, dest=opt.dest, help=opt.help + suffix)
        elif opt.kind == "up":
            group.addoption(
                f"--{opt.name}",
                nargs="?",
                const="local",
                default=None,
                choices=("local", "qemu"),
                dest=opt.dest,
                metavar="SUBSTRATE",
                help=opt.help + suffix,
            )
        else:
            group.addoption(f"--{opt.name}", default=None, dest=opt.dest, help=opt.help + suffix)
        parser.addini(opt.ini, opt.help, type="string", default=None)
    for spec in KEYS:
        group.addoption(
            spec.flag,
            default=None,
            dest=spec.dest,
            metavar=spec.key,
            help=f"setting {spec.key}: {spec.help} (default {spec.default!r}) [env {spec.env}, ini {spec.ini}]",
        )
        parser.addini(spec.ini, f"setting {spec.key}: {spec.help}", type="string", default=None)


# ------------------------------------------------------------------------------------------------ state
@dataclass
class SessionState:
    """Everything the plugin holds for one pytest session (kept in ``config.stash``)."""

    run_id: str
    workdir: Workdir
    substrate: str | None = None
    resolved: Resolved | None = None
    target_path: Path | None = None
    target_source: str = ""  #: how the target was found: --slurmflox-target, --slurmflox-up, recorded
    target: Any = None  #: target.Target once connected
    evidence: EvidenceLog = field(default_factory=EvidenceLog)
    started: float = field(default_factory=time.monotonic)
    deselected: dict[str, int] = field(default_factory=dict)


STATE = pytest.StashKey[SessionState]()


def session_state(config: pytest.Config) -> SessionState:
    return config.stash[STATE]


def raw_settings(config: pytest.Config) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(cli, ini) raw setting values; None where a source does not give the key."""
    cli = {spec.key: config.getoption(spec.dest) for spec in KEYS}
    ini = {spec.key: config.getini(spec.ini) for spec in KEYS}
    return cli, ini


def resolve_settings(config: pytest.Config, workdir: Workdir, substrate: str | None) -> Resolved:
    cli, ini = raw_settings(config)
    persisted = WorkerRevisionFile(workdir.worker_revision_env).read()
    return settings_mod.resolve(cli=cli, env=os.environ, persisted=persisted, config=ini, substrate=substrate)


def _workdir(config: pytest.Config) -> Workdir:
    """WORKDIR resolved ahead of the rest: the persisted settings live inside it."""
    cli, ini = raw_settings(config)
    raw = cli["WORKDIR"] or os.environ.get("WORKDIR") or ini["WORKDIR"] or settings_mod.KEYS_BY_NAME["WORKDIR"].default
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = Path(config.invocation_params.dir) / path
    return Workdir(path.resolve())


@pytest.hookimpl(tryfirst=True)  # before pytest-html/junitxml read their output paths (report.configure)
def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    workerinput = getattr(config, "workerinput", None)
    run_id = (
        (workerinput or {}).get("slurmflox_run_id")
        or get_option(config, "slurmflox_run_id")
        or (time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6])
    )
    state = SessionState(run_id=run_id, workdir=_workdir(config))
    if workerinput and workerinput.get("slurmflox_target"):
        state.target_path = Path(workerinput["slurmflox_target"])
        state.target_source = workerinput.get("slurmflox_target_source", "controller")
    config.stash[STATE] = state
    from .report import configure as configure_reports

    configure_reports(config)


def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: workers reuse the controller's run id and already-provisioned target."""
    state = session_state(node.config)
    node.workerinput["slurmflox_run_id"] = state.run_id
    if state.target_path is not None:
        node.workerinput["slurmflox_target"] = str(state.target_path)
        node.workerinput["slurmflox_target_source"] = state.target_source


# ------------------------------------------------------------------------------------------------ verbs
def _progress(config: pytest.Config) -> Any:
    state = session_state(config)
    writer = config.get_terminal_writer()

    def say(message: str) -> None:
        writer.line(f"[slurmflox {time.monotonic() - state.started:7.1f}s] {message}")
        writer.flush()

    return say


def _recorded_substrate(workdir: Workdir) -> str | None:
    record = workdir.read_deployment()
    return record.get("substrate") if record else None


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """The verbs that operate a deployment and exit without running tests."""
    if config.option.help or config.option.version:
        return None
    verbs = [
        v
        for v in ("slurmflox_status", "slurmflox_down", "slurmflox_destroy", "slurmflox_strip_secrets")
        if get_option(config, v)
    ]
    if not verbs:
        return None
    return _run_verbs(config, verbs)


def _run_verbs(config: pytest.Config, verbs: list[str]) -> int:
    """Runs before pytest_configure (like --help): no stash, plain stdout."""
    from .substrates import SubstrateUnavailable, make_substrate

    state = SessionState(run_id="verbs", workdir=_workdir(config))
    t0 = time.monotonic()

    def say(message: str) -> None:
        print(f"[slurmflox {time.monotonic() - t0:7.1f}s] {message}", flush=True)

    substrate_name = _recorded_substrate(state.workdir) or get_option(config, "slurmflox_up") or "local"
    try:
        resolved = resolve_settings(config, state.workdir, substrate_name)
    except SettingsError as exc:
        say(f"error: {exc}")
        return pytest.ExitCode.USAGE_ERROR
    settings = dataclass_replace_workdir(resolved.settings, state.workdir)
    for verb in verbs:
        try:
            if verb == "slurmflox_strip_secrets":
                removed = []
                if state.workdir.read_deployment() is not None:
                    substrate = make_substrate(substrate_name, settings, state.workdir, say)
                    if "running" in substrate.status().lower().split():
                        say("error: the deployment is running; run --slurmflox-down first")
                        return pytest.ExitCode.USAGE_ERROR
                    own = getattr(substrate, "strip_secrets", None)  # a substrate may hold more secrets
                    removed += own() if own else []
                removed += state.workdir.strip_secrets()
                say(f"strip-secrets: removed {len(removed)} path(s): " + ", ".join(str(p) for p in removed))
                continue
            if state.workdir.read_deployment() is None:
                say(f"no deployment is recorded in {state.workdir.root}")
                if verb == "slurmflox_status":
                    continue
                return pytest.ExitCode.USAGE_ERROR
            substrate = make_substrate(substrate_name, settings, state.workdir, say)
            if verb == "slurmflox_status":
                print(substrate.status(), flush=True)
            elif verb == "slurmflox_down":
                substrate.down()
                say("down: stopped; state kept")
            elif verb == "slurmflox_destroy":
                substrate.destroy()
                state.workdir.forget_deployment()
                say("destroy: nodes and state removed; caches kept")
        except SubstrateUnavailable as exc:
            say(f"error: {exc}")
            return pytest.ExitCode.USAGE_ERROR
    return pytest.ExitCode.OK


def dataclass_replace_workdir(settings: settings_mod.Settings, workdir: Workdir) -> settings_mod.Settings:
    """Settings with WORKDIR made absolute (relative paths are relative to the invocation dir)."""
    import dataclasses

    return dataclasses.replace(settings, workdir=workdir.root)


# ------------------------------------------------------------------------------------------------ session
def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Provision once (on the xdist controller, before workers start) and locate the target."""
    config = session.config
    state = session_state(config)
    if _is_xdist_worker(config) or config.option.collectonly:
        return
    target_opt = get_option(config, "slurmflox_target")
    up = get_option(config, "slurmflox_up")
    if target_opt and up:
        raise pytest.UsageError("--slurmflox-target and --slurmflox-up exclude each other")
    if target_opt:
        state.target_path = Path(target_opt).expanduser().resolve()
        state.target_source = "--slurmflox-target"
        state.substrate = "existing"
        return
    if up:
        _provision(config, up)
        return
    record = state.workdir.read_deployment()
    if record and record.get("target"):
        state.target_path = Path(record["target"])
        state.substrate = record.get("substrate")
        state.target_source = f"recorded in {state.workdir.deployment}"


def _provision(config: pytest.Config, substrate_name: str) -> None:
    from .substrates import SubstrateUnavailable, make_substrate

    state = session_state(config)
    say = _progress(config)
    try:
        resolved = resolve_settings(config, state.workdir, substrate_name)
    except SettingsError as exc:
        raise pytest.UsageError(f"slurmflox: {exc} (nothing was changed)") from None
    settings = dataclass_replace_workdir(resolved.settings, state.workdir)
    state.resolved = resolved
    state.substrate = substrate_name
    WorkerRevisionFile(state.workdir.worker_revision_env).record(resolved.explicit_worker)
    say(f"up: substrate {substrate_name}, work dir {state.workdir.root}")
    try:
        substrate = make_substrate(substrate_name, settings, state.workdir, say)
        target_doc = substrate.up()
    except SubstrateUnavailable as exc:
        raise pytest.UsageError(f"slurmflox: {exc}") from None
    target_path = Path(target_doc.get("path") or state.workdir.root / "target.yaml")
    state.workdir.record_deployment({"substrate": substrate_name, "target": str(target_path), "up_at": time.time()})
    state.target_path = target_path
    state.target_source = f"--slurmflox-up={substrate_name}"
    _reconcile(config, settings, substrate, target_path, say)


def _reconcile(config: pytest.Config, settings: Any, substrate: Any, target_path: Path, say: Any) -> None:
    """Move the cohort to the desired runtime revision (fast path, recovery or the maintenance barrier)."""
    from .lifecycle import ReconcileError, Reconciler
    from .target import connect, load_target

    state = session_state(config)
    spec = load_target(target_path)
    tgt = connect(spec, observer=state.evidence, pool_factory=lambda _spec, _kube: substrate.pool())
    try:
        if "admin" not in tgt.capabilities:
            raise pytest.UsageError(
                f"slurmflox: cannot reconcile without administrative access: {tgt.why_missing('admin')}"
            )
        outcome = Reconciler(slurm=tgt.slurm, pool=tgt.pool, login=tgt.login, say=say).reconcile(settings)
    except ReconcileError as exc:
        raise pytest.UsageError(f"slurmflox: up failed at step {exc}") from None
    finally:
        tgt.close()
    say(f"up: cohort at {outcome.revision} ({outcome.path})")


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = session_state(config)
    lines = [f"slurmflox: run {state.run_id}, work dir {state.workdir.root}"]
    if state.target_path is not None:
        lines.append(
            f"slurmflox: target {state.target_path} ({state.target_source}), substrate {state.substrate or 'unknown'}"
        )
        try:
            from .target import load_target

            spec = load_target(state.target_path)
            lines.append(
                f"slurmflox: expected runtime revision {spec.expect.revision} "
                f"({spec.expect.environment}, {spec.expect.image})"
            )
        except Exception as exc:
            lines.append(f"slurmflox: target file unreadable: {exc}")
    else:
        try:
            resolved = resolve_settings(config, state.workdir, state.substrate or "local")
            lines.append(
                f"slurmflox: no target; runtime revision of current settings {runtime_revision(resolved.settings)}"
            )
        except SettingsError as exc:
            lines.append(f"slurmflox: settings invalid: {exc}")
    return lines


# ------------------------------------------------------------------------------------------------ selection
def item_group(item: pytest.Item) -> str | None:
    for mark in item.iter_markers():
        if mark.name in GROUPS:
            return mark.name
    return None


def _mark_tokens(config: pytest.Config) -> set[str]:
    expr = config.option.markexpr or ""
    return set(expr.replace("(", " ").replace(")", " ").split())


def _acceptance_requested(config: pytest.Config) -> bool:
    """Asked for by marker (``-m acceptance``, ``-m T3``), by group list, or by naming a target to test."""
    return bool(
        _mark_tokens(config) & ({"acceptance"} | set(GROUPS))
        or get_option(config, "slurmflox_groups")
        or get_option(config, "slurmflox_target")
        or get_option(config, "slurmflox_up")
    )


NOT_ACCEPTANCE = "not an acceptance check (a slurmflox selection option without paths runs the suites only)"


def _selects_a_target_run(config: pytest.Config) -> bool:
    """A slurmflox selection option (``--slurmflox-up``, ``--slurmflox-target``, ``--slurmflox-groups``) without
    paths of the user's own runs acceptance checks only: in the checkout, testpaths would otherwise also collect
    the project's tests. Paths the user names (``tests``, ``--pyargs pytest_slurmflox.suites``) are honoured."""
    selecting = any(get_option(config, o) for o in ("slurmflox_up", "slurmflox_target", "slurmflox_groups"))
    return selecting and config.args_source != pytest.Config.ArgsSource.ARGS


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Acceptance checks run only when asked for; destructive groups only when named or allowed."""
    state = session_state(config)
    groups_opt = get_option(config, "slurmflox_groups")
    wanted = {g.strip() for g in groups_opt.split(",") if g.strip()} if groups_opt else None
    if wanted:
        unknown = sorted(wanted - set(GROUPS))
        if unknown:
            raise pytest.UsageError(
                f"--slurmflox-groups: unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}"
            )
    allow_destructive = bool(get_option(config, "slurmflox_destructive"))
    named = DESTRUCTIVE_GROUPS & _mark_tokens(config)
    named |= (wanted or set()) & DESTRUCTIVE_GROUPS
    if named and state.substrate == "existing" and not allow_destructive:
        raise pytest.UsageError(
            f"destructive group(s) {', '.join(sorted(named))} against an existing cluster need --slurmflox-destructive"
        )
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    reasons: dict[str, int] = {}
    requested = _acceptance_requested(config)
    operating = _selects_a_target_run(config)
    for item in items:
        if item.get_closest_marker("acceptance") is None:
            if operating:  # a target run without paths runs acceptance checks only, never the project's tests
                drop.append(item)
                reasons[NOT_ACCEPTANCE] = reasons.get(NOT_ACCEPTANCE, 0) + 1
            else:
                keep.append(item)
            continue
        group = item_group(item)
        reason = None
        if not requested:
            reason = "acceptance not requested (use -m acceptance, --slurmflox-groups or a target)"
        elif wanted is not None and group not in wanted:
            reason = "group not in --slurmflox-groups"
        elif group in DESTRUCTIVE_GROUPS and group not in named and not allow_destructive:
            reason = "destructive group not asked for"
        if reason:
            drop.append(item)
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    state.deselected = reasons


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """``--slurmflox-up`` with nothing selected is a provisioning run: success, not "no tests ran"."""
    provisioned = get_option(session.config, "slurmflox_up") and session_state(session.config).target_path
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and provisioned:
        session.exitstatus = pytest.ExitCode.OK


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = session_state(config)
    for reason, count in state.deselected.items():
        what = "test(s)" if reason == NOT_ACCEPTANCE else "acceptance check(s)"
        terminalreporter.write_line(f"slurmflox: {count} {what} deselected: {reason}")


# ------------------------------------------------------------------------------------------------ fixtures
def _pool_factory(config: pytest.Config):
    """The owner of the workers: the substrate's pool for a deployment of ours, the NodeSet (read-only: it can list
    workers but not apply) for a customer's Kubernetes, none for a Slurm-only target."""

    def factory(spec: Any, kube: Any) -> Any:
        if spec.substrate in ("local", "qemu") and spec.workdir is not None:
            from .substrates import make_substrate

            workdir = Workdir(spec.workdir)
            resolved = resolve_settings(config, workdir, spec.substrate)
            settings = dataclass_replace_workdir(resolved.settings, workdir)
            substrate = make_substrate(spec.substrate, settings, workdir, _progress(config))
            if spec.substrate == "local" or kube is not None:
                return substrate.pool()
            return None
        if kube is not None and spec.kubernetes is not None:
            from .nodeset import NodeSetView

            return NodeSetView(kube, spec.kubernetes.nodeset)
        return None

    return factory


@pytest.fixture(scope="session")
def slurmflox_state(pytestconfig: pytest.Config) -> SessionState:
    return session_state(pytestconfig)


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Iterator[Any]:
    """The cluster under test: from --slurmflox-target, --slurmflox-up, or the deployment recorded in WORKDIR."""
    from .target import TargetError, connect, load_target

    state = session_state(pytestconfig)
    if state.target_path is None:
        raise pytest.UsageError(
            f"slurmflox: no target. Run with --slurmflox-up[=local|qemu], pass --slurmflox-target=FILE, or bring "
            f"a deployment up first (none is recorded in {state.workdir.root})."
        )
    try:
        spec = load_target(state.target_path)
    except TargetError as exc:
        raise pytest.UsageError(f"slurmflox: {exc}") from None
    for secret in (spec.login.key, state.workdir.munge_key, state.workdir.kubeconfig):
        state.evidence.redact.add_file(secret)
    if spec.kubernetes and spec.kubernetes.kubeconfig:
        state.evidence.redact.add_file(spec.kubernetes.kubeconfig)
    tgt = connect(spec, observer=state.evidence, pool_factory=_pool_factory(pytestconfig))
    state.target = tgt
    yield tgt
    tgt.close()


@pytest.fixture(autouse=True)
def _slurmflox_evidence(request: pytest.FixtureRequest) -> Iterator[None]:
    """Collect the commands an acceptance check runs and attach them to its report."""
    if request.node.get_closest_marker("acceptance") is None:
        yield
        return
    state = session_state(request.config)
    state.evidence.start()
    try:
        yield
    finally:
        records = state.evidence.stop()
        request.node.user_properties.append(("slurmflox_evidence", json.dumps([r.as_dict() for r in records])))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    group = item_group(item)
    if group and call.when == "setup":
        report.user_properties.append(("slurmflox_group", group))
    return report


def _require(target: Any, capability: str) -> None:
    why = target.why_missing(capability)
    if why:
        pytest.skip(f"missing capability {capability}: {why}")


@pytest.fixture(scope="session")
def slurm(target: Any) -> Any:
    _require(target, "slurm")
    return target.slurm


@pytest.fixture(scope="session")
def login(target: Any) -> Any:
    """The unprivileged user's kept SSH connection to the login endpoint."""
    return target.login


@pytest.fixture(scope="session")
def admin(target: Any) -> Any:
    _require(target, "admin")
    return target.admin


@pytest.fixture(scope="session")
def kube(target: Any) -> Any:
    _require(target, "kubernetes")
    return target.kube


@pytest.fixture(scope="session")
def workers(target: Any) -> list[str]:
    """Slurm node names of the worker cohort: from the pool where one lists them, else the partition's nodes."""
    _require(target, "slurm")
    if target.pool is not None:
        return sorted(w.name for w in target.pool.workers() if w.ready)
    res = target.login.run(f"sinfo -h -N -p {target.spec.partition} -o %N").check()
    return sorted(set(res.stdout.split()))


@pytest.fixture
def submit(request: pytest.FixtureRequest, target: Any) -> Iterator[Any]:
    """Submit as the unprivileged user from the login endpoint; jobs named after the run and the check."""
    from .submit import Jobs

    _require(target, "slurm")
    jobs = Jobs(
        login=target.login,
        slurm=target.slurm,
        run_id=session_state(request.config).run_id,
        label=request.node.name,
        partition=target.spec.partition,
    )
    yield jobs
    jobs.cleanup()


@pytest.fixture(scope="session")
def expect(target: Any) -> Any:
    """What the deployment is expected to run (target file ``expect``)."""
    return target.expect


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> list[Any]:
    """The evidence records collected so far for the running check (every command its runners ran, redacted)."""
    current = session_state(request.config).evidence.current
    return current if current is not None else []


@pytest.fixture(scope="session")
def run_id(pytestconfig: pytest.Config) -> str:
    return session_state(pytestconfig).run_id


def main() -> None:  # pragma: no cover - convenience for `python -m pytest_slurmflox.plugin`
    sys.exit(pytest.main())
