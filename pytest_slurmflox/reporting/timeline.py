"""The run as a picture: an inline SVG timeline for the HTML report, and the move of the sign-off block above
pytest-html's environment table. What is drawn (bars, styles, ticks, lanes) is
:mod:`~pytest_slurmflox.reporting.timeline_data`'s.

Why a picture: a reader sees at once which check held the run up (T7's time limit), what ran side by side and what
failed. The picture starts at the first check; a provisioning before it (``--slurmflox-up``) is one narrow band at
the left labelled with its duration, never drawn to scale. The axis has a tick every few seconds; the legend names
every kind of bar (:data:`~pytest_slurmflox.reporting.timeline_data.STYLES`). Up to
:data:`~pytest_slurmflox.reporting.timeline_data.FULL_ROWS` checks each get a row with their whole name, their jobs and
workers;
more share lanes per group (a thin bar each, the name on hover), so the picture stays short of the results table.
Self-contained on purpose: plain SVG elements, no script, no fonts or images fetched, so the report opens offline.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

from .signoff import Check
from .timeline_data import (
    COLOURS,
    OTHER,
    STYLES,
    UP,
    Bar,
    Style,
    bars,
    jobs_and_workers,
    lanes,
    style_of,
    tick_label,
    ticks,
)

__all__ = ["COLOURS", "TOP_END", "TOP_START", "bars", "hoist_top", "jobs_and_workers", "timeline_html", "wrap"]

TOP_START, TOP_END = "<!-- slurmflox-top -->", "<!-- /slurmflox-top -->"
#: a row's least height, the label column, the plot, the up band (with its gap) and the header (legend, axis), px
_ROW, _LABEL_W, _PLOT_W, _UP_W, _HEAD = 22, 360, 640, 64, 40
#: up to this many checks each get a row with their whole name; more are drawn in lanes per group
FULL_ROWS = 12
#: a lane's height and the gap between two groups' lanes, px
_LANE, _GAP = 12, 4
#: label text: font size and line height (px), left padding, and the characters a line of the label column holds.
#: Monospace advances are 0.6 em in the common fonts (DejaVu Sans Mono: 1233/2048 em); 7 px per character at 11 px
#: leaves a margin, so a wrapped line never reaches the bars.
_FONT, _LINE, _PAD = 11, 13, 4
_CHARS = (_LABEL_W - 2 * _PAD - 8) // 7
_BREAK_AFTER = re.compile(r"(?<=[/:_\-\[.,\s])")


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


def _detail(bar: Bar) -> str:
    runner = f", runner {bar.runner}" if bar.runner else ""
    return (
        f"{bar.nodeid}: {bar.verdict}, {bar.begin:.1f}-{bar.end:.1f} s{runner}; "
        f"jobs {', '.join(bar.jobs) or 'none'}; workers {', '.join(bar.workers) or 'none'}"
    )


def _rect(bar: Bar, plot_x: float, scale: float, top: float, height: float) -> str:
    x, width = plot_x + bar.begin * scale, max(2.0, (bar.end - bar.begin) * scale)
    colour = style_of(bar.verdict).colour
    return f'<rect x="{x:.1f}" y="{top:.0f}" width="{width:.1f}" height="{height:.0f}" fill="{colour}"/>'


def _full_rows(rows: Sequence[Bar], plot_x: float, scale: float) -> tuple[list[str], float]:
    """A row per check: its whole name wrapped in the label column, its jobs and workers below it, its bar."""
    parts, y = [], float(_HEAD)
    for bar in rows:
        name, meta = wrap(name_of(bar), _CHARS), (wrap(_meta(bar), _CHARS) if _meta(bar) else [])
        parts.append(
            f'<g class="sfx-bar {style_of(bar.verdict).css}"><title>{html.escape(_detail(bar))}</title>'
            + _text("sfx-name", name, y)
            + (_text("sfx-meta", meta, y + _LINE * len(name)) if meta else "")
            + _rect(bar, plot_x, scale, y + 3, _ROW - 6)
            + "</g>"
        )
        y += max(_ROW, _LINE * (len(name) + len(meta)) + 6)
    return parts, y


def _lane_rows(rows: Sequence[Bar], plot_x: float, scale: float) -> tuple[list[str], float]:
    """Checks in lanes per group (:func:`~pytest_slurmflox.reporting.timeline_data.lanes`): a thin bar each, its name
    and
    detail on hover; the group and its number of checks label the group's first lane."""
    parts, y, previous = [], float(_HEAD), None
    counts: dict[str, int] = {}
    for bar in rows:
        counts[bar.group] = counts.get(bar.group, 0) + 1
    for group, lane in lanes(rows):
        if group != previous:
            y += _GAP if previous is not None else 0
            label = f"{group or '(no group)'} · {counts[group]} check{'s' if counts[group] > 1 else ''}"
            parts.append(_text("sfx-name", [label], y - 2))
            previous = group
        for bar in lane:
            title = html.escape(f"{name_of(bar)}\n{_detail(bar)}")
            rect = _rect(bar, plot_x, scale, y + 2, _LANE - 3)
            parts.append(f'<g class="sfx-bar {style_of(bar.verdict).css}"><title>{title}</title>{rect}</g>')
        y += _LANE
    return parts, y


def _legend(rows: Sequence[Bar], up: float | None) -> str:
    """A swatch and a name for every kind of check bar, the up band when drawn, and any verdict nobody defined."""
    kinds: list[Style] = list(STYLES.values())
    if any(bar.verdict not in STYLES for bar in rows):
        kinds.append(OTHER)
    if up is not None:
        kinds.append(UP)
    parts, x = [], float(_PAD)
    for style in kinds:
        parts.append(
            f'<g class="sfx-key {style.css}"><rect x="{x:.0f}" y="3" width="12" height="10" fill="{style.colour}"/>'
            f'<text x="{x + 16:.0f}" y="12">{html.escape(style.label)}</text></g>'
        )
        x += 16 + 7 * len(style.label) + 14
    return '<g class="sfx-legend">' + "".join(parts) + "</g>"


def _axis(span: float, plot_x: float, scale: float, bottom: float) -> str:
    """A labelled tick every few seconds (:func:`~pytest_slurmflox.reporting.timeline_data.ticks`), its line down the
    plot."""
    parts = []
    for t in ticks(span):
        x = plot_x + t * scale
        anchor = "start" if t == 0 else "middle"
        parts.append(
            f'<line class="sfx-tick" x1="{x:.1f}" y1="{_HEAD - 8}" x2="{x:.1f}" y2="{bottom:.0f}" stroke="#d0d0d0"/>'
            f'<text x="{x:.1f}" y="{_HEAD - 11}" text-anchor="{anchor}">{tick_label(t)}</text>'
        )
    return '<g class="sfx-axis">' + "".join(parts) + "</g>"


def _up_band(up: float, bottom: float) -> str:
    """Provisioning: a fixed narrow band left of the plot, labelled ``up`` and its duration."""
    x = _LABEL_W
    return (
        f'<g class="sfx-band {UP.css}"><title>{html.escape(f"provisioning (--slurmflox-up): {up:.1f} s")}</title>'
        f'<rect x="{x}" y="{_HEAD - 8}" width="{_UP_W - 8}" height="{bottom - _HEAD + 8:.0f}" fill="{UP.colour}"/>'
        f'<text x="{x + 4}" y="{_HEAD + 5}">up</text>'
        f'<text x="{x + 4}" y="{_HEAD + 18}">{tick_label(round(up))}</text></g>'
    )


def timeline_svg(rows: Sequence[Bar], up: float | None = None) -> str:
    """The timeline as one ``<svg>`` element: the legend, the axis from 0 (the first check's start), an ``up`` band
    of ``up`` seconds when given, and the bars (:data:`FULL_ROWS` or fewer: a row each, whose label is the check's
    whole name, wrapped in the label column, never cut; more: lanes per group). Every bar has a ``<title>`` with
    its full node id and detail, shown on hover."""
    span = max([b.end for b in rows], default=0.0) or 1.0
    plot_x = _LABEL_W + (_UP_W if up is not None else 0)
    scale = _PLOT_W / span
    parts, bottom = (_full_rows if len(rows) <= FULL_ROWS else _lane_rows)(rows, plot_x, scale)
    bottom = max(bottom, _HEAD + 24.0)
    return (
        f'<svg id="slurmflox-timeline-svg" xmlns="http://www.w3.org/2000/svg" width="{plot_x + _PLOT_W + 30}" '
        f'height="{bottom + 8:.0f}" font-family="sans-serif" font-size="{_FONT}">'
        + _legend(rows, up)
        + _axis(span, plot_x, scale, bottom)
        + (_up_band(up, bottom) if up is not None else "")
        + "".join(parts)
        + "</svg>"
    )


def timeline_html(checks: Sequence[Check], up: tuple[float, float] | None = None) -> str:
    """The report's timeline section: a line saying how many checks over how long, then :func:`timeline_svg`.
    ``up`` is when a provisioning in this run began and ended (epoch seconds), if there was one."""
    rows = bars(checks)
    if not rows:
        return '<div id="slurmflox-timeline"><h2>Timeline</h2><p>No check ran.</p></div>'
    took = max(0.0, up[1] - up[0]) if up else None
    before = f" after {took:.1f} s of provisioning (up)" if took is not None else ""
    many = f"{len(rows)} check{'s' if len(rows) > 1 else ''}"
    return (
        '<div id="slurmflox-timeline"><h2>Timeline</h2>'
        f"<p>{many} over {max(b.end for b in rows):.1f} s from the first check's start{before}; "
        "hover a bar for its check, jobs and workers.</p>"
        f'<div class="sfx-scroll">{timeline_svg(rows, took)}</div></div>'
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
