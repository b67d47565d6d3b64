"""Sign-off: folding test reports into checks, and the verdict over the acceptance groups.

Why checks are folded from test *reports* only: under pytest-xdist the controller never runs a check, so
everything it decides comes from what the workers serialize (``user_properties``). The same code path then serves
a single-process run.

A SKIP is never a PASS: a group is PASS only when every one of its checks passed. With ``--slurmflox-signoff`` a
required group that skipped, failed or did not run makes the verdict NOT SIGNED OFF.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.groups import DESTRUCTIVE_GROUPS, GROUPS
from .profiles import NOT_APPLICABLE, NOT_APPLICABLE_PREFIX, UNKNOWN, Profile, profile_of

PASS, FAIL, SKIP, NOT_RUN = "PASS", "FAIL", "SKIP", "NOT RUN"
SIGNED_OFF, NOT_SIGNED_OFF = "SIGNED OFF", "NOT SIGNED OFF"
NO_GROUP = "-"
#: A skip whose reason starts with this is NOT RUN: the check needs an expectation the target does not declare
#: (never compared with a default, never PASS; suites/_capability.py ``declared``).
NOT_RUN_PREFIX = "not run: "
#: Evidence that cannot be parsed keeps this many characters of its text.
EXCERPT = 1500
#: A group's reason names at most this many checks that did not run (evidence.json's ``left_out`` has them all).
NAMED = 12
#: The report property saying when a check's work began before its setup (epoch seconds): a job submitted for it
#: early in the run (pytest_slurmflox/harness/early.py). Its span, not its pytest duration, is what it cost the run.
SINCE = "slurmflox_since"
#: The report property saying when what a check waited for on Slurm ended (epoch seconds, Slurm's EndTime): a check
#: ordered last to collect an early job ends its span there, not when it got round to collecting.
UNTIL = "slurmflox_until"


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
    start: float = 0.0  #: wall clock (epoch seconds) of its setup, for the report's timeline
    stop: float = 0.0  #: wall clock of its teardown's end
    until: float = 0.0  #: when what it waited for on Slurm ended, if it said (:data:`UNTIL`)
    runner: str = ""  #: the pytest-xdist worker that ran it ("" in a single process)

    @property
    def requirement_id(self) -> str:
        """Group plus node id: stable across runs, and says which requirement the check stands for."""
        return f"{self.group or NO_GROUP}:{self.nodeid}"

    @property
    def span(self) -> float | None:
        """Wall seconds from its first action (an early job's submission, else its setup) to the end of its wait on
        Slurm when it recorded one, else to its teardown's end: what the check cost the run, whatever its order."""
        if not (self.start and self.stop):
            return None
        end = min(self.stop, self.until) if self.until else self.stop
        return round(max(0.0, end - self.start), 3)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requirement_id": self.requirement_id,
            "group": self.group,
            "nodeid": self.nodeid,
            "verdict": self.verdict,
            "phase": self.phase,
            "skip_reason": self.reason if self.verdict in (SKIP, NOT_APPLICABLE, NOT_RUN) else None,
            "failure": (self.failure or self.reason) if self.verdict == FAIL else None,
            "duration": round(self.duration, 4),
            "span": self.span,
            "evidence": self.evidence,
        }


def _runner(report: Any) -> str:
    """The pytest-xdist worker id a controller-side report came from ("" when the run had no workers)."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", "") or "")


def report_properties(report: Any) -> list[tuple[str, Any]]:
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
        start, stop = float(getattr(report, "start", 0.0) or 0.0), float(getattr(report, "stop", 0.0) or 0.0)
        if start and (not check.start or start < check.start):
            check.start = start
        check.stop = max(check.stop, stop)
        check.runner = check.runner or _runner(report)
        for name, value in report_properties(report):
            if name == "slurmflox_group":
                check.group = str(value)
            elif name == "slurmflox_evidence" and isinstance(value, str):
                try:
                    check.evidence.extend(json.loads(value))
                except ValueError:
                    check.evidence.append({"command": "(unreadable evidence)", "stdout": value[:EXCERPT]})
            elif name == SINCE and isinstance(value, (int, float)) and value > 0:
                check.start = min(check.start, float(value)) if check.start else float(value)
            elif name == UNTIL and isinstance(value, (int, float)) and value > 0:
                check.until = float(value)
            elif name == "slurmflox_facts" and isinstance(value, str):
                with contextlib.suppress(ValueError):
                    self.facts.update({str(k): str(v) for k, v in json.loads(value).items()})
        xfail = getattr(report, "wasxfail", None)
        if report.when == "setup":
            if report.failed:
                check.verdict, check.phase = FAIL, "setup"
                check.reason, check.failure = "error in setup: " + failure_line(report), report.longreprtext
            elif report.skipped:
                check.verdict, check.phase, check.reason = _skipped(skip_reason(report)), "setup", skip_reason(report)
        elif report.when == "call":
            if report.failed:
                check.verdict, check.phase = FAIL, "call"
                check.reason, check.failure = failure_line(report), report.longreprtext
            elif report.skipped:
                check.reason = f"expected failure: {xfail}" if xfail is not None else skip_reason(report)
                check.verdict, check.phase = _skipped(check.reason), "call"
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
    left_out: tuple[tuple[str, str], ...] = ()  #: (node id, why) of each check of the group that did not run

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "title": self.title,
            "required": self.required,
            "verdict": self.verdict,
            "counts": dict(self.counts),
            "reasons": list(self.reasons),
            "left_out": [{"nodeid": nodeid, "reason": why} for nodeid, why in self.left_out],
        }


@dataclass(frozen=True)
class SignOff:
    requested: bool
    verdict: str
    groups: tuple[GroupSummary, ...]
    reasons: tuple[str, ...]  #: why it is not signed off (empty when it is)
    required: tuple[str, ...]
    profile: str = UNKNOWN.name  #: the kind of target the required set was decided for (profiles.py)
    not_applicable: tuple[str, ...] = ()  #: what did not apply: whole groups, then checks per group
    one_reason: str = ""  #: the one reason every applicable check was NOT RUN for (an unreachable login)

    @property
    def signed(self) -> bool:
        return self.verdict == SIGNED_OFF

    @property
    def headline(self) -> str:
        """``SIGNED OFF (profile local; not applicable: T1, T2: 1 check, ...)``: the verdict and what it excluded."""
        na = ", ".join(self.not_applicable) or "nothing"
        return f"{self.verdict} (profile {self.profile}; not applicable: {na})"


def _skipped(reason: str) -> str:
    if reason.startswith(NOT_APPLICABLE_PREFIX):
        return NOT_APPLICABLE
    return NOT_RUN if reason.startswith(NOT_RUN_PREFIX) else SKIP


def group_verdict(checks: Iterable[Check]) -> str:
    """FAIL over NOT RUN over SKIP over PASS; a not-applicable check counts for nothing, and a group whose every
    check is not applicable is NOT APPLICABLE (never PASS)."""
    all_verdicts = [c.verdict for c in checks]
    if not all_verdicts:
        return NOT_RUN
    verdicts = [v for v in all_verdicts if v != NOT_APPLICABLE]
    if not verdicts:
        return NOT_APPLICABLE
    if FAIL in verdicts:
        return FAIL
    if NOT_RUN in verdicts:
        return NOT_RUN
    if SKIP in verdicts:
        return SKIP
    return PASS


def _group_reasons(checks: list[Check]) -> tuple[str, ...]:
    reasons: dict[str, int] = {}
    for check in checks:
        if check.verdict == FAIL:
            reasons[f"FAIL {check.nodeid.rsplit('::', 1)[-1]}: {check.reason}"] = 1
        elif check.verdict in (SKIP, NOT_RUN, NOT_APPLICABLE):
            key = check.reason if check.verdict == NOT_APPLICABLE else f"{check.verdict}: {check.reason}"
            reasons[key] = reasons.get(key, 0) + 1
    return tuple(f"{text} (x{n})" if n > 1 else text for text, n in reasons.items())


def required_for(spec: Any) -> tuple[str, ...]:
    """The required groups for a target (TW included; :func:`decide` drops it without a corpus): its profile's
    (profiles.py), a service group only where the target file declares that service; every group when the target
    is unknown (an unreadable target signs nothing off)."""
    return profile_of(spec).required(workloads_given=True)


def classify(checks: Iterable[Check], profile: Profile) -> None:
    """Mark each skipped check that needs a capability this kind of target never has NOT APPLICABLE, its reason
    saying so (the report writer rewrote the skip text already when it knew the profile; this is idempotent)."""
    for check in checks:
        if check.verdict in (SKIP, NOT_APPLICABLE):
            reason = profile.not_applicable(check.reason)
            if reason is not None:
                check.verdict, check.reason = NOT_APPLICABLE, reason


def _not_applicable(groups: Iterable[GroupSummary], by_group: Mapping[str, list[Check]]) -> tuple[str, ...]:
    whole = [g.group for g in groups if g.verdict == NOT_APPLICABLE]
    partly = []
    for g in groups:
        n = sum(1 for c in by_group.get(g.group, []) if c.verdict == NOT_APPLICABLE)
        if n and g.verdict != NOT_APPLICABLE:
            partly.append(f"{g.group}: {n} check{'s' if n > 1 else ''}")
    return (*whole, *partly)


def _left_out_reasons(left_out: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """``NOT RUN: <why>: <check>, <check>, ...`` per reason, naming each check (evidence.json lists them all)."""
    by_reason: dict[str, list[str]] = {}
    for nodeid, why in left_out:
        by_reason.setdefault(why, []).append(nodeid.rsplit("::", 1)[-1])
    lines = []
    for why, names in by_reason.items():
        more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
        lines.append(f"{NOT_RUN}: {why}: {', '.join(names[:NAMED])}{more}")
    return tuple(lines)


def _summary(
    g: str,
    members: list[Check],
    required: bool,
    excluded: Mapping[str, str],
    context: tuple[Mapping[str, str], Mapping[str, tuple[tuple[str, str], ...]]],
    profile: Profile,
) -> GroupSummary:
    """One group's line of the verdict: a group the profile excludes that showed nothing is NOT APPLICABLE; a
    group a check of which did not run (deselected, not named, never reached) is NOT RUN naming it, unless FAIL."""
    deselected, left_out = context
    missing = left_out.get(g, ())
    counts = {v: sum(1 for c in members if c.verdict == v) for v in (PASS, FAIL, SKIP, NOT_APPLICABLE)}
    verdict = group_verdict(members)
    if g in excluded and verdict in (NOT_RUN, NOT_APPLICABLE):
        verdict = NOT_APPLICABLE
        reasons: tuple[str, ...] = (f"{NOT_APPLICABLE_PREFIX} (profile {profile.name}): {excluded[g]}",)
    else:
        not_run = deselected.get(g, "no check of this group ran (deselected or not collected)")
        reasons = _group_reasons(members) + _left_out_reasons(missing)
        reasons = reasons or ((not_run,) if not members else ())
        verdict = NOT_RUN if missing and verdict != FAIL else verdict
    title = GROUPS.get(g, "acceptance checks without a group")
    return GroupSummary(g, title, required, verdict, counts, reasons, missing)


def decide(
    checks: Iterable[Check],
    *,
    requested: bool,
    required_groups: Iterable[str] | None = None,
    profile: Profile = UNKNOWN,
    workloads_given: bool = False,
    collect_errors: Iterable[str] = (),
    deselected: Mapping[str, str] | None = None,
    left_out: Mapping[str, tuple[str, str]] | None = None,
) -> SignOff:
    """The sign-off verdict over the whole requirement set.

    Every required group is listed, run or not: ``required_groups`` (by default the ``profile``'s; TW only when a
    workload corpus was given, its checks do not exist otherwise). A required group with no check in this run
    (deselected by ``-m``, ``-k`` or ``--slurmflox-groups``, or never collected) is NOT RUN, naming why when
    ``deselected`` (group -> reason) knows. A group that ran only some of its checks is NOT RUN too (unless it
    FAILed), naming each check of ``left_out`` (node id -> (group, why): every check its module holds that has no
    report, outcome.Deselected.left_out): a sign-off needs the whole group, not the checks that ran. A check that
    SKIPs naming a capability the profile never has is NOT APPLICABLE, and so is a group the profile excludes (it is
    not required). Signed off only if every required group PASSed (SKIP, NOT RUN and NOT APPLICABLE are not PASS),
    nothing failed anywhere and nothing failed to collect.
    """
    checks = list(checks)
    classify(checks, profile)
    deselected = deselected or {}
    if required_groups is None:
        required_groups = profile.required(workloads_given=workloads_given)
    by_group: dict[str, list[Check]] = {}
    for check in checks:
        by_group.setdefault(check.group or NO_GROUP, []).append(check)
    required = tuple(g for g in required_groups if g != "TW" or workloads_given)
    excluded = {g: why for g, why in profile.groups.items() if g not in DESTRUCTIVE_GROUPS}
    shown = [g for g in GROUPS if g in by_group or g in required or g in excluded]
    order = shown + ([NO_GROUP] if NO_GROUP in by_group else [])
    missing: dict[str, tuple[tuple[str, str], ...]] = {}
    for nodeid, (group, reason) in (left_out or {}).items():
        missing[group or NO_GROUP] = (*missing.get(group or NO_GROUP, ()), (nodeid, reason))
    context = (deselected, missing)
    groups = [_summary(g, by_group.get(g, []), g in required, excluded, context, profile) for g in order]
    why = _why(groups, collect_errors, bool(checks), one := _one_reason(checks))
    return SignOff(
        requested=requested,
        verdict=NOT_SIGNED_OFF if why else SIGNED_OFF,
        groups=tuple(groups),
        reasons=tuple(why),
        required=required,
        profile=profile.name,
        not_applicable=_not_applicable(groups, by_group),
        one_reason=one,
    )


def _why(groups: list[GroupSummary], collect_errors: Iterable[str], ran: bool, one: str) -> list[str]:
    """Why the run is not signed off; ``one`` (every check NOT RUN for it) is said once, not once per group."""
    why = [f"collection error: {e}" for e in collect_errors] + ([] if ran else ["no acceptance check was run"])
    if one:
        return [*why, f"every check is NOT RUN: {one}"]
    for summary in groups:  # a required group none of whose checks applied blocks too (profile did not foresee it)
        if summary.required and summary.verdict != PASS:
            said = "; ".join(summary.reasons).removeprefix(f"{summary.verdict}: ")  # the verdict said once
            why.append(f"required group {summary.group} is {summary.verdict}: {said}")
        elif not summary.required and summary.verdict == FAIL:
            why.append(f"group {summary.group} FAILED: " + "; ".join(summary.reasons))
    return why


def _one_reason(checks: list[Check]) -> str:
    """The one reason (no ``not run: `` prefix) every applicable check was NOT RUN for, else ""."""
    applied = {(c.verdict, c.reason.removeprefix(NOT_RUN_PREFIX)) for c in checks if c.verdict != NOT_APPLICABLE}
    return applied.pop()[1] if len(applied) == 1 and next(iter(applied))[0] == NOT_RUN else ""


def summary_lines(signoff: SignOff, run_id: str) -> list[str]:
    """The sign-off summary as terminal lines."""
    lines = []
    for g in signoff.groups:
        c = g.counts
        mark = "*" if g.required else " "
        na = f"  n/a {c[NOT_APPLICABLE]:>2}" if c.get(NOT_APPLICABLE) else ""
        na += f"  not run {len(g.left_out):>2}" if g.left_out else ""
        lines.append(
            f"{mark}{g.group:<5} {g.verdict:<14} pass {c[PASS]:>2}  fail {c[FAIL]:>2}  skip {c[SKIP]:>2}{na}  {g.title}"
        )
        lines.extend(f"         {reason}" for reason in g.reasons if not signoff.one_reason or g.verdict != NOT_RUN)
    mode = "sign-off requested" if signoff.requested else "sign-off not requested (--slurmflox-signoff)"
    lines.append(f"verdict for run {run_id}: {signoff.headline} ({mode}; * = required group)")
    lines.extend(f"  - {reason}" for reason in signoff.reasons)
    return lines
