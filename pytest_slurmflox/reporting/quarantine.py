"""Quarantine and re-test in the verdict, the evidence, the terminal and the report.

The verdict stays honest: a run that drained a worker is NOT SIGNED OFF naming it and why; a worker an earlier run
quarantined, which the cohort left out, is NOT RUN naming the quarantine (never a healthy worker left out), so the
cohort is signed off only when every worker is back or the target's ``expect.replicas`` no longer counts it; a
re-test covers the workers it re-tested only, never the cluster.
"""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Mapping

from ..model.quarantine import DRAINED, DRAINED_AGAIN, LEFT, Outcome, Retest
from .signoff import NOT_SIGNED_OFF, SignOff


def reasons(outcome: Outcome, held: Mapping[str, str], retest: Retest | None) -> list[str]:
    """What quarantine and re-test add to the reasons the run is not signed off."""
    said = [f"quarantined by this run: {a.worker} drained ({a.reason})" for a in outcome.of(DRAINED)]
    said += [f"re-test did not clear {a.worker}: drained again ({a.reason})" for a in outcome.of(DRAINED_AGAIN)]
    said += [
        f"{a.worker} was named by a FAIL but is drained already: left as it was ({a.reason})" for a in outcome.of(LEFT)
    ]
    said += list(outcome.refused)
    said += [
        f"NOT RUN on {worker}: quarantined ({why}); re-test it with --slurmflox-retest=quarantined"
        for worker, why in sorted(held.items())
    ]
    if retest is not None:
        said.append(f"a re-test covers {', '.join(sorted(retest.tested))} only, never the cluster: sign it off next")
    return said


def with_quarantine(signoff: SignOff, outcome: Outcome, held: Mapping[str, str], retest: Retest | None) -> SignOff:
    """``signoff`` with the quarantine's reasons; NOT SIGNED OFF when there are any."""
    extra = reasons(outcome, held, retest)
    if not extra:
        return signoff
    return dataclasses.replace(signoff, verdict=NOT_SIGNED_OFF, reasons=(*signoff.reasons, *extra))


def document(outcome: Outcome, held: Mapping[str, str], retest: Retest | None) -> dict[str, object]:
    """evidence.json's ``run.quarantine``: every action with its time, what was declined, what was held out."""
    return {
        **outcome.as_dict(),
        "held": dict(sorted(held.items())),
        "retest": {"reservation": retest.reservation, "workers": dict(retest.tested)} if retest else None,
    }


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def terminal_lines(outcome: Outcome, held: Mapping[str, str]) -> list[str]:
    """The terminal summary's quarantine lines (none when nothing happened)."""
    lines = [f"slurmflox quarantine: {_when(a.at)} {a.line}" for a in outcome.actions]
    lines += [f"slurmflox quarantine: {line}" for line in outcome.refused]
    lines += [f"slurmflox quarantine: {w} held out of the cohort: {why}" for w, why in sorted(held.items())]
    return lines


def section_html(outcome: Outcome, held: Mapping[str, str]) -> str:
    """The report's quarantine section, with times; empty when nothing happened."""
    rows = [(_when(a.at), a.worker, a.action, a.reason) for a in outcome.actions]
    rows += [("", "", "declined", line) for line in outcome.refused]
    rows += [("", w, "held out (NOT RUN)", why) for w, why in sorted(held.items())]
    if not rows:
        return ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    head = "<tr><th>time (UTC)</th><th>worker</th><th>action</th><th>reason</th></tr>"
    return f'<section id="slurmflox-quarantine"><h2>Quarantine</h2><table>{head}{body}</table></section>'
