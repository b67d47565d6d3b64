"""Throwaway workers a check needs long before it judges them (TF): started once per run after the pre-flight.

TF's requirement is that a worker whose runtime cannot be realized never registers: the check starts one and must
see it stay out of Slurm for a window (:data:`suites.test_tf_failure_isolation.WINDOW`). Started by the check, that
window would hold an xdist process idle; started when the run starts (right after the pre-flight, next to the early
jobs of early.py), the window runs beside every other check; the check, ordered last
(``@pytest.mark.early(EarlyWorker(...))``, pytest_slurmflox/harness/concurrency.py), looks at a worker that has been out
of
Slurm since then (a dynamic node that registered stays listed), and waits only for what is left of the window, if
anything.

One start per run even under pytest-xdist, by the run's records (runrecord.py): the first process starts each worker
and records when; the check, in whichever process runs it, claims the record once and stops the worker when done. A
check that finds no record, or one already claimed, starts its own worker (the hand-off changes when the window
starts, never what is judged). When the run's last process ends (:func:`join` / :func:`leave`: one process's end
is not the run's, its sibling may still have a check to run that would claim the worker), :func:`release_unclaimed`
stops a worker nobody claimed (under the same lock as a claim, so a check never judges a worker another process
stopped: it starts its own).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.runrecord import RunRecords, locked, record_path

__all__ = [
    "EarlyWorker",
    "Started",
    "claim_worker",
    "early_workers",
    "join",
    "leave",
    "release_unclaimed",
    "start_early",
]


@dataclass(frozen=True)
class EarlyWorker:
    """A throwaway worker to start: its name (never a cohort worker's) and the runtime it is pinned to."""

    name: str
    ref: str


@dataclass(frozen=True)
class Started:
    """A check's hold on a throwaway worker: when it was started (epoch seconds), what starting it returned or
    raised (for the check's evidence), and whether it was the run's early start (False: the check started it now)."""

    name: str
    at: float
    outcome: str
    early: bool


def early_workers(items: Iterable[Any], marker: str = "early") -> list[EarlyWorker]:
    """The throwaway workers the selected checks declare (``early(EarlyWorker(...))``), once each, in order."""
    found: dict[str, EarlyWorker] = {}
    for item in items:
        mark = item.get_closest_marker(marker)
        for spec in mark.args if mark is not None else ():
            if isinstance(spec, EarlyWorker):
                found.setdefault(spec.name, spec)
    return list(found.values())


def _record(run: RunRecords, spec: EarlyWorker) -> Path:
    return record_path(run, f"throwaway-{spec.name}")


def _start(pool: Any, spec: EarlyWorker) -> tuple[float, str]:
    """Start the worker; (when, what the start returned or raised). A start that raises is an outcome, not an
    error: an unrealizable runtime surfaces that way on the local substrate, and the check judges the phase."""
    at = time.time()
    try:
        outcome = repr(pool.start_isolated_worker(spec.name, spec.ref))
    except Exception as exc:  # the runtime's failure is what the check expects to see
        outcome = repr(exc)
    return at, outcome[:2000]


def start_early(pool: Any, run: RunRecords, specs: Iterable[EarlyWorker]) -> list[str]:
    """Start each worker this run has not started yet (one process does, under the run's lock); their names."""
    started: list[str] = []
    with locked(record_path(run, "throwaway-start")):
        for spec in specs:
            record = _record(run, spec)
            with locked(record):
                if record.exists():
                    continue
                at, outcome = _start(pool, spec)
                record.write_text(json.dumps({"at": at, "outcome": outcome}))
                started.append(spec.name)
    return started


def claim_worker(pool: Any, run: RunRecords, spec: EarlyWorker) -> Started:
    """The run's early start of ``spec`` if nobody claimed it yet, else a start now. The caller stops the worker
    (``pool.stop_isolated_worker``) when it is done with it."""
    record = _record(run, spec)
    with locked(record):
        claimed = record.with_suffix(".claimed")
        if record.exists() and not claimed.exists():
            claimed.write_text("claimed")
            early = json.loads(record.read_text())
            return Started(spec.name, float(early["at"]), str(early["outcome"]), early=True)
    at, outcome = _start(pool, spec)
    return Started(spec.name, at, outcome, early=False)


def release_unclaimed(pool: Any, run: RunRecords, specs: Iterable[EarlyWorker]) -> list[str]:
    """Stop the early-started workers no check claimed (session end: the check was not reached); their names."""
    released: list[str] = []
    for spec in specs:
        record = _record(run, spec)
        with locked(record):
            claimed = record.with_suffix(".claimed")
            if record.exists() and not claimed.exists():
                claimed.write_text("released")
                pool.stop_isolated_worker(spec.name)
                released.append(spec.name)
    return released


def _holders(run: RunRecords) -> Path:
    return record_path(run, "throwaway-holders")


def join(run: RunRecords) -> None:
    """This process may claim the run's throwaway workers until it calls :func:`leave`."""
    record = _holders(run)
    with locked(record):
        count = int(record.read_text()) if record.exists() else 0
        record.write_text(str(count + 1))


def leave(run: RunRecords) -> bool:
    """This process is done with the run's throwaway workers; whether it was the last to hold them (then nobody of
    the run can claim one any more: the caller releases what is unclaimed). Seen without it: a process that ended
    released the worker its sibling's next check was about to claim, and that check waited its whole window."""
    record = _holders(run)
    with locked(record):
        count = max(0, (int(record.read_text()) if record.exists() else 1) - 1)
        record.write_text(str(count))
        return count == 0
