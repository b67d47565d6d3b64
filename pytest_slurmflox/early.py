"""Jobs a check needs long before it runs (#16): submitted once per run right after the pre-flight, handed over.

A check that waits a fixed span on Slurm (T7's time limit: Slurm acts in whole minutes) costs the run that span
wherever it sits. Submitted when the session starts, its job runs beside every other check, and the check, ordered
last (:func:`pytest_slurmflox.concurrency.order_long_waits`), only collects what Slurm did; no worker sits idle
waiting for it. One submission per run even under pytest-xdist: a run's processes share its id and take turns on a
lock file; the first submits and records the job id, and the check, in whichever process runs it, claims the
record once. A check that finds no record (the pre-flight failed, or the run selected it some other way) submits
its own job: the hand-off changes when the job starts, never what the check asks of Slurm or how it judges it.

A check declares its job with ``@pytest.mark.long_wait(early=EarlyJob(...))``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .signoff import SINCE, UNTIL
from .submit import Jobs

__all__ = ["SINCE", "UNTIL", "EarlyJob", "claim", "early_jobs", "forget", "submit_early"]


@dataclass(frozen=True)
class EarlyJob:
    """What to submit: the label its job is named after (``sfx-<run id>-<label>``), the script and sbatch options."""

    label: str
    script: str
    options: tuple[str, ...] = ()


def early_jobs(items: Iterable[Any], marker: str = "long_wait") -> list[EarlyJob]:
    """The early jobs of the selected checks, once each."""
    found: dict[str, EarlyJob] = {}
    for item in items:
        mark = item.get_closest_marker(marker)
        spec = mark.kwargs.get("early") if mark is not None else None
        if isinstance(spec, EarlyJob):
            found.setdefault(spec.label, spec)
    return list(found.values())


def _record(run_id: str, label: str) -> Path:
    """Where a run's processes (all on this host: xdist popen workers) record the job they submitted."""
    return Path(tempfile.gettempdir()) / f"slurmflox-early-{run_id}" / f"{label}.job"


@contextlib.contextmanager
def _locked(record: Path) -> Iterator[None]:
    record.parent.mkdir(parents=True, exist_ok=True)
    with record.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def submit_early(specs: Iterable[EarlyJob], run_id: str, jobs_for: Callable[[str], Jobs]) -> dict[str, str]:
    """Submit each job this run has not submitted yet; returns label -> job id of those submitted here.

    A submission that fails is not recorded and not raised: it would otherwise fail the setup of every check of the
    run (this runs in an autouse fixture). The check then submits its own job and reports the failure itself."""
    submitted: dict[str, str] = {}
    for spec in specs:
        record = _record(run_id, spec.label)
        with _locked(record):
            if record.exists():
                continue
            submitted_at = time.time()
            try:
                job = jobs_for(spec.label).sbatch(spec.script, *spec.options)
            except Exception:  # the check that owns the job submits again and says why
                continue
            record.write_text(json.dumps({"job": job, "submitted": submitted_at}))
            submitted[spec.label] = job
    return submitted


def claim(spec: EarlyJob, jobs: Jobs) -> tuple[str, float | None]:
    """The job for ``spec``: the run's early one if nobody claimed it yet, else one submitted now. Either way the
    job becomes ``jobs``' own (cancelled by its cleanup). Returns (job id, when the early job was submitted (epoch
    seconds), None when it was submitted now): the check's span starts there (report timeline, benchmark), so the
    hand-off never makes the longest check look shorter than its wait on Slurm was."""
    record = _record(jobs.run_id, spec.label)
    with _locked(record):
        claimed = record.with_suffix(".claimed")
        early = json.loads(record.read_text()) if record.exists() else None
        if early and not claimed.exists():
            claimed.write_text(early["job"])
            jobs.submitted.append(early["job"])
            return early["job"], float(early["submitted"])
    return jobs.sbatch(spec.script, *spec.options), None


def forget(run_id: str) -> None:
    """Remove the run's records (session end of the process that owns the run: serial, or the xdist controller)."""
    folder = _record(run_id, "x").parent
    for path in folder.glob("*"):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()
