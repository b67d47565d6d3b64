"""Jobs a check needs long before it runs: submitted once per run right after the pre-flight, handed over.

A check that waits a fixed span on Slurm (T7's time limit: Slurm acts in whole minutes) costs the run that span
wherever it sits. Submitted when the session starts, its job runs beside every other check, and the check, ordered
last (:func:`pytest_slurmflox.harness.concurrency.order_long_waits`), only collects what Slurm did; no worker sits idle
waiting for it. One submission per run even under pytest-xdist: a run's processes share its id and take turns on a
lock file; the first submits and records the job id, and the check, in whichever process runs it, claims the
record once. A check that finds no record (the pre-flight failed, or the run selected it some other way) submits
its own job: the hand-off changes when the job starts, never what the check asks of Slurm or how it judges it.

A check declares its job with ``@pytest.mark.long_wait(early=EarlyJob(...))``. A check that only waits on Slurm
(an array, a dependency chain) declares its jobs with ``@pytest.mark.early(EarlyJob(...), ...)``: they are
submitted together with every other early job right after the pre-flight and the check, ordered last, judges what
Slurm did, so its wait overlaps the other checks instead of holding a process. A job's script and options may name
``{nonce}`` (a random per-run mark its lines carry, :attr:`Claimed.nonce`), ``{outdir}`` (the run's output directory
as the login node spells it) and ``{job:<label>}`` (the id of an earlier job of the same check: ``afterok``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.submit import Jobs
from ..model.runrecord import RunRecords, locked, record_path
from ..reporting.signoff import SINCE, UNTIL

__all__ = ["EARLY", "SINCE", "UNTIL", "Claimed", "EarlyJob", "claim", "early_jobs", "submit_early"]

#: The marker of a check whose jobs are all early jobs (positional :class:`EarlyJob` arguments, in submission order).
EARLY = "early"


@dataclass(frozen=True)
class EarlyJob:
    """What to submit: the label its record is kept under, the script and sbatch options, and the name its job is
    named after (``sfx-<run id>-<name>``: the label unless jobs must share a name, as ``--dependency=singleton``'s
    do)."""

    label: str
    script: str
    options: tuple[str, ...] = ()
    name: str = ""

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


def submit_early(specs: Iterable[EarlyJob], run: RunRecords, jobs: Jobs) -> dict[str, str]:
    """Submit each job this run has not submitted yet, all in one command on the login node (``Jobs.sbatch_chain``:
    one round trip, not two per job, while every process of the run waits on this lock); returns label -> job id
    of those submitted here.

    A submission that fails is not recorded and not raised: it would otherwise fail the setup of every check of the
    run (this runs in an autouse fixture). The check then submits its own job and reports the failure itself. A job
    naming ``{job:<label>}`` of one that is neither submitted nor recorded is left to its check the same way."""
    with locked(record_path(run, "early-submission")):  # one process submits; the others find its records
        recorded: dict[str, str] = {}  # another process's jobs: what later jobs of this run may depend on
        todo: list[EarlyJob] = []
        for spec in specs:
            record = record_path(run, spec.label)
            if record.exists():
                recorded[spec.label] = json.loads(record.read_text())["job"]
            else:
                todo.append(spec)
        if not todo:
            return {}
        submitted_at = time.time()
        try:
            outdir = jobs.made_outdir()
            chain = _chain(todo, outdir, recorded)
            names = {spec.label: spec.name or spec.label for spec in todo}
            ids = jobs.sbatch_chain([(names[label], script, options) for label, _, script, options in chain])
        except Exception:  # the checks that own the jobs submit again and say why
            return {}
        submitted: dict[str, str] = {}
        for (label, nonce, _, _), job in zip(chain, ids, strict=True):
            if job is None:
                continue
            record = record_path(run, label)
            with locked(record):
                record.write_text(json.dumps({"job": job, "submitted": submitted_at, "nonce": nonce}))
            submitted[label] = job
        return submitted


def _chain(
    specs: Iterable[EarlyJob], outdir: str, recorded: Mapping[str, str]
) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(label, nonce, script, options) of each job to send: ``{job:<label>}`` is a recorded id, or ``{prior:<i>}``
    of a job earlier in this chain; a job naming one that is neither is left to its check."""
    chain: list[tuple[str, str, str, tuple[str, ...]]] = []
    for spec in specs:
        nonce = _nonce()
        in_chain = {f"job:{label}": f"{{prior:{i}}}" for i, (label, *_) in enumerate(chain)}
        values = {"nonce": nonce, "outdir": outdir, **{f"job:{k}": v for k, v in recorded.items()}, **in_chain}
        script, options = spec.rendered(values)
        if "{job:" in " ".join(options) or "{job:" in script or "{prior:" in script:
            continue  # its parent was not submitted early: the check submits the chain itself
        chain.append((spec.label, nonce, script, options))
    return chain


def _nonce() -> str:
    return "sfx" + secrets.token_hex(6)


def claim(
    spec: EarlyJob, jobs: Jobs, run: RunRecords, ids: Mapping[str, str] | None = None, *, fresh: bool = False
) -> Claimed:
    """The job for ``spec``: this start of the run's early one (``run``) if nobody claimed it yet, else one
    submitted now (``ids``: the job
    ids this check already holds, for ``{job:<label>}``; ``fresh``: submit now whatever is recorded, for a child
    whose parent was submitted now, so it never depends on another parent). Either way the job becomes ``jobs``' own
    (cancelled by its cleanup). :attr:`Claimed.since` is when the early job was submitted: the check's span starts
    there (report timeline, benchmark), so the hand-off never makes a check look shorter than its wait on Slurm
    was. An early job Slurm no longer knows at all (purged ``MinJobAge`` after it ended, on a cluster whose
    accounting does not answer: :meth:`Jobs.known`) is not claimed: the check submits its own and watches it from
    submission, so a job is never judged as forgotten."""
    record = record_path(run, spec.label)
    with locked(record):
        claimed = record.with_suffix(".claimed")
        early = json.loads(record.read_text()) if record.exists() and not fresh else None
        if early and not claimed.exists() and jobs.known(early["job"]):
            claimed.write_text(early["job"])
            jobs.submitted.append(early["job"])
            return Claimed(early["job"], float(early["submitted"]), early.get("nonce", ""))
    nonce = _nonce()
    script, options = spec.rendered(_values(spec, jobs, nonce, ids or {}))
    return Claimed(jobs.sbatch(script, *options), None, nonce)
