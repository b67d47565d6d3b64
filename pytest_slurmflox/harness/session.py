"""The stateful part of the plugin: one :class:`SlurmfloxSession` per pytest config, registered in
``pytest_configure`` (as pytest-xdist registers its ``DSession``), holding what one invocation decided.

It locates or provisions the target once (on the xdist controller, before workers start), teaches the redactor the
deployment's secrets in every process, applies the selection rules, and reports the live target's facts once per
process. Settings are resolved at most once per invocation (``--slurmflox-up``); a test session reads the target.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..cluster.workerfail import WorkersFailed
from ..model.groups import item_group
from ..model.quarantine import FAILED_WORKERS
from ..model.settings import SettingsError, SubstrateOptions
from ..reporting.envfacts import target_facts
from ..reporting.outcome import BY_PYTEST, NOT_NAMED
from ..reporting.sessionstate import SessionState, progress_printer
from ..reporting.signoff import skip_reason
from .concurrency import order_long_waits
from .interrupt import terminate_as_interrupt
from .options import get_option, resolve_settings
from .reach import unreachable_reason
from .selection import NOT_ACCEPTANCE, Selection, addressed, is_workload_check, main_job
from .upfailure import failed_up_line


def _marks(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def refusal(state: SessionState) -> str:
    """The one line a target file that cannot be used is refused with: the file, how it was found unless named
    on the command line, the schema's or the reader's words, and that nothing ran."""
    found = "" if state.target_source == "--slurmflox-target" else f" ({state.target_source})"
    return f"target file {state.target_path}{found}: {state.spec_error}; nothing was run"


class SlurmfloxSession:
    def __init__(self, config: pytest.Config, state: SessionState, options: SubstrateOptions) -> None:
        self.config = config
        self.state = state
        self.options = options
        self.workloads_given = bool(get_option(config, "slurmflox_workloads"))
        self.facts_sent = False
        #: SIGTERM as Ctrl-C in the process that owns the run, from session start to its very end (interrupt.py)
        self.interrupt = contextlib.ExitStack()
        #: whether some check got further than "the login is unreachable" (else there is nothing to sweep)
        self.reached = False

    # -- the target ----------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Provision once (on the xdist controller, before workers start); the target was located at configure
        time (:func:`locate_target`) unless ``up`` writes it now. A killed run of the same id left its records: none
        is read, all go (runrecord.begin)."""
        controller = not hasattr(self.config, "workerinput") and not self.config.option.collectonly
        if controller:
            from ..model.runrecord import begin

            self.interrupt.enter_context(terminate_as_interrupt())
            begin(self.state.records)
        up = get_option(self.config, "slurmflox_up")
        if up and controller:
            self._provision(up)
        self.read_target()
        if controller:
            from .quarantine import retest_at_start

            retest_at_start(self.config, self.state)  # before any xdist worker starts: its reservation, its workers
        if self.state.spec is None and self.state.exit.provisioned:  # what our own substrate wrote is refused
            raise pytest.UsageError(f"slurmflox: {refusal(self.state)}")
        if self.state.target_path is not None:  # a run with no target runs nothing of ours: nothing to hide
            self.state.evidence.redact.learn(self.state.workdir, self.state.spec)  # the one teaching, every process

    def read_target(self) -> None:
        """The one read of the target file in this process (at configure time on the controller, after ``up``
        wrote it, or the path the xdist controller handed down): the fixtures, the report writer and the sweep take
        ``state.spec`` from here. An unreadable file is remembered as ``state.spec_error``."""
        from ..model.target import TargetError, load_target

        state = self.state
        if state.target_path is None or state.spec is not None:
            return
        try:
            state.spec = load_target(state.target_path)
        except TargetError as exc:
            state.spec_error = str(exc)
        reservation = (getattr(self.config, "workerinput", None) or {}).get("slurmflox_retest_reservation")
        if reservation and state.spec is not None:  # the controller's re-test: every job goes to its reservation
            from .quarantine import with_reservation

            state.spec = with_reservation(state.spec, str(reservation))

    def locate_target(self) -> None:
        """Where this run's target is, decided in ``pytest_configure`` on the controller, before anything is
        written, started or connected: ``--slurmflox-target``, or the deployment recorded in the work dir
        (``--slurmflox-up`` writes its own at session start). A named target, or the recorded one of an acceptance
        run, that cannot be read or breaks the schema is one usage-error line (exit 4) and nothing else."""
        state = self.state
        target_option = get_option(self.config, "slurmflox_target")
        up = get_option(self.config, "slurmflox_up")
        if target_option and up:
            raise pytest.UsageError("--slurmflox-target and --slurmflox-up exclude each other; nothing was run")
        if target_option:
            state.target_path = Path(target_option).expanduser().resolve()
            state.target_source, state.substrate = "--slurmflox-target", "existing"
        elif up:
            state.substrate = up
            return
        else:
            record = state.workdir.read_deployment()
            if not (record and record.get("target")):
                return
            state.target_path = Path(record["target"])
            state.substrate = record.get("substrate")
            state.target_source = f"recorded in {state.workdir.deployment}"
        self.read_target()
        if state.spec is None and (target_option or main_job(self.config)):
            raise pytest.UsageError(f"slurmflox: {refusal(state)}")

    def _provision(self, substrate_name: str) -> None:
        from ..substrates import SubstrateUnavailable
        from .deploy import DeployError, up

        state = self.state
        try:
            state.resolved = resolve_settings(self.config, state.workdir, substrate_name)
        except SettingsError as exc:
            raise pytest.UsageError(f"slurmflox: {exc} (nothing was changed)") from None
        state.substrate = substrate_name
        say = progress_printer(self.config)
        began = time.time()
        try:
            deployed = up(substrate_name, state.resolved, state.workdir, self.options, say, state.evidence)
        except SettingsError as exc:  # a limit of the substrate's own, refused before anything started
            raise pytest.UsageError(f"slurmflox: {exc} (nothing was changed)") from None
        except (SubstrateUnavailable, DeployError) as exc:
            raise pytest.UsageError(failed_up_line(exc, state.workdir, expected=True)) from None
        except Exception as exc:  # a bug or a host fault mid-way: still one line, the detail in a log file
            raise pytest.UsageError(failed_up_line(exc, state.workdir, expected=False)) from None
        state.up = (began, time.time())
        state.target_path = deployed.target_path
        state.target_source = f"--slurmflox-up={substrate_name}"
        state.exit.provisioned = True

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """The run, its target and what it expects, when the run is ours (:func:`addressed`): a pytest run of
        another project in the same venv shows no slurmflox line."""
        state = self.state
        if state.target_path is None and not addressed(config, state.workdir):
            return []
        lines = [f"slurmflox: run {state.run_id}, work dir {state.workdir.root}"]
        if state.target_path is None:
            return [*lines, self._settings_line()]
        lines.append(
            f"slurmflox: target {state.target_path} ({state.target_source}), substrate {state.substrate or 'unknown'}"
        )
        spec = state.spec
        if spec is None:
            return [*lines, f"slurmflox: target file unreadable: {state.spec_error}"]
        from ..model.declared import REVISION, REVISION_INPUTS, missing, undeclared_message

        expect = spec.expect
        if missing(spec.declared, REVISION_INPUTS) and missing(spec.declared, (REVISION,)):
            # a customer's target that does not declare it: the reference's defaults would compute another one
            lines.append("slurmflox: expected runtime revision: not declared by the target file")
        else:
            what = f"{expect.revision} ({expect.environment}, {expect.image})"
            lines.append(f"slurmflox: expected runtime revision {what}")
        # the target file validated at start: one message naming, per group, the keys it leaves out
        message = undeclared_message(spec)
        return [*lines, f"slurmflox: {message}"] if message else lines

    def _settings_line(self) -> str:
        """Without a target, the revision the current settings would deploy (the only resolution of this run)."""
        from ..model.revision import runtime_revision

        state = self.state
        try:
            resolved = state.resolved or resolve_settings(self.config, state.workdir, state.substrate or "local")
        except SettingsError as exc:
            return f"slurmflox: settings invalid: {exc}"
        state.resolved = resolved
        return f"slurmflox: no target; runtime revision of current settings {runtime_revision(resolved.settings)}"

    # -- selection ----------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector: Any, name: str, obj: object) -> list[Any] | None:
        """Without --slurmflox-workloads a TW acceptance check yields no items at all: not SKIPped, not
        deselected, not even counted as collected (the TW group does not exist in such a run)."""
        if not callable(obj) or not name.startswith("test") or self.workloads_given:
            return None
        module = getattr(collector, "module", None)
        marks = [*_marks(getattr(module, "pytestmark", [])), *_marks(getattr(obj, "pytestmark", []))]
        return [] if is_workload_check(marks) else None

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]) -> None:
        """Acceptance checks run only when asked for; destructive groups only when named or allowed; the long
        waits are placed (:func:`~pytest_slurmflox.harness.concurrency.order_long_waits`)."""
        if not self.workloads_given:  # backstop for TW checks marked in ways the collector hook cannot see
            items[:] = [i for i in items if not (i.get_closest_marker("TW") and i.get_closest_marker("acceptance"))]
        selection = Selection.of(self.config, self.state.substrate, self.state.deselected)
        keep, drop = selection.split(items)
        if drop:
            self.config.hook.pytest_deselected(items=drop)
            items[:] = keep
        for item in keep:  # the group travels with every phase's report (the collector, JUnit's teardown)
            group = item_group(item)
            if group:
                item.user_properties.append(("slurmflox_group", group))
        order_long_waits(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        """Every acceptance check a collected module holds, before node ids, ``-k`` or groups narrow it: what a
        group *has*. A sign-off needs each of a required group's checks to have run (signoff.decide)."""
        report = yield
        for node in report.result or ():
            if isinstance(node, pytest.Item) and node.get_closest_marker("acceptance") is not None:
                self.state.deselected.collected(node.nodeid, item_group(node))
        return report

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """What pytest's ``-k``, ``-m``, ``--deselect`` or ``--lf`` dropped, per check (the selection's own drops
        are already recorded with their reason, which stays first)."""
        for item in items:
            if item.get_closest_marker("acceptance") is not None:
                self.state.deselected.record(item_group(item), BY_PYTEST, count=False, nodeid=item.nodeid)
        self._hand_over()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A check its module holds that is neither kept nor deselected was left out by the paths or node ids the
        command line named (``suites/test_t06_mpi.py::test_the_declared_mpi_plugin_is_offered``), or by ``--lf``
        (pytest's cache plugin drops the checks that passed last time from the module's collection, without
        deselecting them)."""
        record = self.state.deselected
        why = BY_PYTEST if getattr(self.config.option, "lf", False) else NOT_NAMED
        kept = {item.nodeid for item in session.items}
        for nodeid, group in record.inventory.items():
            if nodeid not in kept and nodeid not in record.checks:
                record.record(group or None, why, count=False, nodeid=nodeid)
        self._hand_over()

    def _hand_over(self) -> None:
        """An xdist worker hands its record to the controller, whose verdict names what did not run and why, and
        its notes (the list itself: what it says later goes too, xdist sends the output at the worker's end)."""
        output = getattr(self.config, "workeroutput", None)
        if output is not None:
            output["slurmflox_deselected"] = self.state.deselected.as_dict()
            output["slurmflox_notes"] = self.state.notes

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist controller: a worker's deselection record (it collected and selected; this process did not)
        and its progress lines, marked with the worker's id."""
        output = getattr(node, "workeroutput", None) or {}
        self.state.deselected.merge(output.get("slurmflox_deselected") or {})
        worker = getattr(getattr(node, "gateway", None), "id", "worker")
        self.state.notes.extend(f"[{worker}] {line}" for line in output.get("slurmflox_notes") or ())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        failed = call.excinfo.value if call.excinfo is not None else None
        if isinstance(failed, WorkersFailed):  # the workers a per-worker FAIL named, as data (quarantine drains them)
            report.user_properties.append((FAILED_WORKERS, json.dumps(failed.workers)))
        if call.when == "teardown" and not self.facts_sent and self.state.target is not None:
            self.facts_sent = True
            report.user_properties.append(("slurmflox_facts", json.dumps(target_facts(self.state.target))))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A check reached the cluster unless its setup was skipped for an unreachable login (its teardown then
        passes having done nothing)."""
        away = report.skipped and unreachable_reason(skip_reason(report))
        if report.failed or (report.when != "teardown" and not away):
            self.reached = True

    # -- the end ------------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """The run's end on the cluster first; the exit status last, once, after every reporter and the report
        writer's secret scan (the terminal summary runs inside the terminal reporter's own wrapper, which this
        outermost one encloses): :meth:`~pytest_slurmflox.reporting.outcome.ExitRules.settle` (a provisioning run that
        collected nothing succeeded; an unsigned sign-off or a leaked secret fails the run)."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        if not interrupted:
            self._end_run()
        try:
            yield
        finally:
            if interrupted:  # xdist's workers are torn down now (its hook, inside): nothing submits any more
                self._end_run(interrupted=True)
            self._forget_run()
            self.interrupt.close()
            session.exitstatus = self.state.exit.settle(session.exitstatus)

    def _forget_run(self) -> None:
        """The run's shared records go with the process that owns the run (serial, xdist controller), after the
        other session-finish hooks: xdist's tears its workers down there, and an interrupted run's workers (SIGTERM
        to the controller) were still writing records when this ran before them (seen in CI: a cohort record left
        in /tmp by the SIGTERM test). A worker that outlived the controller (its parent is another process now)
        removes them itself: nothing of the run needs them any more."""
        from ..model.runrecord import forget, orphaned

        workerinput = getattr(self.config, "workerinput", None)
        if workerinput is None or orphaned(workerinput.get("slurmflox_owner_pid")):
            forget(self.state.records)

    def _end_run(self, *, interrupted: bool = False) -> None:
        """The xdist controller sweeps the run's jobs once its workers are done: after a run that reached the
        cluster, and after an interrupted one whatever it reached (a worker may have been mid-submission; a sweep
        that fails then is said, not raised, so the records still go)."""
        if not hasattr(self.config, "workerinput") and not self.config.option.collectonly:
            from .quarantine import at_end

            at_end(
                self.config,
                self.state,
                self.config.pluginmanager.getplugin("slurmflox-report"),
                interrupted=interrupted,
            )
        xdist_controller = self.config.pluginmanager.getplugin("dsession") is not None
        reached = self.reached or interrupted
        if xdist_controller and self.state.target is None and self.state.spec is not None and reached:
            # the workers ran the checks and share the run id: only now is the run's cleanup nobody else's
            from .sweep import sweep_after_workers

            keep = bool(get_option(self.config, "slurmflox_keep"))
            try:
                sweep_after_workers(self.state.spec, self.state.run_id, keep=keep)
            except Exception as exc:
                if not interrupted:
                    raise
                progress_printer(self.config)(f"interrupted: the run's jobs could not be swept: {exc}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for reason, count in self.state.deselected.reasons.items():
            what = "test(s)" if reason == NOT_ACCEPTANCE else "acceptance check(s)"
            terminalreporter.write_line(f"slurmflox: {count} {what} deselected: {reason}")
