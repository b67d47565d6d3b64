"""Group TB over time: this run's metrics against an earlier run's, and this run's as a baseline a team commits.

Contract. A run's *figure* for a metric is the median of its samples (every worker, every ring pair, or the one
cluster-wide value), from the ``metrics`` lists of its evidence.json checks: what a metric is for the cohort, so two
runs compare like for like even when their cohorts differ in size.

- :func:`compare`: one :class:`Comparison` per metric both runs measured, with the ratio now / before. A throughput
  below ``throughput_ratio`` x before, or a latency above ``latency_ratio`` x before, regressed: the same tolerances
  the cohort judge uses (``--slurmflox-outlier-throughput`` and ``--slurmflox-outlier-latency``).
- :func:`baseline_block`: the figures as a target file's ``expect.performance`` block, each ``reference`` the
  figure and its band the same tolerance on the side that matters (a throughput's ``lower`` as a percent, a latency's
  ``upper`` as the larger of ``latency_ratio`` x the reference and the reference plus :data:`LATENCY_SLACK`: a
  latency of a few microseconds or a tenth of a second would otherwise fail on the jitter of one scheduling pass).
  The earlier run is the team's record, never the worker under test; the block is theirs to edit and commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .baselines import BURST_JOBS, METRICS, median

#: Absolute room above a latency's reference in a saved baseline, per unit (cluster acceptance budgets such as "OSU
#: latency may rise 30% or 10 us" name an absolute floor for the same reason).
LATENCY_SLACK = {"us": 10.0, "s": 0.5}


def figures(metrics: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Metric -> the median of its samples, for the metrics TB knows (evidence.json's ``metrics`` entries)."""
    values: dict[str, list[float]] = {}
    for entry in metrics:
        name, value = entry.get("metric"), entry.get("value")
        if name in METRICS and isinstance(value, int | float) and not isinstance(value, bool):
            values.setdefault(str(name), []).append(float(value))
    return {name: median(found) for name, found in values.items()}


def evidence_metrics(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every ``metrics`` entry of an evidence.json document."""
    checks = doc.get("checks")
    if not isinstance(checks, list):
        raise ValueError("not an evidence.json: it has no list of checks")
    return [m for c in checks if isinstance(c, Mapping) for m in c.get("metrics") or [] if isinstance(m, Mapping)]


@dataclass(frozen=True)
class Comparison:
    metric: str
    before: float
    now: float
    regressed: bool
    limit: str  #: the tolerance it is judged against, as said

    @property
    def ratio(self) -> float:
        return self.now / self.before if self.before else float("inf")

    def line(self) -> str:
        unit = METRICS[self.metric].unit
        said = f"FAIL, regressed beyond {self.limit}" if self.regressed else f"within {self.limit}"
        return f"{self.metric}: before {self.before:g} {unit}, now {self.now:g} {unit}, ratio {self.ratio:.2f} ({said})"


def compare(
    before: Mapping[str, float], now: Mapping[str, float], *, throughput_ratio: float, latency_ratio: float
) -> list[Comparison]:
    """Every metric both runs measured, in TB's order, judged against the tolerance on the side that matters."""
    out = []
    for name, metric in METRICS.items():
        if name not in before or name not in now:
            continue
        if metric.higher_is_better:
            regressed, limit = now[name] < throughput_ratio * before[name], f"x{throughput_ratio:g} of before"
        else:
            regressed, limit = now[name] > latency_ratio * before[name], f"x{latency_ratio:g} of before"
        out.append(Comparison(name, before[name], now[name], regressed, limit))
    return out


def baseline_block(
    now: Mapping[str, float], *, run_id: str, throughput_ratio: float, latency_ratio: float, burst_jobs: int
) -> str:
    """This run's figures as a target file's ``expect`` block (YAML with a comment saying where it came from)."""
    performance: dict[str, dict[str, Any]] = {}
    for name, metric in METRICS.items():
        if name not in now:
            continue
        reference = round(now[name], 4)
        entry: dict[str, Any] = {"reference": reference, "unit": metric.unit}
        if metric.higher_is_better:
            entry["lower"] = f"{round((1 - throughput_ratio) * 100, 2):g}%"
        else:
            entry["upper"] = round(max(reference * latency_ratio, reference + LATENCY_SLACK.get(metric.unit, 0.0)), 4)
        if name == "scheduler_burst" and burst_jobs != BURST_JOBS:
            entry["jobs"] = burst_jobs
        performance[name] = entry
    head = (
        f"# expect.performance from run {run_id} (--slurmflox-save-baseline): each reference is the cohort's median\n"
        f"# in that run; a throughput may fall to x{throughput_ratio:g} of it, a latency rise to x{latency_ratio:g} "
        "(or by a small absolute slack).\n# Merge it into the target file's expect: block and edit the bands to the "
        "site's own budget.\n"
    )
    return head + yaml.safe_dump({"expect": {"performance": performance}}, sort_keys=False)
