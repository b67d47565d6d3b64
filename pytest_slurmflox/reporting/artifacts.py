"""The run directory's artifacts: where they go, long outputs moved to logs/, and the HTML fragments.

Every acceptance run writes ``<reports>/<run-id>/``::

    report.html     self-contained pytest-html report: environment table, sign-off summary, per-check evidence
    junit.xml       pytest's JUnit XML (xunit2); each check carries its group and evidence as properties
    evidence.json   schema ``slurmflox-evidence/1`` (schemas/evidence.json): run metadata, every check with its
                    requirement id, verdict, evidence and skip reason, and the per-group sign-off summary
    logs/           outputs longer than :data:`LONG_OUTPUT` characters, linked from the HTML and evidence.json
"""

from __future__ import annotations

import hashlib
import html
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.secrets import Redactor
from ..model.workdir import atomic_write
from .profiles import NOT_APPLICABLE
from .signoff import EXCERPT, FAIL, PASS, SKIP, SignOff
from .timeline_data import style_of, style_rules

#: Outputs longer than this go to logs/ as files; the HTML and evidence.json keep an excerpt and a link.
LONG_OUTPUT = 4000


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


def report_style() -> str:
    """The style of slurmflox's block at the top of the report (readable over pytest-html's grey body text), as an
    inline ``<style>`` element: the report stays one self-contained file. The rules live in ``resources/report.css``
    (data apart from the writer, as pytest-html keeps its own ``resources/style.css``); the colours of the verdicts'
    classes are generated from the one mapping that names them
    (:data:`~pytest_slurmflox.reporting.timeline_data.STYLES`)."""
    css = (Path(__file__).parents[1] / "resources" / "report.css").read_text(encoding="utf-8") + style_rules()
    return f'<style id="slurmflox-style">{css}</style>'


#: the verdict's reasons shown open above the summary table; more are folded (each group's row has its own)
REASONS_SHOWN = 3


def summary_html(signoff: SignOff, run_id: str, paths: ReportPaths | None = None) -> str:
    """The sign-off summary for the top of the HTML report (escaped; no newlines that pre-wrap would show)."""
    e = html.escape
    colour = "#2e7d32" if signoff.signed else "#c62828"
    mode = "sign-off requested" if signoff.requested else "sign-off not requested"
    rows = "".join(
        f'<tr class="sfx-group {style_of(g.verdict).css}"><td>{e(g.group)}</td>'
        f"<td>{'required' if g.required else 'optional'}</td><td><b>{e(g.verdict)}</b></td>"
        f"<td>{g.counts[PASS]}</td><td>{g.counts[FAIL]}</td><td>{g.counts[SKIP]}</td>"
        f"<td>{g.counts.get(NOT_APPLICABLE, 0)}</td>"
        f"<td>{e(g.title)}</td><td><small>{'<br>'.join(e(r) for r in g.reasons)}</small></td></tr>"
        for g in signoff.groups
    )
    reasons = "".join(f"<li>{e(r)}</li>" for r in signoff.reasons[:REASONS_SHOWN])
    more = signoff.reasons[REASONS_SHOWN:]
    if more:  # the rest folded: each group's reasons are in its row of the table right below
        items = "".join(f"<li>{e(r)}</li>" for r in more)
        reasons += f'<li><details class="sfx-more"><summary>{len(more)} more</summary><ul>{items}</ul></details></li>'
    return (
        f'<div id="slurmflox-signoff"><h2>Sign-off summary</h2>'
        f'<p id="slurmflox-verdict" style="font-size:1.3em;color:{colour}"><b>{e(signoff.verdict)}</b>'
        f" &mdash; run {e(run_id)} ({e(mode)})</p>"
        f'<p id="slurmflox-profile">profile <b>{e(signoff.profile)}</b>; not applicable: '
        f"{e(', '.join(signoff.not_applicable) or 'nothing')} (shown as NOT APPLICABLE, never PASS)</p>"
        + (f'<ul id="slurmflox-reasons">{reasons}</ul>' if reasons else "")
        + '<table id="slurmflox-groups">'
        "<tr><th>Group</th><th>Required</th><th>Verdict</th><th>Pass</th><th>Fail</th><th>Skip</th><th>N/A</th>"
        f"<th>Requirement</th><th>Reasons</th></tr>{rows}</table>"
        + (
            f'<p>Machine-readable: <a href="{e(paths.evidence.name)}">{e(paths.evidence.name)}</a>, '
            f'<a href="{e(paths.junit.name)}">{e(paths.junit.name)}</a></p>'
            if paths
            else ""
        )
        + "</div>"
    )


def notes_html(notes: list[str]) -> str:
    """The run's progress lines (said by the run, not by any check: a substrate's probe, a worker pool's start), in
    a closed ``<details>`` below the timeline; nothing when there are none."""
    if not notes:
        return ""
    items = "".join(f"<li><code>{html.escape(note)}</code></li>" for note in notes)
    return (
        f'<details id="slurmflox-notes"><summary>Run notes: {len(notes)} progress line(s) of the run itself, '
        f'not of any check</summary><ul class="sfx-notes">{items}</ul></details>'
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
            '<div class="sfx-command">'
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
                parts.append(f'<div>{stream}:</div><pre class="sfx-{stream}">{e(text.rstrip())}</pre>')
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


def html_extra(content: str) -> dict[str, Any]:
    """``content`` as a pytest-html extra (HTML), a plain dict when pytest-html is not importable."""
    try:
        from pytest_html import extras

        return dict(extras.html(content))
    except ImportError:  # pragma: no cover - pytest-html is a dependency
        return {"name": "evidence", "format_type": "html", "content": content, "mime_type": None, "extension": None}


def plugin_version() -> str:
    """The installed pytest-slurmflox version, "unknown" when no distribution says."""
    try:
        from importlib.metadata import version

        return version("pytest-slurmflox")
    except Exception:
        return "unknown"


def iso(ts: float) -> str:
    """Epoch seconds as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
