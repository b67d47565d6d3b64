"""The fixtures acceptance checks use: the target and its clients, job submission, evidence, the run id.

The test session uses the target spec the session read once (``SessionState.spec``: from ``--slurmflox-target``,
the one ``--slurmflox-up`` wrote, or the one recorded in WORKDIR) and nothing else: it never resolves settings
again. A substrate-backed target carries the
settings it was deployed with, which is what operating its worker pool needs.

A capability a fixture needs is gated by the one gate (gates.py: SKIP when the target does not have it, FAIL when
it declares it but it does not answer). The worker cohort (``workers``) is not here: deciding it is an acceptance
check of its own (cross-checked with the owner, then a pre-flight step on every worker, FAIL naming a worker that
does not serve), so its one fixture lives with the suites (``suites/conftest.py``), which every acceptance run and
the installed wheel (``pytest --pyargs pytest_slurmflox.suites``) load as the suites' package conftest.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from ..cluster.gates import require
from ..model.target import TargetSpec
from ..model.workdir import Workdir
from ..reporting.sessionstate import progress_printer, session_state
from ..reporting.signoff import NOT_RUN_PREFIX
from .connection import Target, connect
from .interrupt import terminate_as_interrupt
from .options import get_option, substrate_options
from .sweep import sweep_run


def _pool_factory(config: pytest.Config):
    """The owner of the workers: the substrate's pool for a deployment of ours, the NodeSet (read-only: it can list
    workers but not apply) for a customer's Kubernetes, none for a Slurm-only target."""

    def factory(spec: TargetSpec, kube: Any) -> Any:
        if spec.substrate in ("local", "qemu") and spec.workdir is not None and spec.deployed is not None:
            from ..substrates import make_substrate

            workdir = Workdir(spec.workdir)
            options = substrate_options(config)
            substrate = make_substrate(spec.substrate, spec.deployed, workdir, progress_printer(config), options)
            if spec.substrate == "local" or kube is not None:
                return substrate.pool()
            return None
        if kube is not None and spec.kubernetes is not None:
            from ..cluster.nodeset import NodeSetView

            return NodeSetView(kube, spec.kubernetes.nodeset)
        return None

    return factory


@pytest.fixture(scope="session")
def slurmflox_state(pytestconfig: pytest.Config) -> Any:
    return session_state(pytestconfig)


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> Iterator[Target]:
    """The cluster under test: from --slurmflox-target, --slurmflox-up, or the deployment recorded in WORKDIR."""
    state = session_state(pytestconfig)
    if state.target_path is None:
        raise pytest.UsageError(
            f"slurmflox: no target. Run with --slurmflox-up[=local|qemu], pass --slurmflox-target=FILE, or bring "
            f"a deployment up first (none is recorded in {state.workdir.root})."
        )
    spec = state.spec  # read once at session start (SlurmfloxSession.read_target)
    if spec is None:
        raise pytest.UsageError(f"slurmflox: target file {state.target_path}: {state.spec_error}")
    # the redactor learned the target's secrets at session start (SlurmfloxSession)
    live = connect(spec, observer=state.evidence, pool_factory=_pool_factory(pytestconfig))
    state.target = live
    if live.unreachable is not None:  # one reason for every check: each is NOT RUN with it, nothing else is tried
        live.close()
        pytest.skip(NOT_RUN_PREFIX + live.unreachable)
    # The process that owns the run (serial, xdist controller) turns SIGTERM into Ctrl-C from session start to its
    # end (SlurmfloxSession); an xdist worker, which a process-group signal reaches too, does it here, while it
    # holds the target, so its checks' teardowns still cancel their jobs.
    worker = hasattr(pytestconfig, "workerinput")
    with terminate_as_interrupt() if worker else contextlib.nullcontext():
        try:
            yield live
        finally:
            # Under xdist every worker shares the run id: the run's jobs and files are not one worker's to remove
            # (each check still cancels its own jobs in ``submit``).
            if not worker:  # the xdist controller sweeps after its workers
                slurm = live.slurm if live.why_missing("slurm") is None else None
                sweep_run(live.login, slurm, state.run_id, keep=bool(get_option(pytestconfig, "slurmflox_keep")))
            live.close()


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


@pytest.fixture(scope="session")
def slurm(target: Target) -> Any:
    require(target, "slurm")
    return target.slurm


@pytest.fixture(scope="session")
def login(target: Target) -> Any:
    """The unprivileged user's kept SSH connection to the login endpoint."""
    return target.login


@pytest.fixture(scope="session")
def admin(target: Target) -> Any:
    require(target, "admin")
    return target.admin


@pytest.fixture(scope="session")
def kube(target: Target) -> Any:
    require(target, "kubernetes")
    return target.kube


@pytest.fixture(scope="session")
def busy_timeout(pytestconfig: pytest.Config, target: Target) -> float:
    """Seconds a step that needs every worker waits for workers other jobs hold (busy.py): the option
    (``--slurmflox-busy-timeout``, env, ini), else the target file's ``slurm.busy_timeout``, else 600."""
    from ..model.busy import resolve_busy_timeout

    return resolve_busy_timeout(get_option(pytestconfig, "slurmflox_busy_timeout"), target.spec.busy_timeout)


@pytest.fixture
def submit(request: pytest.FixtureRequest, target: Target, busy_timeout: float) -> Iterator[Any]:
    """Submit as the unprivileged user from the login endpoint; jobs named after the run and the check."""
    from ..cluster.submit import Jobs

    require(target, "slurm")
    state = session_state(request.config)
    jobs = Jobs.of(target, state.run_id, request.node.name, busy_timeout=busy_timeout, records=state.records)
    yield jobs
    jobs.cleanup()


@pytest.fixture(scope="session")
def expect(target: Target) -> Any:
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
