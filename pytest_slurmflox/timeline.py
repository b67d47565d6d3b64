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
#: label text: font size and line height (px), left padding, and the characters a line of the label column holds.
#: Monospace advances are 0.6 em in the common fonts (DejaVu Sans Mono: 1233/2048 em); 7 px per character at 11 px
#: leaves a margin, so a wrapped line never reaches the bars.
_FONT, _LINE, _PAD = 11, 13, 4
_CHARS = (_LABEL_W - 2 * _PAD - 8) // 7
_BREAK_AFTER = re.compile(r"(?<=[/:_\-\[.,\s])")


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


def bars(checks: Sequence[Check], origin: float) -> list[Bar]:
    """Checks with a recorded start, as bars relative to ``origin`` (the run's start), earliest first."""
    out = []
    for check in checks:
        if not check.start:
            continue
        jobs, workers = jobs_and_workers(check.evidence)
        begin = max(0.0, check.start - origin)
        end = max(begin, (check.stop or check.start) - origin)
        out.append(Bar(check.nodeid, check.verdict, begin, end, jobs, workers, check.runner, check.group or ""))
    return sorted(out, key=lambda b: (b.begin, b.nodeid))


def name_of(bar: Bar) -> str:
    """What a reader calls the check: its group and its test name in full (file::test[params], no directory)."""
    name = bar.nodeid.rsplit("/", 1)[-1]
    return f"{bar.group} · {name}" if bar.group else name


def _meta(bar: Bar) -> str:
    parts = []
    if bar.jobs:
        parts.append("jobs " + ",".join(bar.jobs[:4]) + ("…" if len(bar.jobs) > 4 else ""))
    if bar.workers:
        parts.append("on " + ",".join(bar.workers[:4]))
    return " · ".join(parts)


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after a separator (``/ : _ - [ . , space``) where
    one is near, else mid-word; the lines joined are ``text`` exactly (nothing added or dropped)."""
    lines: list[str] = []
    line = ""
    for token in _BREAK_AFTER.split(text):
        while len(token) > width:  # a token longer than a line: hard-split it
            if line:
                lines.append(line)
                line = ""
            lines.append(token[:width])
            token = token[width:]
        if len(line) + len(token) > width:
            lines.append(line)
            line = ""
        line += token
    return [*lines, line] if line or not lines else lines


def _text(cls: str, lines: list[str], top: float) -> str:
    """One left-aligned ``<text>`` of ``lines`` (tspans), its first baseline a line below ``top``."""
    spans = "".join(
        f'<tspan x="{_PAD}" y="{top + _LINE * (i + 1):.0f}">{html.escape(line)}</tspan>' for i, line in enumerate(lines)
    )
    return f'<text class="{cls}" font-family="monospace">{spans}</text>'


def timeline_svg(rows: Sequence[Bar]) -> str:
    """The timeline as one ``<svg>`` element. Each check's label is its whole name, wrapped in the label column
    (a fixed-advance font, so the character count bounds the width) and never cut; its jobs and workers below it;
    a ``<title>`` per bar gives the full node id and detail on hover. Rows grow with their label."""
    e = html.escape
    span = max([b.end for b in rows], default=0.0) or 1.0
    scale = _PLOT_W / span
    parts = []
    y = float(_ROW)
    for bar in rows:
        name, meta = wrap(name_of(bar), _CHARS), (wrap(_meta(bar), _CHARS) if _meta(bar) else [])
        x = _LABEL_W + bar.begin * scale
        width = max(2.0, (bar.end - bar.begin) * scale)
        colour = COLOURS.get(bar.verdict, OTHER_COLOUR)
        detail = f"{bar.nodeid}: {bar.verdict}, {bar.begin:.1f}-{bar.end:.1f} s" + (
            f", runner {bar.runner}" if bar.runner else ""
        )
        detail += f"; jobs {', '.join(bar.jobs) or 'none'}; workers {', '.join(bar.workers) or 'none'}"
        parts.append(
            f'<g class="sfx-bar sfx-{e(bar.verdict.lower())}"><title>{e(detail)}</title>'
            + _text("sfx-name", name, y)
            + (_text("sfx-meta", meta, y + _LINE * len(name)) if meta else "")
            + f'<rect x="{x:.1f}" y="{y + 3:.0f}" width="{width:.1f}" height="{_ROW - 6}" fill="{colour}"/></g>'
        )
        y += max(_ROW, _LINE * (len(name) + len(meta)) + 6)
    head = (
        f'<svg id="slurmflox-timeline-svg" xmlns="http://www.w3.org/2000/svg" width="{_LABEL_W + _PLOT_W + 20}" '
        f'height="{y + 10:.0f}" font-family="sans-serif" font-size="{_FONT}">'
        f'<text x="{_LABEL_W}" y="12">0 s</text><text x="{_LABEL_W + _PLOT_W}" y="12" text-anchor="end">'
        f"{span:.1f} s</text>"
    )
    return head + "".join(parts) + "</svg>"


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
