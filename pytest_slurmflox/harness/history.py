"""Group TB's history: ``--slurmflox-compare`` (this run against an earlier one) and ``--slurmflox-save-baseline``.

A plugin of its own, registered on the controller of a reporting run only when one of the two is asked for. The
earlier run is read before anything runs (a missing or unreadable file is one line, nothing run); the comparison
and the baseline are made from the metrics the report writer folded from the checks, at the session's end, before
the verdict (this plugin is registered after the report writer, so pluggy calls its ``tryfirst`` sessionfinish first):

- the comparison is a check of group TB (:data:`COMPARE_NODEID`): FAIL naming each metric that regressed beyond
  the tolerance, PASS otherwise; in the verdict (a FAIL anywhere is NOT SIGNED OFF, and the run exits non-zero),
  in evidence.json (the check's record, its ``comparison`` a row per metric) and in the terminal and HTML report (a
  line per metric: both values and the ratio);
- the baseline is written once, never over a file that exists, and never from a run in which any TB check (the
  comparison included) did not PASS: a degraded cluster's figures are no baseline; one line says why nothing was
  written.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..judges.baselines import burst_jobs
from ..judges.comparison import Comparison, baseline_block, compare, evidence_metrics, figures
from ..model.workdir import atomic_write
from ..reporting.report import ReportWriter
from ..reporting.signoff import FAIL, PASS, Check
from .options import get_option

#: The comparison's node id in the verdict and evidence.json (group TB; no test file holds it).
COMPARE_NODEID = "slurmflox::TB::test_against_the_earlier_run"


def earlier_figures(given: str) -> dict[str, float]:
    """The figures of the run at ``given`` (its evidence.json, or the report directory holding it)."""
    path = Path(given).expanduser()
    if path.is_dir():
        path = path / "evidence.json"
    try:
        doc = json.loads(path.read_text())
        found = figures(evidence_metrics(doc))
    except (OSError, ValueError, AttributeError) as exc:
        raise pytest.UsageError(f"--slurmflox-compare: {path}: {exc} (nothing was run)") from None
    if not found:
        raise pytest.UsageError(f"--slurmflox-compare: {path} holds no TB metric to compare with (nothing was run)")
    return found


#: eq=False: a registered plugin must stay hashable (pytest builds sets of plugins for a test file outside
#: the conftests' folders, e.g. a site's own checks beside the suites); identity is what a plugin's equality is.
@dataclass(eq=False)
class History:
    """The comparison and the saved baseline of one run (see the module docstring)."""

    writer: ReportWriter
    earlier: dict[str, float] | None
    save: Path | None
    source: str = ""  #: the earlier run as given
    said: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the report writer's verdict (registered after it, so pluggy calls this ``tryfirst`` hook first):
        the comparison as a TB check, then the baseline."""
        self.judge(self.writer)

    def judge(self, writer: ReportWriter) -> None:
        """The comparison as a TB check of ``writer``'s run, then the baseline."""
        now = figures(m for values in writer.metrics.values() for m in values)
        if self.earlier is not None:
            self.comparisons = compare(self.earlier, now)
            if self.comparisons:
                self._check(writer)
            else:
                self.said.append("compare: this run measured no TB metric the earlier run has (run -m TB)")
        if self.save is not None:
            self.said.append(self._save(writer, now))

    def _check(self, writer: ReportWriter) -> None:
        regressed = [c for c in self.comparisons if c.regressed]
        lines = "\n".join(c.line() for c in self.comparisons)
        stamp = time.time()
        check = Check(COMPARE_NODEID, group="TB", verdict=FAIL if regressed else PASS, start=stamp, stop=stamp)
        if regressed:
            named = "; ".join(c.line() for c in regressed)
            check.reason = f"TB regressed against the earlier run {self.source}: {named}"[:500]
            check.failure = f"requirement not met: no TB metric regressed against {self.source}\n{lines}"
        check.evidence = [{"command": f"compare this run's TB figures with {self.source}", "where": "controller",
                           "user": "", "exit_status": 1 if regressed else 0, "stdout": lines, "stderr": "",
                           "duration": 0.0, "started": stamp}]  # fmt: skip
        writer.collector.checks[COMPARE_NODEID] = check
        writer.extra_records[COMPARE_NODEID] = {"comparison": [c.as_dict() for c in self.comparisons]}
        writer.state.exit.late_failure = writer.state.exit.late_failure or bool(regressed)

    def _save(self, writer: ReportWriter, now: dict[str, float]) -> str:
        assert self.save is not None
        if not now:
            return f"save-baseline: {self.save} not written: this run measured no TB metric (run -m TB)"
        if self.save.exists():
            return f"save-baseline: {self.save} exists and is left as it is"
        failed = [c for c in writer.collector.checks.values() if c.group == "TB" and c.verdict != PASS]
        if failed:
            shown = ", ".join(f"{c.nodeid.rsplit('::', 1)[-1]} {c.verdict}" for c in failed)
            return f"save-baseline: {self.save} not written: TB did not PASS in this run ({shown})"
        spec = writer.state.spec
        jobs = burst_jobs(spec.performance if spec is not None else {})
        text = baseline_block(now, run_id=writer.state.run_id, burst_jobs=jobs)
        atomic_write(self.save, text)
        return f"save-baseline: {len(now)} metric(s) written to {self.save} as expect.performance"

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.comparisons:
            rows = "".join(
                f'<li class="{"failed" if c.regressed else "passed"}">{html.escape(c.line())}</li>'
                for c in self.comparisons
            )
            prefix.append(
                f'<section id="slurmflox-compare"><h2>TB against the earlier run</h2><ul>{rows}</ul></section>'
            )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for c in self.comparisons:
            terminalreporter.write_line(f"slurmflox: TB compare {c.line()}", red=c.regressed, green=not c.regressed)
        for line in self.said:
            terminalreporter.write_line(f"slurmflox: {line}")


def register_history(config: pytest.Config, writer: ReportWriter) -> None:
    """Register :class:`History` when ``--slurmflox-compare`` or ``--slurmflox-save-baseline`` is given."""
    given, save = get_option(config, "slurmflox_compare"), get_option(config, "slurmflox_save_baseline")
    if not given and not save:
        return
    base = Path(config.invocation_params.dir)
    target = (base / Path(save).expanduser()) if save else None
    earlier = earlier_figures(str(base / Path(given).expanduser())) if given else None
    config.pluginmanager.register(History(writer, earlier, target, str(given or "")), "slurmflox-history")
