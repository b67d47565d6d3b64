"""Performance baselines (group TB): each metric judged against a declared band, else against the cohort's median.

Contract. A :class:`Sample` is one measured value of one metric for one subject: a worker (``worker2``), a directed
ring pair (``worker1->worker2``, the first end started the exchange) or the cluster as a whole (``cluster``).

- Declared: the target's ``expect.performance.<metric>`` gives ``reference`` and ``unit``, and optionally ``lower``
  and ``upper``; each is an absolute value in the metric's unit (the bound itself) or a percent string (``"30%"``:
  the reference minus, or plus, that share of it). Every sample outside ``[lower, upper]`` is a problem naming the
  metric, the subject, the value and the band. A declared unit other than the metric's own is a problem too (the
  values would be compared in different units). A reference declared without ``lower`` or ``upper`` still bounds:
  :func:`default_band` (a throughput -20%, a latency +30% or +10 us, the budget sites use for OSU figures); one side
  given leaves the other unbounded. A heterogeneous cluster adds ``features``: a name (a Slurm node feature, or a
  partition the worker is in) -> that kind of worker's own ``reference`` (its ``lower``/``upper`` when given, else
  the metric's); a worker is judged by the band of the first listed name it carries (a pair by its first end), the
  others by the metric's own.
- The cohort: judges/outliers.py judges every per-worker and per-pair metric, declared or not, each worker against
  the median of the others (the same declared ``features`` say which workers are of a different kind).

The expectations never come from the worker under test: the band is the target's, the median the cohort's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

#: The cohort judge's default thresholds (``--slurmflox-outlier-throughput`` and ``--slurmflox-outlier-latency``).
THROUGHPUT_RATIO = 0.7
LATENCY_RATIO = 1.5
#: A reference declared without a band: a throughput may fall this share below it (the OSU bandwidth budget sites
#: use, -20%, applied to memory and storage alike) ...
DEFAULT_THROUGHPUT_SHARE = 0.2
#: ... and a latency rise by this share of it ...
DEFAULT_LATENCY_SHARE = 0.3
#: ... or by this much, whichever is more (per unit: "OSU latency may rise 30% or 10 us"; a scheduler time 0.5 s).
LATENCY_SLACK = {"us": 10.0, "s": 0.5}


@dataclass(frozen=True)
class Metric:
    """One metric TB measures: its unit, whether more is better, what it is taken over and how it is measured."""

    name: str
    unit: str
    higher_is_better: bool
    over: str  #: "worker", "pair" (a directed ring pair) or "cluster"
    method: str


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("mpi_latency", "us", False, "pair", "OSU-style ping-pong, 8 B, half the median round trip"),
        Metric(
            "mpi_bandwidth",
            "MB/s",
            True,
            "pair",
            "OSU-style one-way stream (osu_bw), a window of 8 x 1 MiB then a 1-byte ack, bytes / the fastest window",
        ),
        Metric(
            "memory_triad",
            "MB/s",
            True,
            "worker",
            "STREAM-triad-like a[i]=b[i]+s*c[i], 3 x 8 B per element; the best of 3 trials taken in turns, "
            "again while the cohort disagrees (3 rounds at most)",
        ),
        Metric("storage_write", "MB/s", True, "worker", "dd of a file to the shared home, fsync'd, fastest of 3"),
        Metric(
            "storage_read",
            "MB/s",
            True,
            "worker",
            "the previous ring worker's file read from the shared home past the reader's page cache, fastest of 3",
        ),
        Metric(
            "storage_read_login",
            "MB/s",
            True,
            "cluster",
            "a worker's file read from the shared home at the login endpoint past its page cache, fastest of 3",
        ),
        Metric("scheduler_submit_to_start", "s", False, "cluster", "srun of one task: login clock to task clock"),
        Metric("scheduler_srun_launch", "s", False, "cluster", "srun of one task on every worker, wall at login"),
        Metric("scheduler_burst", "jobs/s", True, "cluster", "N one-task sbatch jobs, submitted to all ended"),
    )
}
#: The burst's job count when the target does not give ``expect.performance.scheduler_burst.jobs``.
BURST_JOBS = 50


@dataclass(frozen=True)
class Sample:
    metric: str
    subject: str
    value: float
    how: str = ""  #: how this value was taken where the metric can be taken more than one way (a read's method)

    def as_dict(self) -> dict[str, Any]:
        m = METRICS[self.metric]
        method = f"{m.method}; {self.how}" if self.how else m.method
        return {"metric": self.metric, "subject": self.subject, "value": round(self.value, 4), "unit": m.unit,
                "over": m.over, "method": method}  # fmt: skip


@dataclass(frozen=True)
class Band:
    """A declared reference: ``lower``/``upper`` as resolved absolute bounds (None: unbounded on that side)."""

    reference: float
    unit: str
    lower: float | None
    upper: float | None
    scope: str = ""  #: the ``features`` name whose band this is, "" for the metric's own
    default: bool = False  #: the reference came without a band: :func:`default_band`'s

    def holds(self, value: float) -> bool:
        return (self.lower is None or value >= self.lower) and (self.upper is None or value <= self.upper)

    def describe(self) -> str:
        low = "-inf" if self.lower is None else f"{self.lower:g}"
        high = "inf" if self.upper is None else f"{self.upper:g}"
        scope = f", for feature {self.scope}" if self.scope else ""
        default = ", the default band of a reference declared without one" if self.default else ""
        return f"[{low}, {high}] {self.unit} (reference {self.reference:g}{scope}{default})"


def bound(reference: float, given: Any, sign: int) -> float | None:
    """A band's side: None when not given, ``reference +/- p%`` for a percent string, else the absolute value."""
    if given is None:
        return None
    if isinstance(given, str):
        text = given.strip()
        if not text.endswith("%"):
            raise ValueError(f"{given!r} is neither a number nor a percent like '30%'")
        return reference * (1 + sign * float(text[:-1]) / 100)
    return float(given)


def band(entry: Mapping[str, Any], metric: Metric | None = None) -> Band:
    """The band of one declared ``expect.performance.<metric>`` entry; one that gives neither ``lower`` nor
    ``upper`` gets :func:`default_band`'s side for ``metric`` (a reference always bounds)."""
    reference = float(entry["reference"])
    if metric is not None and entry.get("lower") is None and entry.get("upper") is None:
        return default_band(reference, str(entry["unit"]), metric)
    return Band(reference, str(entry["unit"]), bound(reference, entry.get("lower"), -1),
                bound(reference, entry.get("upper"), +1))  # fmt: skip


def default_band(reference: float, unit: str, metric: Metric) -> Band:
    """The band of a reference declared without one, on the side that matters: a throughput (bandwidth, memory,
    storage, the burst) may fall :data:`DEFAULT_THROUGHPUT_SHARE` below it; a latency may rise by
    :data:`DEFAULT_LATENCY_SHARE` of it or by :data:`LATENCY_SLACK`, whichever is more (the budget sites use for OSU
    latency: +30% or +10 us)."""
    if metric.higher_is_better:
        return Band(reference, unit, reference * (1 - DEFAULT_THROUGHPUT_SHARE), None, default=True)
    slack = max(reference * DEFAULT_LATENCY_SHARE, LATENCY_SLACK.get(metric.unit, 0.0))
    return Band(reference, unit, None, reference + slack, default=True)


#: Worker -> its kind: its Slurm node features and the partitions it is in (empty where not known).
Kinds = Mapping[str, frozenset[str]]


def kind_of(node: Mapping[str, str]) -> frozenset[str]:
    """A worker's kind from its ``scontrol -o show node`` fields: its available features and its partitions."""
    names = f"{node.get('AvailableFeatures', '')},{node.get('Partitions', '')}".split(",")
    return frozenset(n for n in (x.strip() for x in names) if n and n != "(null)")


def band_for(entry: Mapping[str, Any], kind: frozenset[str], metric: Metric | None = None) -> Band:
    """The band a worker of ``kind`` is judged by: the first ``features`` name it carries, else the metric's (a
    side neither gives: :func:`default_band`'s for ``metric``)."""
    for name, own in (entry.get("features") or {}).items():
        if name in kind and isinstance(own, Mapping):
            merged = {"unit": entry["unit"], "lower": entry.get("lower"), "upper": entry.get("upper"), **own}
            return replace(band(merged, metric), scope=str(name))
    return band(entry, metric)


def _kind(subject: str, kinds: Kinds) -> frozenset[str]:
    return kinds.get(subject.split("->")[0], frozenset())


def declared_problems(
    samples: Iterable[Sample], declared: Mapping[str, Mapping[str, Any]], kinds: Kinds | None = None
) -> list[str]:
    """Every sample of a declared metric outside its band (naming metric, subject, value and band; ``kinds`` picks a
    worker's ``features`` band), and every declared unit that is not the metric's own."""
    problems: list[str] = []
    samples = list(samples)
    for name, entry in declared.items():
        if name not in METRICS or not isinstance(entry, Mapping) or "reference" not in entry:
            continue
        unit = METRICS[name].unit
        if str(entry["unit"]) != unit:
            problems.append(f"{name}: declared in {entry['unit']}, measured in {unit}")
            continue
        for s in (s for s in samples if s.metric == name):
            b = band_for(entry, _kind(s.subject, kinds or {}), METRICS[name])
            if not b.holds(s.value):
                problems.append(f"{name} {s.subject}: {s.value:g} {unit} outside {b.describe()}")
    return problems


def median(values: Iterable[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    return float(statistics.median(list(values)))


def best_of(*rounds: Iterable[Sample]) -> list[Sample]:
    """Each (metric, subject)'s best value over ``rounds`` of the same measurement (the highest throughput, the
    lowest latency), in the order first seen: more rounds can only bring a subject's own better trial forward,
    never a value it did not show."""
    best: dict[tuple[str, str], Sample] = {}
    for s in (s for samples in rounds for s in samples):
        held = best.get((s.metric, s.subject))
        better = max if METRICS[s.metric].higher_is_better else min
        if held is None or better(held.value, s.value) != held.value:
            best[(s.metric, s.subject)] = s
    return list(best.values())


def burst_jobs(declared: Mapping[str, Any]) -> int:
    """The burst's job count: ``expect.performance.scheduler_burst.jobs``, else :data:`BURST_JOBS`."""
    entry = declared.get("scheduler_burst") or {}
    return int(entry.get("jobs", BURST_JOBS)) if isinstance(entry, Mapping) else BURST_JOBS


def parse_lines(lines: Iterable[str]) -> list[Sample]:
    """``metric subject value`` lines (the suite's programs print them) as samples; other lines are ignored."""
    out: list[Sample] = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] in METRICS:
            try:
                out.append(Sample(parts[0], parts[1], float(parts[2])))
            except ValueError:
                continue
    return out
