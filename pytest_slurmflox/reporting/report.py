"""The controller's report writer: HTML (through pytest-html), JUnit XML (through pytest's junitxml) and
evidence.json, plus the secret scan of everything written.

Every run writes ``<reports>/<run-id>/`` (:mod:`~pytest_slurmflox.reporting.artifacts`). The writer gets all it needs
in its constructor (paths, session state, the options that decide the verdict) and imports no plugin module.
A judge at the session's end (TB's comparison) adds its check to the collector and fields to its record
(``extra_records``) from a plugin registered later, whose ``tryfirst`` sessionfinish pluggy calls first (LIFO).

Secrets: all written passes the session's :class:`~pytest_slurmflox.model.secrets.Redactor` (it learns the key files:
munge, SSH private keys, kubeconfig); the artifacts are then scanned for them (``scan_for_secrets``): a find fails.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..model.evidence import JUDGED, METRICS
from ..model.groups import GROUPS
from ..model.quarantine import FAILED_WORKERS, QUARANTINED
from ..model.secrets import Redactor, scan_for_secrets, secret_files, secret_needles
from ..model.workdir import atomic_write
from .artifacts import (
    LONG_OUTPUT,
    ReportPaths,
    evidence_html,
    externalize,
    html_extra,
    iso,
    notes_html,
    plugin_version,
    report_style,
    scrub,
    summary_html,
)
from .charts import charts_html
from .envfacts import FACT_ROWS, target_metadata
from .profiles import NOT_APPLICABLE, Profile, profile_of, table_lines
from .quarantine import document, section_html, terminal_lines, with_quarantine
from .sessionstate import SessionState
from .signing import Signer, SigningError, sign_run, signed_html
from .signoff import (
    EXCERPT,
    Check,
    CheckCollector,
    SignOff,
    decide,
    failure_line,
    report_properties,
    skip_reason,
    summary_lines,
)
from .timeline import TOP_END, TOP_START, hoist_top, timeline_html
from .validation import SCHEMA_ID

__all__ = ["LONG_OUTPUT", "ReportPaths", "ReportWriter", "SignoffRequest", "register_report_writer"]


@dataclass(frozen=True)
class SignoffRequest:
    """What the user asked of the verdict: sign-off mode and whether a workload corpus exists."""

    requested: bool
    workloads_given: bool
    signer: Signer | None = None  #: the key that signs the run's manifest (``--slurmflox-sign``), resolved already


class ReportWriter:
    """Folds the controller's test reports into checks and writes the run's artifacts (see the module docstring)."""

    def __init__(self, config: pytest.Config, paths: ReportPaths, state: SessionState, request: SignoffRequest):
        self.config = config
        self.paths = paths
        self.state = state
        self.request = request
        self.collector = CheckCollector()
        self.signoff: SignOff | None = None
        self.html_report: Any = None
        self.started = time.time()
        self._profile: Profile | None = None
        self.metrics: dict[str, list[Any]] = {}  #: node id -> its measured values (:data:`METRICS`, group TB)
        self.judged: dict[str, list[str]] = {}  #: node id -> what it compared (:data:`JUDGED`)
        self.failed_workers: dict[str, dict[str, str]] = {}  #: node id -> the workers its FAIL named, as data
        self.held: dict[str, str] = {}  #: workers the cohort left out as quarantined (worker -> reason)
        self.extra_records: dict[str, dict[str, Any]] = {}  #: node id -> more fields of its evidence.json record

    @property
    def profile(self) -> Profile:
        """The sign-off profile of this run's target (profiles.py), from the spec read at session start."""
        if self._profile is None:
            self._profile = profile_of(self.state.spec)
        return self._profile

    @property
    def redact(self) -> Redactor:
        return self.state.evidence.redact

    def _metadata(self) -> dict[str, Any] | None:
        try:
            from pytest_metadata.plugin import metadata_key
        except ImportError:
            return None
        found: dict[str, Any] | None = self.config.stash.get(metadata_key, None)
        return found

    def _env_rows(self) -> dict[str, str]:
        state = self.state
        rows = target_metadata(state.run_id, state.substrate, state.target_path, state.spec)
        for name in FACT_ROWS:
            rows[name] = self.collector.facts.get(name, "unknown (no check connected to the target)")
        return rows

    def _update_metadata(self) -> None:
        """The environment table shows exactly these rows (redacted, and escaped: pytest-html renders values as
        HTML); pytest-html keeps a reference to this dict, so updating it later still reaches the report."""
        metadata = self._metadata()
        if metadata is None:
            return
        for key, value in self._env_rows().items():
            metadata[key] = html.escape(self.redact(str(value)))
        for key in list(metadata):
            if isinstance(metadata[key], str):
                metadata[key] = self.redact(metadata[key])

    # -- session ------------------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._update_metadata()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collector.collect_errors.append(f"{report.nodeid or '(session)'}: {failure_line(report)}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: Any) -> None:
        """Redact what other reporters (terminal, JUnit, HTML) will write, then fold the report into a check."""
        redact = self.redact
        redact_longrepr(report, redact)
        mark_not_applicable(report, self.profile)
        report.sections = [(title, redact(body)) for title, body in report.sections]
        report.user_properties = [
            (name, _redact_property(name, value, redact)) for name, value in report_properties(report)
        ]
        check = self.collector.add(report)
        for name, value in report_properties(report):  # every later phase's report carries the same list
            if name == METRICS and isinstance(value, str) and value.startswith("["):
                self.metrics[check.nodeid] = json.loads(value)
            elif name == JUDGED and isinstance(value, str) and value.startswith("["):
                self.judged[check.nodeid] = [str(line) for line in json.loads(value)]
            elif name == FAILED_WORKERS and isinstance(value, str):
                self.failed_workers[check.nodeid] = {str(w): str(line) for w, line in json.loads(value).items()}
            elif name == QUARANTINED and isinstance(value, str):
                self.held.update({str(w): str(why) for w, why in json.loads(value).items()})
        if report.when == "teardown":
            check.evidence = externalize(check.evidence, check.nodeid, self.paths.logs, redact)
            report.extras = [*getattr(report, "extras", []), html_extra(evidence_html(check.evidence))]
            # JUnit takes the teardown report's properties (the group is among them, set once at collection):
            # the verdict, and the evidence with long outputs linked
            ours = ("slurmflox_evidence", "slurmflox_verdict")
            props = [(n, v) for n, v in report.user_properties if n not in ours]
            props.append(("slurmflox_verdict", check.verdict))
            props.append(("slurmflox_evidence", json.dumps(check.evidence)))
            report.user_properties = props

    # -- pytest-html --------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report: Any) -> None:
        self.html_report = report
        report.title = f"slurmflox acceptance run {self.state.run_id}"

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        cells.insert(2, '<th class="sortable" data-column-type="group">Group</th>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        group = self.collector.group_of(report.nodeid) or ""
        check = self.collector.checks.get(report.nodeid)
        if check is not None and check.verdict == NOT_APPLICABLE:  # pytest-html itself can only say "Skipped"
            group += f" ({NOT_APPLICABLE.lower()})"
        cells.insert(2, f'<td class="col-group">{html.escape(group)}</td>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_html(self, report: Any, data: list[str]) -> None:
        """A skipped check's log says its reason as text: pytest keeps a skip as a (path, line, reason) tuple, whose
        repr pytest-html would otherwise show."""
        if not (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
            return
        shown = html.escape(report.longreprtext) + "\n"
        check = self.collector.checks.get(report.nodeid)
        verdict = check.verdict if check is not None else "SKIP"
        reason = skip_reason(report)
        said = reason if reason.lower().startswith(verdict.lower()) else f"{verdict}: {reason}"
        text = html.escape(said) + "\n"
        data[:] = [text if entry == shown else entry for entry in data]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.signoff is not None:
            timeline = timeline_html(list(self.collector.checks.values()), self.state.up)
            notes = notes_html([self.redact(note) for note in self.state.notes])
            baselines = charts_html(v for values in self.metrics.values() for v in values)
            top = report_style() + summary_html(self.signoff, self.state.run_id, self.paths) + timeline + baselines
            top += section_html(self.state.quarantine, self.held) + notes
            top += signed_html(self.request.signer, self.paths.root) if self.request.signer else ""
            prefix.insert(0, f"{TOP_START}{top}{TOP_END}")

    # -- the end ------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Decide, write evidence.json, set the exit status; runs before JUnit and HTML are written."""
        checks = list(self.collector.checks.values())
        self.signoff = decide(
            checks,
            requested=self.request.requested,
            profile=self.profile,
            workloads_given=self.request.workloads_given,
            collect_errors=self.collector.collect_errors,
            deselected=self.state.deselected.groups,
            left_out=self.state.deselected.left_out(self.collector.checks),
        )
        self.signoff = with_quarantine(self.signoff, self.state.quarantine, self.held, self.state.retest)
        self._update_metadata()
        if self.html_report is not None:
            self.html_report.title = f"slurmflox sign-off {self.state.run_id}: {self.signoff.headline}"
        self.state.exit.unsigned = self.request.requested and not self.signoff.signed
        self.state.exit.nothing_ran = bool(self.signoff.one_reason)
        # the status the process will end with as far as known now (the session sets it; a leak comes later)
        self._write_evidence(checks, self.signoff, int(self.state.exit.settle(session.exitstatus)))
        self._junit_properties(self.signoff)

    def _junit_properties(self, signoff: SignOff) -> None:
        try:
            from _pytest.junitxml import xml_key
        except ImportError:  # pragma: no cover - pytest internals moved
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property("slurmflox_run_id", self.state.run_id)
            xml.add_global_property("slurmflox_verdict", signoff.verdict)
            xml.add_global_property("slurmflox_profile", signoff.profile)
            xml.add_global_property("slurmflox_not_applicable", ", ".join(signoff.not_applicable))
            xml.add_global_property("slurmflox_evidence_schema", SCHEMA_ID)

    def _write_evidence(self, checks: list[Check], signoff: SignOff, exit_status: int) -> None:
        finished = time.time()
        doc = {
            "schema": SCHEMA_ID,
            "run": {
                "id": self.state.run_id,
                "started": iso(self.started),
                "finished": iso(finished),
                "duration": round(finished - self.started, 3),
                "tool": {"name": __package__, "version": plugin_version(), "pytest": pytest.__version__},
                "target": self._env_rows(),
                "exit_status": exit_status,
                "signoff_requested": signoff.requested,
                "verdict": signoff.verdict,
                "verdict_line": signoff.headline,
                "verdict_reasons": list(signoff.reasons),
                "profile": {
                    "name": self.profile.name,
                    "target": self.profile.target,
                    "not_applicable_groups": dict(self.profile.groups),
                    "not_applicable_capabilities": dict(self.profile.absent),
                    "not_applicable": list(signoff.not_applicable),
                },
                "required_groups": list(signoff.required),
                "quarantine": document(self.state.quarantine, self.held, self.state.retest),
                "artifacts": {
                    "html": self.paths.html.name,
                    "junit": self.paths.junit.name,
                    "logs": self.paths.logs.name + "/",
                },
            },
            "groups": [g.as_dict() for g in signoff.groups],
            "checks": [self._check_record(c) for c in checks],
            "known_groups": dict(GROUPS),
        }
        atomic_write(self.paths.evidence, json.dumps(scrub(doc, self.redact), indent=2) + "\n")

    def _check_record(self, check: Check) -> dict[str, Any]:
        """A check in evidence.json, with its measured values (``metrics``), its comparisons (``judged``) and the
        fields other plugins add (``extra_records``) when it has any."""
        found, judged = self.metrics.get(check.nodeid), self.judged.get(check.nodeid)
        record = {**check.as_dict(), **({"metrics": found} if found else {}), **({"judged": judged} if judged else {})}
        return {**record, **self.extra_records.get(check.nodeid, {})}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs after JUnit and HTML are written: print the summary, then scan every artifact for secrets."""
        if self.signoff is None:
            return
        if self.paths.html.is_file():
            hoist_top(self.paths.html)
        verdict_ok = self.signoff.signed or not self.signoff.requested
        terminalreporter.write_sep("=", "slurmflox sign-off summary", bold=True)
        said = terminal_lines(self.state.quarantine, self.held)
        for line in [*table_lines(self.profile), *said, *summary_lines(self.signoff, self.state.run_id)]:
            terminalreporter.write_line(line)
        secrets = secret_files(self.state.workdir, self.state.spec)
        leaks = scan_for_secrets(self.paths.artifacts(), secret_needles(secrets))
        for leak in leaks:
            terminalreporter.write_line(f"SECRET LEAK: {leak.path} contains {leak.label}", red=True, bold=True)
        self.state.exit.leaks = [str(leak.path) for leak in leaks]  # the session fails the run on any
        terminalreporter.write_line(
            f"slurmflox: artifacts in {self.paths.root}: {self.paths.html.name}, {self.paths.junit.name}, "
            f"{self.paths.evidence.name}" + ("" if leaks else "; secret scan clean"),
            green=verdict_ok and not leaks,
            red=not verdict_ok or bool(leaks),
        )
        if self.request.signer is not None and not leaks:  # last: every artifact is written and final
            self._sign(terminalreporter, self.request.signer)

    def _sign(self, terminalreporter: Any, signer: Signer) -> None:
        """Sign the run's folder (reporting/signing.py); a signature that cannot be made fails the run."""
        assert self.signoff is not None
        state = self.state
        try:
            made = sign_run(
                self.paths.root,
                signer,
                run_id=state.run_id,
                plugin=f"pytest-slurmflox {plugin_version()}",
                verdict=self.signoff.headline,
                target=state.target_path,
                target_source=state.target_source,
            )
        except (SigningError, OSError) as exc:
            state.exit.sign_failed = str(exc)
            terminalreporter.write_line(f"slurmflox: NOT SIGNED: {exc}", red=True, bold=True)
            return
        terminalreporter.write_line(f"slurmflox: signed with {signer.describe()}: {made}")


def register_report_writer(
    config: pytest.Config, state: SessionState, reports: str | None, request: SignoffRequest
) -> ReportWriter:
    """Point pytest-html and JUnit at ``<reports>/<run-id>/`` (``reports`` relative to the invocation directory,
    ``reports/`` when None) unless the user named their own paths, and register the writer of evidence.json."""
    base = Path(reports or "reports").expanduser()
    if not base.is_absolute():
        base = Path(config.invocation_params.dir) / base
    paths = ReportPaths(base / state.run_id)
    paths.root.mkdir(parents=True, exist_ok=True)
    if hasattr(config.option, "htmlpath") and not config.option.htmlpath:
        config.option.htmlpath = str(paths.html)
        config.option.self_contained_html = True
    if not getattr(config.option, "xmlpath", None):
        config.option.xmlpath = str(paths.junit)
    writer = ReportWriter(config, paths, state, request)
    config.pluginmanager.register(writer, "slurmflox-report")
    return writer


def redact_longrepr(report: Any, redact: Redactor) -> None:
    """A failure or skip text as the terminal, JUnit and HTML will show it, redacted in place."""
    if report.longrepr is None:
        return
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, line, reason = report.longrepr
        report.longrepr = (path, line, redact(str(reason)))
        return
    text = str(report.longrepr)
    cleaned = redact(text)
    if cleaned != text:
        report.longrepr = cleaned


def mark_not_applicable(report: Any, profile: Profile) -> None:
    """A skip naming a capability this kind of target never has is reported as not applicable (terminal, JUnit's
    skipped message, HTML): its reason is rewritten before those reporters see it; the collector reads the same."""
    if not report.skipped or not (isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
        return
    path, line, reason = report.longrepr
    text = str(reason)
    prefix = "Skipped: " if text.startswith("Skipped: ") else ""
    rewritten = profile.not_applicable(text.removeprefix(prefix))
    if rewritten is not None:
        report.longrepr = (path, line, prefix + rewritten)


def _redact_property(name: str, value: Any, redact: Redactor) -> Any:
    """Evidence is JSON: redact its strings, not its text (a shape match must never eat JSON syntax)."""
    if not isinstance(value, str):
        return value
    if name == "slurmflox_evidence":
        try:
            return json.dumps(scrub(json.loads(value), redact))
        except ValueError:
            return json.dumps([{"command": "(unreadable evidence)", "stdout": redact(value)[:EXCERPT]}])
    return redact(value)
