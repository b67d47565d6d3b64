"""The run as a picture: an inline SVG timeline for the HTML report (one bar per check over wall time, coloured by
verdict, labelled with the Slurm jobs it ran and the workers they ran on), and the move of the sign-off block above
pytest-html's environment table.

Why a picture: a reader sees at once which check held the run up (T7's time limit), what ran side by side and what
failed. Self-contained on purpose: plain SVG elements, no script, no fonts or images fetched, so the report opens
offline. Jobs and workers come from the check's own evidence (``sbatch`` answers and ``squeue``'s ``%i|%T|%r|%N``
rows, :data:`~pytest_slurmflox.slurm.JOB_FORMAT`), never from a file a worker wrote.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .signoff import Check

#: bar colours by verdict (the same green/red as the sign-off summary)
COLOURS = {"PASS": "#2e7d32", "FAIL": "#c62828", "SKIP": "#f9a825"}
OTHER_COLOUR = "#757575"
_SUBMITTED = re.compile(r"Submitted batch job (\d+)")
_SQUEUE_ROW = re.compile(r"^(\d+(?:_\d+)?)\|[A-Z_]+\|[^|\n]*\|([\w\-\[\],]*)$", re.M)
TOP_START, TOP_END = "<!-- slurmflox-top -->", "<!-- /slurmflox-top -->"
_ROW, _LABEL_W, _PLOT_W = 22, 360, 640


@dataclass(frozen=True)
class Bar:
    """One check on the timeline: seconds from the run's start, its verdict, its jobs and their workers."""

    nodeid: str
    verdict: str
    begin: float
    end: float
    jobs: tuple[str, ...]
    workers: tuple[str, ...]
    runner: str = ""


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


def bars(checks: Sequence[Check], origin: float) -> list[Bar]:
    """Checks with a recorded start, as bars relative to ``origin`` (the run's start), earliest first."""
    out = []
    for check in checks:
        if not check.start:
            continue
        jobs, workers = jobs_and_workers(check.evidence)
        begin = max(0.0, check.start - origin)
        end = max(begin, (check.stop or check.start) - origin)
        out.append(Bar(check.nodeid, check.verdict, begin, end, jobs, workers, check.runner))
    return sorted(out, key=lambda b: (b.begin, b.nodeid))


def _label(bar: Bar) -> str:
    parts = [bar.nodeid.rsplit("/", 1)[-1]]
    if bar.jobs:
        parts.append("jobs " + ",".join(bar.jobs[:4]) + ("…" if len(bar.jobs) > 4 else ""))
    if bar.workers:
        parts.append("on " + ",".join(bar.workers[:4]))
    return " · ".join(parts)


def timeline_svg(rows: Sequence[Bar]) -> str:
    """The timeline as one ``<svg>`` element (escaped text; a <title> per bar gives the full detail on hover)."""
    e = html.escape
    span = max([b.end for b in rows], default=0.0) or 1.0
    scale = _PLOT_W / span
    height = _ROW * (len(rows) + 1) + 10
    parts = [
        f'<svg id="slurmflox-timeline-svg" xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + _PLOT_W + 20}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        f'<text x="{_LABEL_W}" y="12">0 s</text><text x="{_LABEL_W + _PLOT_W}" y="12" text-anchor="end">'
        f"{span:.1f} s</text>",
    ]
    for i, bar in enumerate(rows):
        y = _ROW * (i + 1)
        x = _LABEL_W + bar.begin * scale
        width = max(2.0, (bar.end - bar.begin) * scale)
        colour = COLOURS.get(bar.verdict, OTHER_COLOUR)
        detail = f"{bar.nodeid}: {bar.verdict}, {bar.begin:.1f}-{bar.end:.1f} s" + (
            f", runner {bar.runner}" if bar.runner else ""
        )
        detail += f"; jobs {', '.join(bar.jobs) or 'none'}; workers {', '.join(bar.workers) or 'none'}"
        parts.append(
            f'<g class="sfx-bar sfx-{e(bar.verdict.lower())}"><title>{e(detail)}</title>'
            f'<text x="{_LABEL_W - 6}" y="{y + 14}" text-anchor="end">{e(_label(bar))[:90]}</text>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{_ROW - 6}" fill="{colour}"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def timeline_html(checks: Sequence[Check], origin: float) -> str:
    rows = bars(checks, origin)
    if not rows:
        return '<div id="slurmflox-timeline"><h2>Timeline</h2><p>No check ran.</p></div>'
    return (
        '<div id="slurmflox-timeline"><h2>Timeline</h2>'
        f"<p>{len(rows)} checks over {max(b.end for b in rows):.1f} s; colour = verdict "
        "(green PASS, red FAIL, amber SKIP); hover a bar for its jobs and workers.</p>"
        f"{timeline_svg(rows)}</div>"
    )


def hoist_top(page: Path) -> bool:
    """Move the marked sign-off block (summary + timeline) above pytest-html's environment header, where a reader
    looks first; pytest-html's own template only offers a slot below it. True when the page was changed."""
    text = page.read_text(encoding="utf-8")
    start, end = text.find(TOP_START), text.find(TOP_END)
    anchor = text.find('<div id="environment-header">')
    if start < 0 or end < start or anchor < 0 or anchor > start:
        return False
    block = text[start : end + len(TOP_END)]
    moved = text[:start] + text[end + len(TOP_END) :]
    page.write_text(moved[:anchor] + block + moved[anchor:], encoding="utf-8")
    return True
