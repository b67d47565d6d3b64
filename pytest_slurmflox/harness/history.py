"""Group TB's history: ``--slurmflox-compare`` (this run against an earlier one) and ``--slurmflox-save-baseline``.

A plugin of its own, registered on the controller of a reporting run only when one of the two is asked for. The
earlier run is read before anything runs (a missing or unreadable file is one line, nothing run); the comparison
and the baseline are made from the metrics the report writer folded from the checks, at the session's end: the
comparison in the terminal summary and in the HTML report (a line per metric: both values and the ratio, FAIL where
it regressed beyond the outlier tolerance), the baseline written once, never over a file that exists.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..judges.baselines import burst_jobs
from ..judges.comparison import Comparison, baseline_block, compare, evidence_metrics, figures
from ..model.workdir import atomic_write
from ..reporting.report import ReportWriter
from .options import get_option


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
    said: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        now = figures(m for values in self.writer.metrics.values() for m in values)
        if self.earlier is not None:
            self.comparisons = compare(self.earlier, now)
            if not self.comparisons:
                self.said.append("compare: this run measured no TB metric the earlier run has (run -m TB)")
        if self.save is not None:
            self.said.append(self._save(now))

    def _save(self, now: dict[str, float]) -> str:
        assert self.save is not None
        if not now:
            return f"save-baseline: {self.save} not written: this run measured no TB metric (run -m TB)"
        if self.save.exists():
            return f"save-baseline: {self.save} exists and is left as it is"
        jobs = burst_jobs(self.writer.state.spec.performance if self.writer.state.spec is not None else {})
        text = baseline_block(now, run_id=self.writer.state.run_id, burst_jobs=jobs)
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
    config.pluginmanager.register(History(writer, earlier, target), "slurmflox-history")
