"""What the report's timeline draws, apart from how (:mod:`~pytest_slurmflox.reporting.timeline` draws it): one bar per
check
over wall time from the first check's start, the styles of every kind of bar, the axis' ticks, and the lanes checks
share when there are too many for a row each.

Jobs and workers come from the check's own evidence (``sbatch`` answers and ``squeue``'s ``%i|%T|%r|%N`` rows,
:data:`~pytest_slurmflox.cluster.slurm.JOB_FORMAT`), never from a file a worker wrote.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .profiles import NOT_APPLICABLE
from .signoff import FAIL, NOT_RUN, PASS, SKIP, Check


@dataclass(frozen=True)
class Style:
    """How one kind of bar is drawn: its CSS class (a plain identifier: letters, digits and hyphens, nothing CSS
    needs escaped), its colour and its legend text."""

    css: str
    colour: str
    label: str


#: Every kind of check bar, by verdict. The bars, the legend, the summary table's rows and their style rules all
#: come from this one mapping, so none can name a class the others do not know.
STYLES: dict[str, Style] = {
    PASS: Style("sfx-pass", "#2e7d32", PASS),
    FAIL: Style("sfx-fail", "#c62828", FAIL),
    SKIP: Style("sfx-skip", "#f9a825", SKIP),
    NOT_RUN: Style("sfx-not-run", "#6a1b9a", NOT_RUN),
    NOT_APPLICABLE: Style("sfx-not-applicable", "#b0bec5", NOT_APPLICABLE),
}
#: the provisioning (``--slurmflox-up``) before the first check: one narrow band at the left, its duration its label
UP = Style("sfx-up", "#d6eaf8", "up: provisioning (not to scale)")
#: a verdict neither signoff nor profiles defines (never expected; drawn, and then named in the legend)
OTHER = Style("sfx-other", "#757575", "other")
#: bar colours by verdict
COLOURS = {verdict: style.colour for verdict, style in STYLES.items()}
#: tick steps (s) the axis chooses from: the smallest that leaves at most :data:`MAX_INTERVALS` intervals
#: (each at most twice the one before from 0.5 s on, so a run of 6 s or more gets at least 6 ticks)
STEPS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600, 900)
STEPS += (1200, 1800, 3600, 7200, 14400)
MAX_INTERVALS = 11
_SUBMITTED = re.compile(r"Submitted batch job (\d+)")
_SQUEUE_ROW = re.compile(r"^(\d+(?:_\d+)?)\|[A-Z_]+\|[^|\n]*\|([\w\-\[\],]*)$", re.M)


def style_of(verdict: str) -> Style:
    return STYLES.get(verdict, OTHER)


def style_rules() -> str:
    """The colour rules of every class :data:`STYLES`, :data:`UP` and :data:`OTHER` name: bars and legend swatches
    (SVG ``rect`` inside the class), and the summary table's row of a group with that verdict (a coloured edge)."""
    every = (*STYLES.values(), UP, OTHER)
    rules = [f"#slurmflox-timeline .{s.css} rect {{ fill: {s.colour}; }}" for s in every]
    rules += [f"#slurmflox-groups tr.{s.css} td:first-child {{ border-left: 5px solid {s.colour}; }}" for s in every]
    return "\n".join(rules) + "\n"


@dataclass(frozen=True)
class Bar:
    """One check on the timeline: seconds from the first check's start, its verdict, its jobs and their workers."""

    nodeid: str
    verdict: str
    begin: float
    end: float
    jobs: tuple[str, ...]
    workers: tuple[str, ...]
    runner: str = ""
    group: str = ""


def jobs_and_workers(evidence: Iterable[dict[str, Any]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Slurm job ids a check submitted or watched, and the nodes squeue placed them on, in first-seen order."""
    jobs: dict[str, None] = {}
    workers: dict[str, None] = {}
    for entry in evidence:
        text = str(entry.get("stdout") or "")
        for job in _SUBMITTED.findall(text):
            jobs.setdefault(job, None)
        for job, nodes in _SQUEUE_ROW.findall(text):
            jobs.setdefault(job.split("_")[0], None)
            for node in filter(None, nodes.split(",")):
                workers.setdefault(node, None)
    return tuple(jobs), tuple(workers)


def first_start(checks: Iterable[Check]) -> float:
    """When the first check began (epoch seconds; 0.0 when none recorded a start): the timeline's zero."""
    return min((c.start for c in checks if c.start), default=0.0)


def bars(checks: Sequence[Check], origin: float | None = None) -> list[Bar]:
    """Checks with a recorded start, as bars relative to ``origin`` (by default the first check's start: the
    time before it, provisioning and worker start-up, is not the checks'), earliest first."""
    zero = first_start(checks) if origin is None else origin
    out = []
    for check in checks:
        if not check.start:
            continue
        jobs, workers = jobs_and_workers(check.evidence)
        begin = max(0.0, check.start - zero)
        end = max(begin, (check.stop or check.start) - zero)
        out.append(Bar(check.nodeid, check.verdict, begin, end, jobs, workers, check.runner, check.group or ""))
    return sorted(out, key=lambda b: (b.begin, b.nodeid))


def ticks(span: float) -> list[float]:
    """Tick positions (s) from 0 to at most ``span`` with the smallest step of :data:`STEPS` that leaves at most
    :data:`MAX_INTERVALS` intervals (so 6 to 12 ticks once the run is longer than a few steps)."""
    span = max(span, 0.0)
    fallback = STEPS[-1] * math.ceil(span / STEPS[-1] / MAX_INTERVALS)  # a run of days: whole multiples
    step = next((s for s in STEPS if span / s <= MAX_INTERVALS), fallback)
    return [round(i * step, 3) for i in range(int(span / step + 1e-9) + 1)]


def tick_label(seconds: float) -> str:
    """``0 s``, ``2.5 s``, ``90 s``; from two minutes on, minutes (``5 min``, ``2.5 min``)."""
    if seconds >= 120:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def lanes(rows: Sequence[Bar]) -> list[tuple[str, list[Bar]]]:
    """The bars packed into lanes per group (groups in order of their first bar): a bar goes into the group's first
    lane whose last bar ended by its start, else a new lane. Each lane is (group, bars); a group's lanes are
    adjacent."""
    by_group: dict[str, list[list[Bar]]] = {}
    for bar in rows:
        group_lanes = by_group.setdefault(bar.group, [])
        lane = next((lane for lane in group_lanes if lane[-1].end <= bar.begin), None)
        if lane is None:
            group_lanes.append([bar])
        else:
            lane.append(bar)
    return [(group, lane) for group, group_lanes in by_group.items() for lane in group_lanes]
