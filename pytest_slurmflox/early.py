"""Jobs a check needs long before it runs (#16): submitted once per run right after the pre-flight, handed over.

A check that waits a fixed span on Slurm (T7's time limit: Slurm acts in whole minutes) costs the run that span
wherever it sits. Submitted when the session starts, its job runs beside every other check, and the check, ordered
last (:func:`pytest_slurmflox.concurrency.order_long_waits`), only collects what Slurm did; no worker sits idle
waiting for it. One submission per run even under pytest-xdist: a run's processes share its id and take turns on a
lock file; the first submits and records the job id, and the check, in whichever process runs it, claims the
record once. A check that finds no record (the pre-flight failed, or the run selected it some other way) submits
its own job: the hand-off changes when the job starts, never what the check asks of Slurm or how it judges it.

A check declares its job with ``@pytest.mark.long_wait(early=EarlyJob(...))``. A check that only waits on Slurm
(#29: an array, a dependency chain) declares its jobs with ``@pytest.mark.early(EarlyJob(...), ...)``: they are
submitted together with every other early job right after the pre-flight and the check, ordered last, judges what
Slurm did, so its wait overlaps the other checks instead of holding a process. A job's script and options may name
``{nonce}`` (a random per-run mark its lines carry, :attr:`Claimed.nonce`), ``{outdir}`` (the run's output directory
as the login node spells it) and ``{job:<label>}`` (the id of an earlier job of the same check: ``afterok``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .signoff import SINCE, UNTIL
from .submit import Jobs

__all__ = ["EARLY", "SINCE", "UNTIL", "Claimed", "EarlyJob", "claim", "early_jobs", "forget", "submit_early"]

#: The marker of a check whose jobs are all early jobs (positional :class:`EarlyJob` arguments, in submission order).
EARLY = "early"


@dataclass(frozen=True)
class EarlyJob:
    """What to submit: the label its job is named after (``sfx-<run id>-<label>``), the script and sbatch options."""

    label: str
    script: str
    options: tuple[str, ...] = ()

    def rendered(self, values: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
        """The script and options with ``{name}`` replaced by ``values[name]`` (the placeholders of the module's
        docstring); a placeholder without a value stays as written and sbatch refuses or the check fails on it."""

        def fill(text: str) -> str:
            for name, value in values.items():
                text = text.replace("{" + name + "}", value)
            return text

        return fill(self.script), tuple(fill(option) for option in self.options)


@dataclass(frozen=True)
class Claimed:
    """A check's hold on one early job: its id, when it was submitted (epoch seconds, None when the check submitted
    it itself just now) and the mark its script printed with (``{nonce}``)."""

    job: str
    since: float | None
    nonce: str


def _specs(item: Any, marker: str) -> tuple[Any, ...]:
    mark = item.get_closest_marker(marker)
    if mark is None:
        return ()
    return (mark.kwargs.get("early"),) if marker != EARLY else mark.args


def early_jobs(items: Iterable[Any], markers: tuple[str, ...] = ("long_wait", EARLY)) -> list[EarlyJob]:
    """The early jobs of the selected checks, once each, in the order the checks name them."""
    found: dict[str, EarlyJob] = {}
    for item in items:
        for marker in markers:
            for spec in _specs(item, marker):
                if isinstance(spec, EarlyJob):
                    found.setdefault(spec.label, spec)
    return list(found.values())


def _values(spec: EarlyJob, jobs: Jobs, nonce: str, ids: Mapping[str, str]) -> dict[str, str]:
    """The placeholders' values; the output directory is asked of the login node only when the job names it."""
    named = "{outdir}" in spec.script + " ".join(spec.options)
    outdir = jobs.made_outdir() if named else ""
    return {"nonce": nonce, "outdir": outdir, **{f"job:{label}": job for label, job in ids.items()}}


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
    run (this runs in an autouse fixture). The check then submits its own job and reports the failure itself. A job
    naming ``{job:<label>}`` of one that is neither submitted nor recorded is left to its check the same way."""
    submitted: dict[str, str] = {}
    ids: dict[str, str] = {}  # every recorded job, ours or another process's: what later jobs depend on
    for spec in specs:
        record = _record(run_id, spec.label)
        with _locked(record):
            if record.exists():
                ids[spec.label] = json.loads(record.read_text())["job"]
                continue
            submitted_at, nonce = time.time(), _nonce()
            try:
                jobs = jobs_for(spec.label)
                script, options = spec.rendered(_values(spec, jobs, nonce, ids))
                if "{job:" in " ".join(options):
                    continue  # its parent was not submitted early: the check submits the chain itself
                job = jobs.sbatch(script, *options)
            except Exception:  # the check that owns the job submits again and says why
                continue
            record.write_text(json.dumps({"job": job, "submitted": submitted_at, "nonce": nonce}))
            submitted[spec.label] = ids[spec.label] = job
    return submitted


def _nonce() -> str:
    return "sfx" + secrets.token_hex(6)


def claim(spec: EarlyJob, jobs: Jobs, ids: Mapping[str, str] | None = None, *, fresh: bool = False) -> Claimed:
    """The job for ``spec``: the run's early one if nobody claimed it yet, else one submitted now (``ids``: the job
    ids this check already holds, for ``{job:<label>}``; ``fresh``: submit now whatever is recorded, for a child
    whose parent was submitted now, so it never depends on another parent). Either way the job becomes ``jobs``' own
    (cancelled by its cleanup). :attr:`Claimed.since` is when the early job was submitted: the check's span starts
    there (report timeline, benchmark), so the hand-off never makes a check look shorter than its wait on Slurm
    was."""
    record = _record(jobs.run_id, spec.label)
    with _locked(record):
        claimed = record.with_suffix(".claimed")
        early = json.loads(record.read_text()) if record.exists() and not fresh else None
        if early and not claimed.exists():
            claimed.write_text(early["job"])
            jobs.submitted.append(early["job"])
            return Claimed(early["job"], float(early["submitted"]), early.get("nonce", ""))
    nonce = _nonce()
    script, options = spec.rendered(_values(spec, jobs, nonce, ids or {}))
    return Claimed(jobs.sbatch(script, *options), None, nonce)


def forget(run_id: str) -> None:
    """Remove the run's records (session end of the process that owns the run: serial, or the xdist controller)."""
    folder = _record(run_id, "x").parent
    for path in folder.glob("*"):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()
