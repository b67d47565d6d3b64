"""Sign-off evidence: the HTML report, JUnit XML and evidence.json of an acceptance run, and the sign-off verdict.

Every acceptance run writes ``<reports>/<run-id>/``::

    report.html     self-contained pytest-html report: environment table, sign-off summary, per-check evidence
    junit.xml       pytest's JUnit XML (xunit2); each check carries its group and evidence as properties
    evidence.json   schema ``slurmflox-evidence/1`` (schemas/evidence.json): run metadata, every check with its
                    requirement id, verdict, evidence and skip reason, and the per-group sign-off summary
    logs/           outputs longer than :data:`LONG_OUTPUT` characters, linked from the HTML and evidence.json

Why reports are built from test *reports* only: under pytest-xdist the controller never runs a check, so
everything it writes comes from what the workers serialize (``user_properties``). The same code path then serves
a single-process run.

A SKIP is never a PASS: a group is PASS only when every one of its checks passed. With ``--slurmflox-signoff`` a
required group that skipped, failed or did not run makes the verdict NOT SIGNED OFF and the exit status non-zero.

Secrets: everything written is passed through the session's :class:`~pytest_slurmflox.evidence.Redactor`, which
learns the deployment's key files (munge key, SSH private keys, kubeconfig) at session start; after the artifacts
are written they are scanned for those secrets (:func:`scan_for_secrets`) and a finding fails the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .secrets import REDACTED, Leak, Needle, Redactor, scan_for_secrets, secret_needles
from .state import Workdir, atomic_write

SCHEMA_ID = "slurmflox-evidence/1"
#: Outputs longer than this go to logs/ as files; the HTML and evidence.json keep an excerpt and a link.
LONG_OUTPUT = 4000
EXCERPT = 1500

PASS, FAIL, SKIP, NOT_RUN = "PASS", "FAIL", "SKIP", "NOT RUN"
SIGNED_OFF, NOT_SIGNED_OFF = "SIGNED OFF", "NOT SIGNED OFF"
NO_GROUP = "-"


def schema_path(name: str) -> Path:
    """A schema shipped in the package (``evidence.json``, ``junit.json``)."""
    return Path(__file__).parent / "schemas" / name


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text())


# ------------------------------------------------------------------------------------------------ paths
@dataclass(frozen=True)
class ReportPaths:
    """Where one run's artifacts go."""

    root: Path

    @property
    def html(self) -> Path:
        return self.root / "report.html"

    @property
    def junit(self) -> Path:
        return self.root / "junit.xml"

    @property
    def evidence(self) -> Path:
        return self.root / "evidence.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def artifacts(self) -> list[Path]:
        """Every file of the run directory (what a secret scan must cover)."""
        return sorted(p for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else []


# ------------------------------------------------------------------------------------------------ checks
@dataclass
class Check:
    """One acceptance check, folded from its setup/call/teardown reports."""

    nodeid: str
    group: str | None = None
    verdict: str = PASS
    phase: str = "call"  #: the phase that decided a non-PASS verdict
    reason: str = ""  #: skip reason, or the first line of the failure
    failure: str = ""  #: full failure text (redacted)
    duration: float = 0.0
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @property
    def requirement_id(self) -> str:
        """Group plus node id: stable across runs, and says which requirement the check stands for."""
        return f"{self.group or NO_GROUP}:{self.nodeid}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "requirement_id": self.requirement_id,
            "group": self.group,
            "nodeid": self.nodeid,
            "verdict": self.verdict,
            "phase": self.phase,
            "skip_reason": self.reason if self.verdict == SKIP else None,
            "failure": (self.failure or self.reason) if self.verdict == FAIL else None,
            "duration": round(self.duration, 4),
            "evidence": self.evidence,
        }


def _props(report: Any) -> list[tuple[str, Any]]:
    return [(p[0], p[1]) for p in getattr(report, "user_properties", []) or [] if len(p) == 2]


def skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return reason.removeprefix("Skipped: ")


def failure_line(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return "failed"


@dataclass
class CheckCollector:
    """Folds the stream of test reports into :class:`Check` objects, in the order checks started."""

    checks: dict[str, Check] = field(default_factory=dict)
    facts: dict[str, str] = field(default_factory=dict)  #: target facts reported by whichever process had them
    collect_errors: list[str] = field(default_factory=list)

    def add(self, report: Any) -> Check:
        check = self.checks.setdefault(report.nodeid, Check(nodeid=report.nodeid))
        check.duration += float(getattr(report, "duration", 0.0) or 0.0)
        for name, value in _props(report):
            if name == "slurmflox_group":
                check.group = str(value)
            elif name == "slurmflox_evidence" and isinstance(value, str):
                try:
                    check.evidence.extend(json.loads(value))
                except ValueError:
                    check.evidence.append({"command": "(unreadable evidence)", "stdout": value[:EXCERPT]})
            elif name == "slurmflox_facts" and isinstance(value, str):
                with contextlib.suppress(ValueError):
                    self.facts.update({str(k): str(v) for k, v in json.loads(value).items()})
        xfail = getattr(report, "wasxfail", None)
        if report.when == "setup":
            if report.failed:
                check.verdict, check.phase = FAIL, "setup"
                check.reason, check.failure = "error in setup: " + failure_line(report), report.longreprtext
            elif report.skipped:
                check.verdict, check.phase, check.reason = SKIP, "setup", skip_reason(report)
        elif report.when == "call":
            if report.failed:
                check.verdict, check.phase = FAIL, "call"
                check.reason, check.failure = failure_line(report), report.longreprtext
            elif report.skipped:
                check.verdict, check.phase = SKIP, "call"
                check.reason = f"expected failure: {xfail}" if xfail is not None else skip_reason(report)
        elif report.when == "teardown" and report.failed and check.verdict != FAIL:
            check.verdict, check.phase = FAIL, "teardown"
            check.reason, check.failure = "error in teardown: " + failure_line(report), report.longreprtext
        return check

    def group_of(self, nodeid: str) -> str | None:
        check = self.checks.get(nodeid)
        return check.group if check else None


# ------------------------------------------------------------------------------------------------ sign-off
@dataclass(frozen=True)
class GroupSummary:
    group: str
    title: str
    required: bool
    verdict: str
    counts: Mapping[str, int]
    reasons: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "title": self.title,
            "required": self.required,
            "verdict": self.verdict,
            "counts": dict(self.counts),
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class SignOff:
    requested: bool
    verdict: str
    groups: tuple[GroupSummary, ...]
    reasons: tuple[str, ...]  #: why it is not signed off (empty when it is)
    required: tuple[str, ...]

    @property
    def signed(self) -> bool:
        return self.verdict == SIGNED_OFF


def group_verdict(checks: Iterable[Check]) -> str:
    verdicts = [c.verdict for c in checks]
    if not verdicts:
        return NOT_RUN
    if FAIL in verdicts:
        return FAIL
    if SKIP in verdicts:
        return SKIP
    return PASS


def _group_reasons(checks: list[Check]) -> tuple[str, ...]:
    reasons: dict[str, int] = {}
    for check in checks:
        if check.verdict == FAIL:
            reasons[f"FAIL {check.nodeid.rsplit('::', 1)[-1]}: {check.reason}"] = 1
        elif check.verdict == SKIP:
            key = f"SKIP: {check.reason}"
            reasons[key] = reasons.get(key, 0) + 1
    return tuple(f"{text} (x{n})" if n > 1 else text for text, n in reasons.items())


def decide(
    checks: Iterable[Check],
    *,
    requested: bool,
    named_groups: Iterable[str] | None = None,
    workloads_given: bool = False,
    collect_errors: Iterable[str] = (),
) -> SignOff:
    """The sign-off verdict.

    Required groups are :data:`plugin.REQUIRED_GROUPS` that were selected: those named by ``--slurmflox-groups``
    when given, else those that had checks in this run. TW is required only when a workload corpus was given (its
    checks do not exist otherwise). Signed off only if every required group PASSed (a SKIP is not a PASS), nothing
    failed anywhere and nothing failed to collect.
    """
    from .plugin import GROUPS, REQUIRED_GROUPS

    checks = list(checks)
    by_group: dict[str, list[Check]] = {}
    for check in checks:
        by_group.setdefault(check.group or NO_GROUP, []).append(check)
    selected = set(named_groups) if named_groups is not None else set(by_group)
    required = tuple(g for g in REQUIRED_GROUPS if g in selected and (g != "TW" or workloads_given))
    order = [g for g in GROUPS if g in by_group or g in required] + ([NO_GROUP] if NO_GROUP in by_group else [])
    groups = []
    for g in order:
        members = by_group.get(g, [])
        counts = {v: sum(1 for c in members if c.verdict == v) for v in (PASS, FAIL, SKIP)}
        reasons = _group_reasons(members) or (("no check of this group ran",) if not members else ())
        groups.append(
            GroupSummary(
                group=g,
                title=GROUPS.get(g, "acceptance checks without a group"),
                required=g in required,
                verdict=group_verdict(members),
                counts=counts,
                reasons=reasons,
            )
        )
    why: list[str] = [f"collection error: {e}" for e in collect_errors]
    if not required:
        why.append("no required acceptance group was run")
    for summary in groups:
        if summary.required and summary.verdict != PASS:
            why.append(f"required group {summary.group} is {summary.verdict}: " + "; ".join(summary.reasons))
        elif not summary.required and summary.verdict == FAIL:
            why.append(f"group {summary.group} FAILED: " + "; ".join(summary.reasons))
    return SignOff(
        requested=requested,
        verdict=NOT_SIGNED_OFF if why else SIGNED_OFF,
        groups=tuple(groups),
        reasons=tuple(why),
        required=required,
    )


def summary_lines(signoff: SignOff, run_id: str) -> list[str]:
    """The sign-off summary as terminal lines."""
    lines = []
    for g in signoff.groups:
        c = g.counts
        mark = "*" if g.required else " "
        lines.append(
            f"{mark}{g.group:<5} {g.verdict:<8} pass {c[PASS]:>2}  fail {c[FAIL]:>2}  skip {c[SKIP]:>2}  {g.title}"
        )
        lines.extend(f"         {reason}" for reason in g.reasons)
    mode = "sign-off requested" if signoff.requested else "sign-off not requested (--slurmflox-signoff)"
    lines.append(f"verdict for run {run_id}: {signoff.verdict} ({mode}; * = required group)")
    lines.extend(f"  - {reason}" for reason in signoff.reasons)
    return lines


def summary_html(signoff: SignOff, run_id: str, paths: ReportPaths | None = None) -> str:
    """The sign-off summary for the top of the HTML report (escaped; no newlines that pre-wrap would show)."""
    e = html.escape
    colour = "#2e7d32" if signoff.signed else "#c62828"
    mode = "sign-off requested" if signoff.requested else "sign-off not requested"
    rows = "".join(
        f'<tr class="sfx-group sfx-{e(g.verdict.lower().replace(" ", "-"))}"><td>{e(g.group)}</td>'
        f"<td>{'required' if g.required else 'optional'}</td><td><b>{e(g.verdict)}</b></td>"
        f"<td>{g.counts[PASS]}</td><td>{g.counts[FAIL]}</td><td>{g.counts[SKIP]}</td>"
        f"<td>{e(g.title)}<br><small>{'<br>'.join(e(r) for r in g.reasons)}</small></td></tr>"
        for g in signoff.groups
    )
    reasons = "".join(f"<li>{e(r)}</li>" for r in signoff.reasons)
    return (
        f'<div id="slurmflox-signoff"><h2>Sign-off summary</h2>'
        f'<p id="slurmflox-verdict" style="font-size:1.3em;color:{colour}"><b>{e(signoff.verdict)}</b>'
        f" &mdash; run {e(run_id)} ({e(mode)})</p>"
        + (f'<ul id="slurmflox-reasons">{reasons}</ul>' if reasons else "")
        + '<table id="slurmflox-groups" border="1" style="border-collapse:collapse">'
        "<tr><th>Group</th><th>Required</th><th>Verdict</th><th>Pass</th><th>Fail</th><th>Skip</th>"
        f"<th>Requirement / reasons</th></tr>{rows}</table>"
        + (
            f'<p>Machine-readable: <a href="{e(paths.evidence.name)}">{e(paths.evidence.name)}</a>, '
            f'<a href="{e(paths.junit.name)}">{e(paths.junit.name)}</a></p>'
            if paths
            else ""
        )
        + "</div>"
    )


# ------------------------------------------------------------------------------------------------ evidence
def _slug(nodeid: str) -> str:
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-80:].strip("_") + "-" + digest


def externalize(records: list[dict[str, Any]], nodeid: str, logs: Path, redact: Redactor) -> list[dict[str, Any]]:
    """Redact every record again (defence in depth) and move long outputs into ``logs/`` files."""
    out = []
    for index, record in enumerate(records):
        rec = {k: (redact(v) if isinstance(v, str) else v) for k, v in record.items()}
        for stream in ("stdout", "stderr"):
            text = rec.get(stream) or ""
            if len(text) > LONG_OUTPUT:
                name = f"{_slug(nodeid)}-{index:03d}.{stream}.txt"
                atomic_write(logs / name, text)
                rec[f"{stream}_file"] = f"logs/{name}"
                rec[f"{stream}_chars"] = len(text)
                rec[stream] = text[:EXCERPT] + f"\n... [{len(text) - EXCERPT} more characters in logs/{name}]"
        out.append(rec)
    return out


def evidence_html(records: list[dict[str, Any]]) -> str:
    """Per-check evidence for the HTML: each command, where and as whom, exit status, output, duration."""
    e = html.escape
    if not records:
        return '<div class="slurmflox-evidence"><b>Evidence:</b> no command was recorded for this check</div>'
    parts = [f'<div class="slurmflox-evidence"><h4>Evidence: {len(records)} command(s)</h4>']
    for rec in records:
        status = rec.get("exit_status")
        colour = "#2e7d32" if status == 0 else "#c62828"
        parts.append(
            '<div class="sfx-command" style="margin:4px 0;border-left:3px solid #999;padding-left:6px">'
            f'<code class="sfx-cmd">$ {e(str(rec.get("command", "")))}</code><br>'
            f'<small>as <b class="sfx-user">{e(str(rec.get("user", "")))}</b> on '
            f'<b class="sfx-where">{e(str(rec.get("where", "")))}</b>, '
            f'<span class="sfx-exit" style="color:{colour}">exit {e(str(status))}</span>, '
            f"{float(rec.get('duration') or 0):.2f}s</small>"
        )
        for stream in ("stdout", "stderr"):
            text = rec.get(stream) or ""
            link = rec.get(f"{stream}_file")
            if text.strip():
                parts.append(
                    f'<div>{stream}:</div><pre class="sfx-{stream}" style="margin:0;white-space:pre-wrap">'
                    f"{e(text.rstrip())}</pre>"
                )
            if link:
                parts.append(
                    f'<a class="sfx-log" href="{e(link)}">full {stream} ({rec.get(f"{stream}_chars")} chars)</a>'
                )
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def scrub(value: Any, redact: Redactor) -> Any:
    """Redact every string inside a JSON-like value."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: scrub(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, redact) for v in value]
    return value


# ------------------------------------------------------------------------------------------------ secrets
#: File names that hold credentials wherever they appear in a work dir (the local substrate keeps its Slurm auth
#: key and the login node's host key under local/, the QEMU substrate kubeadm's keys under k8s/).
_SECRET_NAME = re.compile(r"(.*\.key|id_[^.]+|ssh_host_.*_key|kubeconfig|admin\.conf|.*\.pem)")
_SECRET_MAX = 1 << 20


def _secret_named(path: Path) -> bool:
    return bool(_SECRET_NAME.fullmatch(path.name)) and not path.name.endswith(".pub")


def secret_files(workdir: Workdir | None, spec: Any = None) -> list[Path]:
    """The credential files of a deployment / target: what the redactor learns and the scan looks for.

    The work dir's well-known secrets (munge key, SSH key, kubeconfig), every credential-named file below it
    (``*.key``, ``id_*``, ``ssh_host_*_key``, ``kubeconfig``, ``*.pem``), and the target file's key and kubeconfig.
    """
    paths: list[Path] = []
    roots = {w for w in (workdir, Workdir(spec.workdir) if spec is not None and spec.workdir else None) if w}
    for wd in sorted(roots, key=lambda w: str(w.root)):
        paths += [wd.munge_key, wd.ssh_key, wd.kubeconfig]
        if wd.root.is_dir():
            paths += sorted(p for p in wd.root.rglob("*") if _secret_named(p))
    if spec is not None:
        paths.append(spec.login.key)
        if spec.admin is not None:
            paths.append(spec.admin.key)
        if spec.kubernetes is not None and spec.kubernetes.kubeconfig is not None:
            paths.append(spec.kubernetes.kubeconfig)
    seen: list[Path] = []
    for p in paths:
        try:
            small = p.is_file() and not p.is_symlink() and p.stat().st_size <= _SECRET_MAX
        except OSError:
            small = False
        if small and p not in seen:
            seen.append(p)
    return seen


def _load_spec(path: Path | None) -> Any:
    if path is None:
        return None
    from .target import TargetError, load_target

    try:
        return load_target(path)
    except TargetError:
        return None


# ------------------------------------------------------------------------------------------------ validation
def _element(node: Any) -> dict[str, Any]:
    return {
        "tag": node.tag,
        "attrib": dict(node.attrib),
        "text": node.text,
        "children": [_element(child) for child in node],
    }


def junit_document(path: Path) -> dict[str, Any]:
    """JUnit XML parsed into ``{tag, attrib, text, children}``, the form schemas/junit.json describes."""
    import xml.etree.ElementTree as ET

    return _element(ET.parse(path).getroot())


def _schema_errors(doc: Any, schema_name: str) -> list[str]:
    import jsonschema  # a test dependency: validation is for tests and for auditors, not needed to run

    validator = jsonschema.Draft202012Validator(load_schema(schema_name))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(doc)]


def validate_junit(path: Path) -> list[str]:
    """Schema errors of a JUnit file, plus the counting rules: each suite's tests/failures/errors/skipped equal
    what its test cases carry."""
    try:
        doc = junit_document(path)
    except Exception as exc:
        return [f"not well-formed XML: {exc}"]
    errors = _schema_errors(doc, "junit.json")
    if errors:
        return errors
    for suite in doc["children"]:
        cases = [c for c in suite["children"] if c["tag"] == "testcase"]
        outcomes = [[o["tag"] for o in c["children"] if o["tag"] in ("failure", "error", "skipped")] for c in cases]
        want = {
            "tests": len(cases),
            "failures": sum(o.count("failure") for o in outcomes),
            "errors": sum(o.count("error") for o in outcomes),
            "skipped": sum(o.count("skipped") for o in outcomes),
        }
        for key, count in want.items():
            if int(suite["attrib"][key]) != count:
                errors.append(f"testsuite {suite['attrib']['name']}: {key}={suite['attrib'][key]}, cases say {count}")
    return errors


def validate_evidence(path: Path) -> list[str]:
    """Schema errors of an evidence.json, plus: each group's counts equal its checks' verdicts."""
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    errors = _schema_errors(doc, "evidence.json")
    if errors:
        return errors
    for group in doc["groups"]:
        members = [c for c in doc["checks"] if (c["group"] or NO_GROUP) == group["group"]]
        for verdict in (PASS, FAIL, SKIP):
            count = sum(1 for c in members if c["verdict"] == verdict)
            if group["counts"][verdict] != count:
                errors.append(f"group {group['group']}: {verdict} count {group['counts'][verdict]}, checks say {count}")
    return errors


# ------------------------------------------------------------------------------------------------ environment
def image_digest(image: str) -> str | None:
    match = re.search(r"@(sha256:[0-9a-f]{64})", image)
    return match.group(1) if match else None


def target_metadata(run_id: str, substrate: str | None, target_path: Path | None, spec: Any) -> dict[str, str]:
    """Environment-table rows known from the target file alone (the controller may never connect)."""
    rows = {"Run id": run_id, "Substrate": substrate or "unknown"}
    if target_path is None or spec is None:
        rows["Target"] = str(target_path) if target_path else "none"
        return rows
    exp = spec.expect
    rows.update(
        {
            "Target": f"{spec.name} ({target_path})",
            "Substrate": spec.substrate,
            "Login endpoint": f"{spec.login.user}@{spec.login.host}:{spec.login.port}",
            "Partition": spec.partition,
            "Worker image": exp.image,
            "Worker image digest": image_digest(exp.image) or "not pinned by digest",
            "Environment reference": exp.settings.worker_flox_env,
            "Environment generation": str(exp.settings.worker_flox_generation),
            "Runtime revision (expected)": exp.revision,
            "Worker replicas (expected)": str(exp.replicas),
        }
    )
    if spec.kubernetes is not None:
        rows["Kubernetes namespace / NodeSet"] = f"{spec.kubernetes.namespace} / {spec.kubernetes.nodeset}"
    return rows


#: Rows filled from the live target; shown as unknown when no check connected.
FACT_ROWS = (
    "Slurm version",
    "Kubernetes version",
    "Slurm chart version",
    "Slinky operator version",
    "Worker images (observed)",
    "Runtime revision (desired by owner)",
)


def target_facts(target: Any) -> dict[str, str]:
    """What only a live connection tells: versions and what the worker owner reports. Best effort, each fact
    on its own: a fact that cannot be read says why instead of failing the run."""
    facts: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            value = fn()
            if value:
                facts[name] = str(value)
        except Exception as exc:
            facts[name] = f"unknown ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"

    if target.why_missing("slurm") is None:
        attempt("Slurm version", target.slurm.version)
    else:
        facts["Slurm version"] = f"unknown ({target.why_missing('slurm')})"
    kube = target.kube if target.why_missing("kubernetes") is None else None
    if kube is not None:
        from kubernetes import client

        attempt("Kubernetes version", lambda: client.VersionApi(kube.core.api_client).get_code().git_version)

        def chart() -> str:
            labels = [(ns.get("metadata") or {}).get("labels") or {} for ns in kube.nodesets()]
            return ", ".join(sorted({lab["helm.sh/chart"] for lab in labels if "helm.sh/chart" in lab})) or "unknown"

        def operator() -> str:
            images = set()
            for pod in kube.pods_all_namespaces():
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if "operator" in labels.get("app.kubernetes.io/name", ""):
                    images |= {c.get("image", "") for c in (pod.get("spec") or {}).get("containers", [])}
            return ", ".join(sorted(images)) or "not found"

        attempt("Slurm chart version", chart)
        attempt("Slinky operator version", operator)
    else:
        why = target.why_missing("kubernetes")
        for name in ("Kubernetes version", "Slurm chart version", "Slinky operator version"):
            facts[name] = f"not applicable ({why})"
    if target.pool is not None:
        attempt("Worker images (observed)", lambda: ", ".join(sorted({w.image or "?" for w in target.pool.workers()})))
        attempt("Runtime revision (desired by owner)", target.pool.desired_revision)
    return facts


# ------------------------------------------------------------------------------------------------ plugins
def reports_wanted(config: pytest.Config) -> bool:
    """Whether this invocation runs acceptance checks (decided at configure time, when pytest-html and junitxml
    read their output paths): a target, a substrate, groups, sign-off, or a mark expression naming acceptance."""
    from .plugin import GROUPS, get_option

    for dest in ("slurmflox_target", "slurmflox_up", "slurmflox_groups", "slurmflox_signoff"):
        if get_option(config, dest):
            return True
    tokens = re.findall(r"[A-Za-z0-9_]+", config.option.markexpr or "")
    return any(t in GROUPS or t == "acceptance" for i, t in enumerate(tokens) if i == 0 or tokens[i - 1] != "not")


def configure(config: pytest.Config) -> None:
    """Called from plugin.pytest_configure (tryfirst, so before pytest-html and junitxml read their paths)."""
    from .plugin import get_option, session_state
    from .workloads import WorkloadError, load_corpus

    workloads = get_option(config, "slurmflox_workloads")
    if workloads:
        try:
            load_corpus(Path(workloads).expanduser())
        except WorkloadError as exc:
            raise pytest.UsageError(f"--slurmflox-workloads: {exc} (nothing was run)") from None
    config.pluginmanager.register(SuitePlugin(config), "slurmflox-suite")
    if hasattr(config, "workerinput") or config.option.collectonly or not reports_wanted(config):
        return
    state = session_state(config)
    base = Path(get_option(config, "slurmflox_reports") or "reports").expanduser()
    if not base.is_absolute():
        base = Path(config.invocation_params.dir) / base
    paths = ReportPaths(base / state.run_id)
    paths.root.mkdir(parents=True, exist_ok=True)
    if hasattr(config.option, "htmlpath") and not config.option.htmlpath:
        config.option.htmlpath = str(paths.html)
        config.option.self_contained_html = True
    if not getattr(config.option, "xmlpath", None):
        config.option.xmlpath = str(paths.junit)
    config.pluginmanager.register(ReportPlugin(config, paths), "slurmflox-report")


def _marks(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class SuitePlugin:
    """Runs in every process (xdist workers too): teaches the redactor the deployment's secrets, keeps TW checks
    from existing without a corpus, and reports the live target's facts once per process."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.facts_sent = False

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from .plugin import session_state

        state = session_state(self.config)
        for path in secret_files(state.workdir, _load_spec(state.target_path)):
            state.evidence.redact.add_file(path)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector: Any, name: str, obj: object) -> list[Any] | None:
        """Without --slurmflox-workloads a TW acceptance check yields no items at all: not SKIPped, not
        deselected, not even counted as collected (the TW group does not exist in such a run)."""
        from .plugin import get_option

        if not callable(obj) or not name.startswith("test") or get_option(self.config, "slurmflox_workloads"):
            return None
        module = getattr(collector, "module", None)
        marks = [*_marks(getattr(module, "pytestmark", [])), *_marks(getattr(obj, "pytestmark", []))]
        names = {getattr(mark, "name", None) for mark in marks}
        return [] if {"TW", "acceptance"} <= names else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Backstop for TW checks marked in ways the collector hook cannot see (e.g. by a conftest)."""
        from .plugin import get_option

        if not get_option(self.config, "slurmflox_workloads"):
            items[:] = [i for i in items if not (i.get_closest_marker("TW") and i.get_closest_marker("acceptance"))]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when == "teardown" and not self.facts_sent:
            from .plugin import session_state

            target = session_state(item.config).target
            if target is not None:
                self.facts_sent = True
                report.user_properties.append(("slurmflox_facts", json.dumps(target_facts(target))))
        return report


class ReportPlugin:
    """The controller's report writer (see the module docstring)."""

    def __init__(self, config: pytest.Config, paths: ReportPaths) -> None:
        self.config = config
        self.paths = paths
        self.collector = CheckCollector()
        self.session: pytest.Session | None = None
        self.signoff: SignOff | None = None
        self.html_report: Any = None
        self.started = time.time()

    # -- helpers ------------------------------------------------------------------------------------
    @property
    def state(self) -> Any:
        from .plugin import session_state

        return session_state(self.config)

    @property
    def redact(self) -> Redactor:
        return self.state.evidence.redact

    def _metadata(self) -> dict[str, Any] | None:
        try:
            from pytest_metadata.plugin import metadata_key
        except ImportError:
            return None
        return self.config.stash.get(metadata_key, None)

    def _env_rows(self) -> dict[str, str]:
        state = self.state
        rows = target_metadata(state.run_id, state.substrate, state.target_path, _load_spec(state.target_path))
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
        self.session = session
        self._update_metadata()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collector.collect_errors.append(f"{report.nodeid or '(session)'}: {failure_line(report)}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: Any) -> None:
        """Redact what other reporters (terminal, JUnit, HTML) will write, then fold the report into a check."""
        redact = self.redact
        if report.longrepr is not None:
            if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
                path, line, reason = report.longrepr
                report.longrepr = (path, line, redact(str(reason)))
            else:
                text = str(report.longrepr)
                cleaned = redact(text)
                if cleaned != text:
                    report.longrepr = cleaned
        report.sections = [(title, redact(body)) for title, body in report.sections]
        report.user_properties = [(name, _redact_property(name, value, redact)) for name, value in _props(report)]
        check = self.collector.add(report)
        if report.when == "teardown":
            check.evidence = externalize(check.evidence, check.nodeid, self.paths.logs, redact)
            report.extras = [*getattr(report, "extras", []), _html_extra(evidence_html(check.evidence))]
            # JUnit takes the teardown report's properties: the group, and the evidence with long outputs linked
            props = [(n, v) for n, v in report.user_properties if n not in ("slurmflox_evidence", "slurmflox_group")]
            if check.group:
                props.append(("slurmflox_group", check.group))
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
        cells.insert(2, f'<td class="col-group">{html.escape(group)}</td>')

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.signoff is not None:
            prefix.insert(0, summary_html(self.signoff, self.state.run_id, self.paths))

    # -- the end ------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Decide, write evidence.json, set the exit status; runs before JUnit and HTML are written."""
        from .plugin import get_option

        groups_opt = get_option(self.config, "slurmflox_groups")
        named = [g.strip() for g in groups_opt.split(",") if g.strip()] if groups_opt else None
        requested = bool(get_option(self.config, "slurmflox_signoff"))
        checks = list(self.collector.checks.values())
        self.signoff = decide(
            checks,
            requested=requested,
            named_groups=named,
            workloads_given=bool(get_option(self.config, "slurmflox_workloads")),
            collect_errors=self.collector.collect_errors,
        )
        self._update_metadata()
        if self.html_report is not None:
            self.html_report.title = f"slurmflox sign-off {self.state.run_id}: {self.signoff.verdict}"
        if requested and not self.signoff.signed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        self._write_evidence(checks, session)
        self._junit_properties()

    def _junit_properties(self) -> None:
        try:
            from _pytest.junitxml import xml_key
        except ImportError:  # pragma: no cover - pytest internals moved
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is not None and self.signoff is not None:
            xml.add_global_property("slurmflox_run_id", self.state.run_id)
            xml.add_global_property("slurmflox_verdict", self.signoff.verdict)
            xml.add_global_property("slurmflox_evidence_schema", SCHEMA_ID)

    def _write_evidence(self, checks: list[Check], session: pytest.Session) -> None:
        from . import __name__ as package
        from .plugin import GROUPS

        assert self.signoff is not None
        state = self.state
        finished = time.time()
        try:
            from importlib.metadata import version

            plugin_version = version("pytest-slurmflox")
        except Exception:
            plugin_version = "unknown"
        doc = {
            "schema": SCHEMA_ID,
            "run": {
                "id": state.run_id,
                "started": _iso(self.started),
                "finished": _iso(finished),
                "duration": round(finished - self.started, 3),
                "tool": {"name": package, "version": plugin_version, "pytest": pytest.__version__},
                "target": self._env_rows(),
                "exit_status": int(session.exitstatus),
                "signoff_requested": self.signoff.requested,
                "verdict": self.signoff.verdict,
                "verdict_reasons": list(self.signoff.reasons),
                "required_groups": list(self.signoff.required),
                "artifacts": {
                    "html": self.paths.html.name,
                    "junit": self.paths.junit.name,
                    "logs": self.paths.logs.name + "/",
                },
            },
            "groups": [g.as_dict() for g in self.signoff.groups],
            "checks": [c.as_dict() for c in checks],
            "known_groups": dict(GROUPS),
        }
        atomic_write(self.paths.evidence, json.dumps(scrub(doc, self.redact), indent=2) + "\n")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Runs after JUnit and HTML are written: print the summary, then scan every artifact for secrets."""
        if self.signoff is None:
            return
        verdict_ok = self.signoff.signed or not self.signoff.requested
        terminalreporter.write_sep("=", "slurmflox sign-off summary", bold=True)
        for line in summary_lines(self.signoff, self.state.run_id):
            terminalreporter.write_line(line)
        leaks = scan_for_secrets(
            self.paths.artifacts(), secret_needles(secret_files(self.state.workdir, _load_spec(self.state.target_path)))
        )
        for leak in leaks:
            terminalreporter.write_line(f"SECRET LEAK: {leak.path} contains {leak.label}", red=True, bold=True)
        if leaks and self.session is not None:
            self.session.exitstatus = pytest.ExitCode.TESTS_FAILED
        terminalreporter.write_line(
            f"slurmflox: artifacts in {self.paths.root}: {self.paths.html.name}, {self.paths.junit.name}, "
            f"{self.paths.evidence.name}" + ("" if leaks else "; secret scan clean"),
            green=verdict_ok and not leaks,
            red=not verdict_ok or bool(leaks),
        )


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


def _html_extra(content: str) -> dict[str, Any]:
    try:
        from pytest_html import extras

        return extras.html(content)
    except ImportError:  # pragma: no cover - pytest-html is a dependency
        return {"name": "evidence", "format_type": "html", "content": content, "mime_type": None, "extension": None}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


__all__ = [
    "FAIL",
    "NOT_SIGNED_OFF",
    "PASS",
    "REDACTED",
    "SCHEMA_ID",
    "SIGNED_OFF",
    "SKIP",
    "Check",
    "CheckCollector",
    "GroupSummary",
    "Leak",
    "Needle",
    "ReportPaths",
    "SignOff",
    "decide",
    "load_schema",
    "scan_for_secrets",
    "secret_files",
    "secret_needles",
]
