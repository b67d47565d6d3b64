"""The early-job hand-off (#16): one submission per run across its processes, claimed once, else submitted by the
check itself. Slurm is not what is under test here (the acceptance runs exercise it); the submitter records ids."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

from pytest_slurmflox.harness.early import EarlyJob, claim, submit_early
from pytest_slurmflox.model.runrecord import RunRecords, forget, new_start

JOB = EarlyJob("T7-timelimit", "#!/bin/bash\nsleep 600\n", ("--time=1",))


@dataclass
class Submitter:
    """Stands in for :class:`pytest_slurmflox.cluster.submit.Jobs` where the hand-off only needs sbatch's id."""

    run_id: str
    calls: list[tuple[str, tuple[str, ...]]]
    submitted: list[str] = field(default_factory=list)
    forgotten: frozenset[str] = frozenset()  #: ids neither slurmctld nor accounting knows any more

    def known(self, job_id: str) -> bool:
        return job_id not in self.forgotten

    def sbatch(self, script: str, *options: str) -> str:
        self.calls.append((script, options))
        return str(1000 + len(self.calls))

    def made_outdir(self) -> str:
        return f"/home/u/slurmflox-runs/{self.run_id}"

    def sbatch_chain(self, entries) -> list[str | None]:
        """What ``Jobs.sbatch_chain`` does (tests/unit/test_sbatchchain.py runs its command), one :meth:`sbatch`
        per entry: ``{prior:i}`` is entry i's id; an entry after a refused prior is not sent."""
        ids: list[str | None] = []
        for _, script, options in entries:
            priors = [int(n) for n in re.findall(r"\{prior:(\d+)\}", " ".join(options))]
            if any(ids[n] is None for n in priors):
                ids.append(None)
                continue
            filled = tuple(re.sub(r"\{prior:(\d+)\}", lambda m: str(ids[int(m.group(1))]), o) for o in options)
            try:
                ids.append(self.sbatch(script, *filled))
            except RuntimeError:
                ids.append(None)
        return ids


def test_one_submission_per_run_claimed_once_then_the_check_submits_its_own():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        began = time.time()
        first = submit_early([JOB], records, Submitter(run_id, calls))
        again = submit_early([JOB], records, Submitter(run_id, calls))  # another xdist worker
        assert first == {"T7-timelimit": "1001"} and again == {} and len(calls) == 1
        jobs = Submitter(run_id, calls)
        claimed = claim(JOB, jobs, records)
        assert claimed.job == "1001" and jobs.submitted == ["1001"]
        since = claimed.since
        assert since is not None and began <= since <= time.time()  # the span starts at the early submission
        rerun = claim(JOB, Submitter(run_id, calls), records)
        assert (rerun.job, rerun.since) == ("1002", None)  # claimed already: a job of its own, same script, options
        assert calls[-1] == (JOB.script, JOB.options)
    finally:
        forget(records)


def test_an_early_job_slurm_forgot_is_not_claimed_the_check_submits_and_watches_its_own():
    """slurmctld purged the early job MinJobAge after it ended, and accounting does not answer: the check never
    judges it as unknown, it submits the same script and options now."""
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        assert submit_early([JOB], records, Submitter(run_id, calls)) == {"T7-timelimit": "1001"}
        jobs = Submitter(run_id, calls, forgotten=frozenset({"1001"}))
        claimed = claim(JOB, jobs, records)
        assert (claimed.job, claimed.since) == ("1002", None) and calls[-1] == (JOB.script, JOB.options)
    finally:
        forget(records)


def test_without_an_early_submission_the_check_submits_at_once():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        claimed = claim(JOB, Submitter(run_id, calls), records)
        assert (claimed.job, claimed.since) == ("1001", None)
    finally:
        forget(records)


@dataclass
class Refusing(Submitter):
    """sbatch refused (a partition that cannot take the job): what the cluster says, not faked success."""

    def sbatch(self, script: str, *options: str) -> str:
        self.calls.append((script, options))
        raise RuntimeError("sbatch: error: invalid partition specified")


def test_a_refused_early_submission_is_left_to_the_check_not_to_every_checks_setup():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        assert submit_early([JOB], records, Refusing(run_id, calls)) == {}
        claimed = claim(JOB, Submitter(run_id, calls), records)
        assert (claimed.job, claimed.since) == ("1002", None)  # the check submits (and judges) its own
    finally:
        forget(records)


#: A check's chain (#29): a marked script, and a child naming its parent's id.
PARENT = EarlyJob("T7-parent", "#!/bin/bash\nprintf '%s|x\\n' {nonce}\n", ("--output={outdir}/%j.out",))
CHILD = EarlyJob("T7-child", "#!/bin/bash\necho ran\n", ("--dependency=afterok:{job:T7-parent}",))


#: A submitter whose login node answers the output directory (``{outdir}``).
WithOutdir = Submitter


def test_a_chain_is_submitted_in_order_with_its_parents_id_and_a_per_run_mark():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        first = submit_early([PARENT, CHILD], records, WithOutdir(run_id, calls))
        assert first == {"T7-parent": "1001", "T7-child": "1002"}
        (script, options), (_, child_options) = calls
        assert options == (f"--output=/home/u/slurmflox-runs/{run_id}/%j.out",)
        assert child_options == ("--dependency=afterok:1001",)
        jobs = WithOutdir(run_id, calls)
        parent, child = claim(PARENT, jobs, records), claim(CHILD, jobs, records, {"T7-parent": "1001"})
        assert (parent.job, child.job) == ("1001", "1002") and jobs.submitted == ["1001", "1002"]
        assert parent.nonce.startswith("sfx") and script == f"#!/bin/bash\nprintf '%s|x\\n' {parent.nonce}\n"
        again = claim(PARENT, jobs, records)  # claimed already: the check's own, with a mark of its own
        assert again.job == "1003" and again.nonce not in (parent.nonce, "") and again.nonce in calls[-1][0]
    finally:
        forget(records)


@dataclass
class RefusingWithOutdir(WithOutdir):
    def sbatch(self, script: str, *options: str) -> str:
        self.calls.append((script, options))
        raise RuntimeError("sbatch: error: invalid partition specified")


def test_a_child_whose_parent_was_refused_early_is_left_to_its_check_with_the_checks_own_parent():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        assert submit_early([PARENT, CHILD], records, RefusingWithOutdir(run_id, calls)) == {}
        assert len(calls) == 1  # the child was never sent with an unfilled {job:...}
        jobs = WithOutdir(run_id, calls)
        parent = claim(PARENT, jobs, records)
        child = claim(CHILD, jobs, records, {"T7-parent": parent.job})
        assert (parent.since, child.since) == (None, None)
        assert calls[-1] == (CHILD.script, (f"--dependency=afterok:{parent.job}",))
    finally:
        forget(records)


def test_a_child_after_a_parent_submitted_now_is_submitted_now_too():
    """A check whose parent's early job was claimed already (a rerun) submits its own parent; ``fresh`` makes the
    child its own too, depending on that parent, not the early child waiting on another parent."""
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    calls: list = []
    try:
        submit_early([PARENT, CHILD], records, WithOutdir(run_id, calls))
        claim(PARENT, WithOutdir(run_id, calls), records)  # someone else took the early parent
        jobs = WithOutdir(run_id, calls)
        parent = claim(PARENT, jobs, records)
        child = claim(CHILD, jobs, records, {"T7-parent": parent.job}, fresh=parent.since is None)
        assert parent.job == "1003" and child.job == "1004" and child.since is None
        assert calls[-1] == (CHILD.script, ("--dependency=afterok:1003",))
    finally:
        forget(records)


@dataclass
class Naming(Submitter):
    """Records the name each chain entry is submitted under (its suffix: ``sfx-<run id>-early-<suffix>``)."""

    names: list[str] = field(default_factory=list)

    def sbatch_chain(self, entries) -> list[str | None]:
        self.names.extend(suffix for suffix, _, _ in entries)
        return super().sbatch_chain(entries)


def test_jobs_that_share_a_name_go_under_it_the_others_under_their_label():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    records = RunRecords(run_id, new_start())
    first = EarlyJob("T7-singleton-first", "#!/bin/bash\nsleep 3\n", ("--dependency=singleton",), name="T7-singleton")
    second = EarlyJob("T7-singleton-second", "#!/bin/bash\nsleep 1\n", ("--dependency=singleton",), name="T7-singleton")
    try:
        submitter = Naming(run_id, [])
        ids = submit_early([first, second, JOB], records, submitter)
        assert submitter.names == ["T7-singleton", "T7-singleton", "T7-timelimit"]
        assert ids == {"T7-singleton-first": "1001", "T7-singleton-second": "1002", "T7-timelimit": "1003"}
    finally:
        forget(records)
