"""The early-job hand-off (#16): one submission per run across its processes, claimed once, else submitted by the
check itself. Slurm is not what is under test here (the acceptance runs exercise it); the submitter records ids."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from pytest_slurmflox.early import EarlyJob, claim, forget, submit_early

JOB = EarlyJob("T7-timelimit", "#!/bin/bash\nsleep 600\n", ("--time=1",))


@dataclass
class Submitter:
    """Stands in for :class:`pytest_slurmflox.submit.Jobs` where the hand-off only needs sbatch's id."""

    run_id: str
    calls: list[tuple[str, tuple[str, ...]]]
    submitted: list[str] = field(default_factory=list)

    def sbatch(self, script: str, *options: str) -> str:
        self.calls.append((script, options))
        return str(1000 + len(self.calls))


def test_one_submission_per_run_claimed_once_then_the_check_submits_its_own():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    calls: list = []
    try:
        began = time.time()
        first = submit_early([JOB], run_id, lambda label: Submitter(run_id, calls))
        again = submit_early([JOB], run_id, lambda label: Submitter(run_id, calls))  # another xdist worker
        assert first == {"T7-timelimit": "1001"} and again == {} and len(calls) == 1
        jobs = Submitter(run_id, calls)
        job, since = claim(JOB, jobs)
        assert job == "1001" and jobs.submitted == ["1001"]
        assert since is not None and began <= since <= time.time()  # the span starts at the early submission
        rerun = Submitter(run_id, calls)
        assert claim(JOB, rerun) == ("1002", None)  # claimed already: a job of its own, same script and options
        assert calls[-1] == (JOB.script, JOB.options)
    finally:
        forget(run_id)


def test_without_an_early_submission_the_check_submits_at_once():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    calls: list = []
    try:
        assert claim(JOB, Submitter(run_id, calls)) == ("1001", None)
    finally:
        forget(run_id)


@dataclass
class Refusing(Submitter):
    """sbatch refused (a partition that cannot take the job): what the cluster says, not faked success."""

    def sbatch(self, script: str, *options: str) -> str:
        self.calls.append((script, options))
        raise RuntimeError("sbatch: error: invalid partition specified")


def test_a_refused_early_submission_is_left_to_the_check_not_to_every_checks_setup():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    calls: list = []
    try:
        assert submit_early([JOB], run_id, lambda label: Refusing(run_id, calls)) == {}
        assert claim(JOB, Submitter(run_id, calls)) == ("1002", None)  # the check submits (and judges) its own
    finally:
        forget(run_id)
