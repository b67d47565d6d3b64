"""Group TB's measured values as pictures: one small inline SVG per metric, one bar per worker or ring pair.

Contract: :func:`charts_html` draws, from the values a TB check recorded (evidence.json ``metrics``, each with the
``median``, declared ``lower``/``upper``, ``named`` and ``judged_by`` the judges gave it, judges/outliers.py
``assess``), per
metric measured on workers or pairs a bar per subject scaled to the largest value, the median as a dashed line and
the declared band as a shaded stripe where the target declares one; a bar a judge named (outside the band, or the
cohort's outlier) is drawn in the failure colour. Each metric says what judged it (the reference band, the cohort,
both), or "judged by nothing" in the failure colour. A cluster-wide metric is one number, a line of text. Plain SVG
elements, no script, nothing fetched: the report opens offline. Every text is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any

WIDTH, BAR, GAP, LABEL = 520, 14, 4, 170
OK, BAD, BAND, MEDIAN = "#3b7dd8", "#c0392b", "#d5f5d5", "#555"


def _bound(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def metric_svg(values: list[Mapping[str, Any]]) -> str:
    """One metric's picture (``values`` all of that metric)."""
    low, high = _bound(values[0].get("lower")), _bound(values[0].get("upper"))
    top = max([float(v["value"]) for v in values] + [b for b in (low, high) if b is not None]) or 1.0
    scale = (WIDTH - LABEL - 90) / top
    height = len(values) * (BAR + GAP) + GAP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img">']
    if low is not None or high is not None:
        x0, x1 = (low or 0.0) * scale, (high if high is not None else top) * scale
        parts.append(f'<rect x="{LABEL + x0:.1f}" y="0" width="{max(x1 - x0, 1):.1f}" height="{height}" '
                     f'fill="{BAND}"><title>declared band</title></rect>')  # fmt: skip
    for i, v in enumerate(sorted(values, key=lambda x: str(x["subject"]))):
        y, width = GAP + i * (BAR + GAP), max(float(v["value"]) * scale, 1.0)
        text = html.escape(f"{float(v['value']):g} {v['unit']}")
        subject = html.escape(str(v["subject"]))
        colour = BAD if v.get("named") else OK
        parts.append(f'<text x="{LABEL - 6}" y="{y + BAR - 3}" text-anchor="end" font-size="11">{subject}</text>'
                     f'<rect x="{LABEL}" y="{y}" width="{width:.1f}" height="{BAR}" fill="{colour}">'
                     f"<title>{subject}: {text}</title></rect>"
                     f'<text x="{LABEL + width + 4:.1f}" y="{y + BAR - 3}" font-size="10">{text}</text>')  # fmt: skip
    mid = float(values[0].get("median", 0.0)) * scale + LABEL
    parts.append(f'<line x1="{mid:.1f}" y1="0" x2="{mid:.1f}" y2="{height}" stroke="{MEDIAN}" '
                 'stroke-dasharray="4 3"><title>cohort median</title></line></svg>')  # fmt: skip
    return "".join(parts)


def judged_by(value: Mapping[str, Any]) -> str:
    """What judged a metric, as HTML: "judged by reference band and cohort", or "judged by nothing" in red."""
    by = value.get("judged_by")
    if by is None:
        return ""
    if not by:
        return f'<span style="color:{BAD}">judged by nothing</span>'
    return html.escape("judged by " + " and ".join(str(b) for b in by))


def charts_html(values: Iterable[Mapping[str, Any]]) -> str:
    """The report's baselines section ('' when no check measured anything)."""
    by_metric: dict[str, list[Mapping[str, Any]]] = {}
    for v in values:
        by_metric.setdefault(str(v["metric"]), []).append(v)
    if not by_metric:
        return ""
    out = ['<div id="slurmflox-baselines"><h2>Performance baselines</h2>']
    for name, mine in by_metric.items():
        title = html.escape(f"{name} ({mine[0]['unit']}, {mine[0]['method']})")
        judged = judged_by(mine[0])
        if mine[0].get("over") == "cluster":
            value = f"{html.escape(str(mine[0]['value']))} {html.escape(str(mine[0]['unit']))}"
            out.append(f"<p><b>{title}</b>: {value}; {judged}</p>")
        else:
            out.append(f"<p><b>{title}</b>; {judged}</p>{metric_svg(mine)}")
    return "".join(out) + "</div>"
