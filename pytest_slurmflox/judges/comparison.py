"""Group TB over time: this run's metrics against an earlier run's, and this run's as a baseline a team commits.

Contract. A run's *figure* for a metric is the median of its samples (every worker, every ring pair, or the one
cluster-wide value), from the ``metrics`` lists of its evidence.json checks: what a metric is for the cohort, so two
runs compare like for like even when their cohorts differ in size.

- :func:`compare`: one :class:`Comparison` per metric both runs measured, with the ratio now / before. A throughput
  below :data:`SAVED_THROUGHPUT_SHARE` x before, or a latency above :data:`SAVED_LATENCY_FACTOR` x before,
  regressed: the tolerance of a saved baseline's first band, for the same reason (below).
- :func:`baseline_block`: the figures as a target file's ``expect.performance`` block, each ``reference`` the
  figure and a first band on the side that matters, wider than the cohort judge's: a throughput's ``lower`` at
  :data:`SAVED_THROUGHPUT_SHARE` of it, a latency's ``upper`` at the larger of :data:`SAVED_LATENCY_FACTOR` x the
  reference and the reference plus :data:`LATENCY_SLACK`. Why wider: workers of one run share that run's conditions
  (the cohort judge compares them with each other), but two runs do not, and how much a cluster's figures move from
  run to run is unknown until it has been measured a few times (a 2-core VM's memory triad moved 28% between two idle
  runs). The team narrows the bands to its own budget once its runs agree.
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
#: A saved baseline's first band: a throughput may fall to this share of its reference ...
SAVED_THROUGHPUT_SHARE = 0.5
#: ... and a latency rise to this multiple of it (or by :data:`LATENCY_SLACK`, whichever is more).
SAVED_LATENCY_FACTOR = 2.0


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

    def as_dict(self) -> dict[str, Any]:
        """The comparison in evidence.json (the TB comparison check's ``comparison``)."""
        return {"metric": self.metric, "unit": METRICS[self.metric].unit, "before": round(self.before, 4),
                "now": round(self.now, 4), "ratio": round(self.ratio, 4), "regressed": self.regressed,
                "limit": self.limit}  # fmt: skip

    def line(self) -> str:
        unit = METRICS[self.metric].unit
        said = f"FAIL, regressed beyond {self.limit}" if self.regressed else f"within {self.limit}"
        return f"{self.metric}: before {self.before:g} {unit}, now {self.now:g} {unit}, ratio {self.ratio:.2f} ({said})"


def compare(before: Mapping[str, float], now: Mapping[str, float]) -> list[Comparison]:
    """Every metric both runs measured, in TB's order, judged against the tolerance on the side that matters."""
    out = []
    for name, metric in METRICS.items():
        if name not in before or name not in now:
            continue
        if metric.higher_is_better:
            share = SAVED_THROUGHPUT_SHARE
            regressed, limit = now[name] < share * before[name], f"x{share:g} of before"
        else:
            factor = SAVED_LATENCY_FACTOR
            regressed, limit = now[name] > factor * before[name], f"x{factor:g} of before"
        out.append(Comparison(name, before[name], now[name], regressed, limit))
    return out


def baseline_block(now: Mapping[str, float], *, run_id: str, burst_jobs: int) -> str:
    """This run's figures as a target file's ``expect`` block (YAML with a comment saying where it came from)."""
    performance: dict[str, dict[str, Any]] = {}
    for name, metric in METRICS.items():
        if name not in now:
            continue
        reference = round(now[name], 4)
        entry: dict[str, Any] = {"reference": reference, "unit": metric.unit}
        if metric.higher_is_better:
            entry["lower"] = f"{round((1 - SAVED_THROUGHPUT_SHARE) * 100, 2):g}%"
        else:
            slack = LATENCY_SLACK.get(metric.unit, 0.0)
            entry["upper"] = round(max(reference * SAVED_LATENCY_FACTOR, reference + slack), 4)
        if name == "scheduler_burst" and burst_jobs != BURST_JOBS:
            entry["jobs"] = burst_jobs
        performance[name] = entry
    head = (
        f"# expect.performance from run {run_id} (--slurmflox-save-baseline): each reference is the cohort's median\n"
        f"# in that run; a first band: a throughput may fall to x{SAVED_THROUGHPUT_SHARE:g} of it, a latency rise to "
        f"x{SAVED_LATENCY_FACTOR:g} (or by a small absolute slack).\n# Merge it into the target file's expect: block "
        "and narrow the bands to the site's own budget once several runs agree.\n"
    )
    return head + yaml.safe_dump({"expect": {"performance": performance}}, sort_keys=False)
