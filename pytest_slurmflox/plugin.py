"""pytest hooks only: options registration, configuration and the verbs' entry point.

The stateful part is :class:`~pytest_slurmflox.harness.session.SlurmfloxSession`, registered in ``pytest_configure``
with
the fixtures module and, on the controller of an acceptance run, the report writer. Everything a run knows lives
in ``config.stash`` (:class:`~pytest_slurmflox.reporting.sessionstate.SessionState`), never in module globals, so
several
pytest sessions in one process (pytester) never see each other's state.

Imports point one way: plugin -> session/fixtures/report/verbs -> options/sessionstate/groups/signoff ->
settings/workdir.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .harness import fixtures, sitefixtures
from .harness.concurrency import apply_default_workers
from .harness.history import register_history
from .harness.options import (
    EarlyOptions,
    add_options,
    checked_busy_timeout,
    checked_signer,
    checked_up,
    checked_workloads,
    get_option,
    outlier_ratios,
    run_id_of,
    substrate_options,
    workdir_of,
)
from .harness.selection import (
    Selection,
    main_job,
    main_job_paths,
    plain_operation,
    pyargs_anchors,
    reports_wanted,
    user_named_paths,
)
from .harness.session import SlurmfloxSession
from .harness.sitedeps import SiteDependencies
from .harness.verbs import requested_verbs, run_verbs
from .harness.waitnotes import WaitNotes
from .model.groups import MARKERS
from .model.runrecord import start_of
from .reporting.report import SignoffRequest, register_report_writer
from .reporting.sessionstate import STATE, SessionState, session_state


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """The verbs that operate a deployment and exit without running tests."""
    if config.option.help or config.option.version:
        return None
    checked = get_option(config, "slurmflox_check_target")
    if checked:
        from .harness.doctor import doctor

        return doctor(Path(checked))
    verified = get_option(config, "slurmflox_verify")
    if verified:
        from .reporting.signing import verify_command

        return verify_command(Path(verified), get_option(config, "slurmflox_allowed_signers"))
    starter = get_option(config, "slurmflox_init_target")
    if starter:
        from .harness.starter import init_target

        return init_target(Path(starter), get_option(config, "slurmflox_init_login"))
    verbs = requested_verbs(config)
    return run_verbs(config, verbs, substrate_options(config)) if verbs else None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """A main job in the checkout, or one given a target file, without paths loads the suites' conftests only (not
    those of testpaths' ``tests/`` or of the cwd); one that names the suites by ``--pyargs`` loads those of the
    modules it names, not those of the cwd's ``test*``."""
    early = EarlyOptions(early_config)
    namespace = early_config.known_args_namespace
    paths = main_job_paths(early, user_paths=bool(namespace.file_or_dir))  # type: ignore[arg-type]
    if paths is None and getattr(namespace, "pyargs", False) and main_job(early):  # type: ignore[arg-type]
        paths = pyargs_anchors(namespace.file_or_dir) or None
    if paths:
        namespace.file_or_dir = paths


@pytest.hookimpl(tryfirst=True)  # before pytest-html/junitxml read their output paths
def pytest_configure(config: pytest.Config) -> None:
    paths = main_job_paths(config, user_paths=user_named_paths(config))
    if paths:
        config.args = paths  # what the session (and xdist's workers) collect
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    checked_up(config)
    worker_input = getattr(config, "workerinput", None) or {}
    try:
        start = start_of(worker_input)
    except ValueError as exc:
        raise pytest.UsageError(f"slurmflox: {exc}") from None
    state = SessionState(run_id=run_id_of(config), workdir=workdir_of(config), start=start)  # a bad run id stops here
    if worker_input.get("slurmflox_target"):
        state.target_path = Path(worker_input["slurmflox_target"])
        state.target_source = worker_input.get("slurmflox_target_source", "controller")
        state.substrate = worker_input.get("slurmflox_substrate")
    config.stash[STATE] = state
    session = SlurmfloxSession(config, state, substrate_options(config))
    if not hasattr(config, "workerinput"):  # every refusal before anything is written, started or connected
        if not config.option.collectonly or get_option(config, "slurmflox_target"):  # --co checks a named file
            session.locate_target()
        Selection.of(config, state.substrate)  # an unknown group, a destructive one not allowed: one line
    apply_default_workers(config)
    checked_workloads(config)
    checked_busy_timeout(config)
    outlier_ratios(config)
    config.pluginmanager.register(session, "slurmflox-session")
    config.pluginmanager.register(fixtures, "slurmflox-fixtures")
    config.pluginmanager.register(sitefixtures, "slurmflox-site-fixtures")
    config.pluginmanager.register(SiteDependencies(state), "slurmflox-site-dependencies")
    config.pluginmanager.register(WaitNotes(config, state), "slurmflox-wait-notes")
    if hasattr(config, "workerinput") or config.option.collectonly or not reports_wanted(config):
        return
    request = SignoffRequest(
        requested=bool(get_option(config, "slurmflox_signoff")),
        workloads_given=bool(get_option(config, "slurmflox_workloads")),
        signer=checked_signer(config),
    )
    writer = register_report_writer(config, state, get_option(config, "slurmflox_reports"), request)
    register_history(config, writer)


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    """Plain operation (``--slurmflox-up`` with nothing selected) collects nothing: provision, converge, exit."""
    return True if plain_operation(session.config) else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: workers reuse the controller's run id and already-provisioned target."""
    state = session_state(node.config)
    node.workerinput["slurmflox_run_id"] = state.run_id
    node.workerinput["slurmflox_run_start"] = state.start  # the records of this start only (runrecord)
    node.workerinput["slurmflox_owner_pid"] = os.getpid()  # an orphaned worker removes the run's records (runrecord)
    if state.target_path is not None:
        node.workerinput["slurmflox_target"] = str(state.target_path)
        node.workerinput["slurmflox_target_source"] = state.target_source
        node.workerinput["slurmflox_substrate"] = state.substrate
