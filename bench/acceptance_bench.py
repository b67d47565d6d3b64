"""Benchmark of the default acceptance run: runs it N times serially and N times under pytest-xdist against
the deployment recorded in the work dir, and prints median/min/max wall time, the longest single check, their
ratio, the phase costs, the host's load average around the runs and whether every run gave the same verdicts.
The worker count goes through ``--slurmflox-workers`` (0 = serial), so a concurrent run is the plugin's default
one (long waits first, ``--maxschedchunk 1``), not a bare ``-n``.

Why a script and not a timed test: wall time on a shared 2-core machine is a measurement, not a pass/fail fact.
Phases: ``up`` is a no-change ``pytest --slurmflox-up=local``; ``checks`` is the plugin's own run duration from
evidence.json; ``report`` is the rest of the wall time (start-up, collection, writing HTML/JUnit, secret scan).

    .venv/bin/python bench/acceptance_bench.py --runs 5 --workers 0 2 -- --slurmflox-workdir=/path

Cohort-size axis: ``--cohorts 3 12 32`` grows (or shrinks) the local deployment to each size in turn
(``SLURMFLOX_COMPUTE_REPLICAS=N pytest --slurmflox-up=local``, timed as "converge"), runs the acceptance run
``--runs`` times with the first ``--workers`` value, and prints per size: wall, the sum of check times, and the five
checks that grew most against the first size; the verdicts must be the same at every size.

    .venv/bin/python bench/acceptance_bench.py --runs 1 --workers 2 --cohorts 3 12 -- --slurmflox-workdir=/path
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    wall: float
    up: float
    checks: float
    longest: tuple[str, float]
    verdicts: dict[str, str]
    load: float  #: 1-minute load average when the run ended
    costs: dict[str, float]  #: each check's cost (:func:`cost`)
    replicas: int = 0  #: the workers the run's target declared (its report's environment table)


def _pytest(*args: str, env: dict[str, str] | None = None) -> float:
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return time.monotonic() - began


def cost(check: dict) -> float:
    """Wall seconds a check took from its first action: its span when recorded, else its pytest duration."""
    return max(float(check.get("span") or 0.0), float(check["duration"]))


def one_run(workers: int, extra: list[str], reports: Path, run_id: str, env: dict[str, str] | None = None) -> Sample:
    """One acceptance run after a no-change ``up`` with the same settings (``env``: the cohort size; without it the
    ``up`` would converge the deployment back to the default size before the run)."""
    up = _pytest("--slurmflox-up=local", "-k", "sfx_bench_selects_nothing", *extra, env=env)  # converge only
    wall = _pytest(
        "-m",
        "acceptance",
        f"--slurmflox-workers={workers}",
        f"--slurmflox-reports={reports}",
        f"--slurmflox-run-id={run_id}",
        *extra,
    )
    doc = json.loads((reports / run_id / "evidence.json").read_text())
    checks = doc["checks"]
    # a check's cost to the run is its span: an early job (T7's time limit) began long before the check's own setup
    longest = max(((c["nodeid"], cost(c)) for c in checks), key=lambda t: t[1], default=("none", 0.0))
    verdicts = {c["nodeid"]: c["verdict"] for c in checks}
    costs = {c["nodeid"]: cost(c) for c in checks}
    replicas = int(doc["run"]["target"].get("Worker replicas (expected)") or 0)
    return Sample(wall, up, float(doc["run"]["duration"]), longest, verdicts, os.getloadavg()[0], costs, replicas)


def table_row(label: str, samples: list[Sample]) -> str:
    walls = [s.wall for s in samples]
    # The longest check varies from run to run (Slurm's time-limit sweep), so each run is set against its own.
    longest = statistics.median(s.longest[1] for s in samples)
    ratio = statistics.median(s.wall / s.longest[1] if s.longest[1] else 0.0 for s in samples)
    med = statistics.median(walls)
    return (
        f"| {label} | {len(samples)} | {med:.1f} | {min(walls):.1f} | {max(walls):.1f} | {longest:.1f} | "
        f"{ratio:.2f} | {statistics.median(s.up for s in samples):.2f} | "
        f"{statistics.median(s.checks for s in samples):.1f} | "
        f"{statistics.median(s.wall - s.checks for s in samples):.1f} | "
        f"{min(s.load for s in samples):.1f}-{max(s.load for s in samples):.1f} |"
    )


def longest_alone(nodeid: str, workers: int, extra: list[str], reports: Path, run_id: str) -> float:
    """Wall seconds of the whole command that runs only ``nodeid`` (with its pre-flight and report): the floor a
    concurrent run can approach."""
    return _pytest(
        nodeid,
        "-m",
        "acceptance",  # a named check is still only run in an acceptance run
        f"--slurmflox-workers={workers}",
        f"--slurmflox-reports={reports}",
        f"--slurmflox-run-id={run_id}",
        *extra,
    )


def cohort_rows(sizes: list[int], workers: int, runs: int, extra: list[str], reports: Path) -> bool:
    """The cohort-size table; True when every size gave the same verdicts.

    Per size: the converge time, the longest check of a first run timed alone (just before the measured runs), then
    the acceptance runs: wall, its ratios to the first size's wall and to the longest check alone (the issue asks
    <= 1.15 and <= 1.3), the sum of check times and the five checks that grew most against the first size."""
    print(
        "| workers | converge s | longest check alone s | wall s (median) | wall / first size | wall / longest alone "
        "| sum of check times s | five checks that grew most (s) | load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    first: dict[str, float] = {}
    first_wall = 0.0
    verdicts: list[dict[str, str]] = []
    for size in sizes:
        env = {"SLURMFLOX_COMPUTE_REPLICAS": str(size)}
        converge = _pytest("--slurmflox-up=local", "-k", "sfx_bench_selects_nothing", *extra, env=env)
        tag = secrets.token_hex(2)
        probe = one_run(workers, extra, reports, f"bench-{tag}-c{size}-probe", env)
        alone = longest_alone(probe.longest[0], workers, extra, reports, f"bench-{tag}-c{size}-alone")
        samples = [one_run(workers, extra, reports, f"bench-{tag}-c{size}-{i}", env) for i in range(runs)]
        cohort = {s.replicas for s in (probe, *samples)}
        if cohort != {size}:  # the table is only worth its cohort axis if each run ran on that many workers
            raise SystemExit(f"a run at cohort size {size} ran on {sorted(cohort)} workers")
        verdicts.extend(s.verdicts for s in (probe, *samples))
        costs = {k: statistics.median(s.costs.get(k, 0.0) for s in samples) for k in samples[0].costs}
        grew = sorted(costs, key=lambda k: costs[k] - first.get(k, 0.0), reverse=True)[:5] if first else []
        shown = ", ".join(f"{k.rsplit('::', 1)[-1]} {first.get(k, 0.0):.1f}->{costs[k]:.1f}" for k in grew) or "-"
        first = first or costs
        wall = statistics.median(s.wall for s in samples)
        first_wall = first_wall or wall
        loads = [s.load for s in samples]
        print(
            f"| {size} | {converge:.1f} | {alone:.1f} ({probe.longest[0].rsplit('::', 1)[-1]}) | {wall:.1f} | "
            f"{wall / first_wall:.2f} | {wall / alone:.2f} | {sum(costs.values()):.1f} | {shown} | "
            f"{min(loads):.1f}-{max(loads):.1f} |",
            flush=True,
        )
    return all(v == verdicts[0] for v in verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="0 = serial; N = N xdist workers")
    parser.add_argument("--cohorts", type=int, nargs="*", default=[], help="cohort sizes (COMPUTE_REPLICAS)")
    parser.add_argument("extra", nargs="*", help="options for every pytest call (after --)")
    args = parser.parse_args(argv)
    reports = Path(tempfile.mkdtemp(prefix="sfx-bench-"))
    if args.cohorts:
        same = cohort_rows(args.cohorts, args.workers[0], args.runs, args.extra, reports)
        print(f"verdicts identical across cohort sizes: {same}; reports in {reports}")
        return 0 if same else 1
    print(
        "| mode | runs | median s | min s | max s | median longest check s | median wall/longest | up s | checks s "
        "| rest s "
        "| load (1 min) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    verdicts: list[dict[str, str]] = []
    for workers in args.workers:
        label = "serial" if workers == 0 else f"{workers} workers"
        # run ids of this invocation only: a check may key worker-side files on the run id
        tag = secrets.token_hex(2)
        samples = [one_run(workers, args.extra, reports, f"bench-{tag}-{workers}-{i}") for i in range(args.runs)]
        verdicts.extend(s.verdicts for s in samples)
        print(table_row(label, samples), flush=True)
    same = all(v == verdicts[0] for v in verdicts)
    print(f"verdicts identical across all runs: {same}; reports in {reports}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
