"""T7: arrays, dependencies, hold/release, scancel and time limits behave as Slurm defines them.

Requirement: the scheduling features users rely on are unchanged on the Kubernetes-owned workers. The time-limit
job is an early job (Slurm enforces limits in whole minutes, checked periodically): submitted once per run right
after the pre-flight (pytest_slurmflox/harness/early.py), it runs beside every other check, and the check, ordered last,
collects what Slurm did with it. So are the array's, the afterok and afternotok chains' and the two singleton jobs:
those checks only wait on Slurm, so their jobs run beside the other checks and the checks judge what Slurm
did, the same jobs and the same judgement as when a check submits its own (no early record: the pre-flight failed,
or the job was claimed).

Where the expectations come from: Slurm's documented semantics of each feature (array indices, dependency order,
held/released states, cancellation, TIMEOUT), applied to jobs this module submits; nothing is read from a worker.
When a timed-out job may end is Slurm's rule (pytest_slurmflox/judges/timelimit.py) applied to the OverTimeLimit the
cluster configures (``scontrol show config`` and ``scontrol -o show partition`` at the login endpoint).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.run import Result, quoted
from pytest_slurmflox.base.waits import job_timeout, limit_timeout, poll_last, queue_timeout
from pytest_slurmflox.cluster.slurm import TERMINAL_STATES, parse_kv_line
from pytest_slurmflox.cluster.submit import Jobs
from pytest_slurmflox.harness.early import SINCE, UNTIL, Claimed, EarlyJob, claim
from pytest_slurmflox.judges.authkeys import parse_show_config
from pytest_slurmflox.judges.timelimit import Enforcement, enforcement
from pytest_slurmflox.reporting.sessionstate import session_state
from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

from ._capability import requirement
from ._marks import Mark

pytestmark = [pytest.mark.acceptance, pytest.mark.T7]

SLEEP = "#!/bin/bash\nsleep {s}\n"

#: The job's limit in minutes (what Slurm may add before it acts: :func:`pytest_slurmflox.base.waits.limit_timeout`).
LIMIT_MINUTES = 1
#: How long the time-limited job would run (minutes): an overtime that lets it finish first cannot be judged.
JOB_MINUTES = 10
#: Asks for 1 minute, would run 10: Slurm must end it with TIMEOUT.
TIME_LIMITED = EarlyJob("T7-timelimit", SLEEP.format(s=JOB_MINUTES * 60), (f"--time={LIMIT_MINUTES}",))


@pytest.fixture
def time_limited_job(request, target, slurmflox_state):
    """A job asking for 1 minute that would run 10: Slurm must end it with TIMEOUT. (Its name carries a nonce
    (submit.Jobs.name), so cleanup by name never ends another check's or another xdist worker's job.)"""
    jobs = Jobs.of(target, slurmflox_state.run_id, "T7-timelimit")
    [claimed] = _claimed(request, jobs, TIME_LIMITED)
    job = claimed.job
    yield jobs, job
    jobs.cleanup()


def _claimed(request, jobs: Jobs, *specs: EarlyJob) -> list[Claimed]:
    """Claim the check's early jobs in order (each given the ids of those before it, ``{job:<label>}``); every job
    is ``jobs``' own (cancelled by its cleanup). The check's span starts at the earliest early submission (report
    timeline, benchmark), so the hand-off never makes a check look shorter than its wait on Slurm was."""
    run = session_state(request.config).records  # this start of the run's early jobs only
    ids: dict[str, str] = {}
    claims: list[Claimed] = []
    for spec in specs:
        # once one job was submitted now (its early one claimed or never submitted), the rest are too: a child
        # must depend on the parent this check holds
        claims.append(claim(spec, jobs, run, ids, fresh=any(c.since is None for c in claims)))
        ids[spec.label] = claims[-1].job
    since = [c.since for c in claims if c.since is not None]
    if since:
        request.node.user_properties.append((SINCE, min(since)))
    return claims


def _ended(request, submit: Jobs, *jobs: str) -> None:
    """The check's span ends when Slurm ended the last of its jobs, not when the check, ordered last, collected
    them: the span measures Slurm's work, not the check's place in the run."""
    ended = submit.slurm.last_end(jobs)
    if ended:
        request.node.user_properties.append((UNTIL, ended))


#: Four one-CPU tasks, each printing its own task id as a marked line (``{nonce}``) into its own output file.
ARRAY = EarlyJob(
    "T7-array",
    f"#!/bin/bash\n{Mark('{nonce}').echo('task=$SLURM_ARRAY_TASK_ID')}\n",
    ("--array=0-3", "--output={outdir}/%A_%a.out"),
)


@pytest.mark.early(ARRAY)
def test_job_array_runs_every_task(request, submit):
    [claimed] = _claimed(request, submit, ARRAY)
    job, mark, outdir = claimed.job, Mark(claimed.nonce), submit.made_outdir()
    # four one-CPU tasks start together on the cohort (the pre-flight found it idle): one pass
    tasks = submit.slurm.wait([f"{job}_{i}" for i in range(4)], timeout=job_timeout())
    _ended(request, submit, *tasks)
    requirement(
        len(tasks) == 4 and all(t.state == "COMPLETED" for t in tasks.values()),
        "all four array tasks COMPLETED",
        str(tasks),
    )
    res = submit.login.run("cat", *(f"{outdir}/{job}_{i}.out" for i in range(4)))
    requirement(
        res.ok and mark.lines(res.stdout) == [f"task={i}" for i in range(4)],
        "each array task ran with its own SLURM_ARRAY_TASK_ID",
        res,
    )


#: Two parents (one succeeds, one fails) and an afterok child of each, submitted in this order.
AFTEROK = (
    EarlyJob("T7-afterok-good", "#!/bin/bash\nexit 0\n"),
    EarlyJob("T7-afterok-bad", "#!/bin/bash\nexit 3\n"),
    EarlyJob("T7-afterok-ag", "#!/bin/bash\necho ran\n", ("--dependency=afterok:{job:T7-afterok-good}",)),
    EarlyJob("T7-afterok-ab", "#!/bin/bash\necho ran\n", ("--dependency=afterok:{job:T7-afterok-bad}",)),
)


@pytest.mark.early(*AFTEROK)
def test_afterok_runs_after_success_and_never_after_failure(request, submit):
    good, bad, after_good, after_bad = (c.job for c in _claimed(request, submit, *AFTEROK))
    states = submit.wait(good, bad, after_good, timeout=job_timeout(stages=2))  # parent, then child
    # the span ends with the last job Slurm ran (when it marked the impossible child, Slurm does not record)
    _ended(request, submit, good, bad, after_good)
    requirement(
        states[good].state == "COMPLETED" and states[bad].state == "FAILED", "parents ended as scripted", str(states)
    )
    requirement(states[after_good].state == "COMPLETED", "afterok child ran after its parent succeeded", str(states))
    never = _wait_never_satisfied(submit, after_bad)
    requirement(
        never is not None
        and never.state in ("PENDING", "CANCELLED")
        and (never.state == "CANCELLED" or "DependencyNeverSatisfied" in never.reason),
        "afterok child of a failed parent never runs",
        str(never),
    )


def _wait_never_satisfied(submit, job: str, timeout: float = 60.0):
    """Slurm marks an impossible dependency on its next dependency pass; poll for that verdict (or a kill)."""
    return poll_last(
        lambda: submit.slurm.jobs([job]).get(job),
        lambda state: state is None or state.state != "PENDING" or "NeverSatisfied" in state.reason,
        what=f"job {job} marked DependencyNeverSatisfied",
        timeout=timeout,
        interval=0.5,
    )


#: A parent that fails and its afternotok child, submitted in this order.
AFTERNOTOK = (
    EarlyJob("T7-afternotok-bad", "#!/bin/bash\nexit 1\n"),
    EarlyJob("T7-afternotok-child", "#!/bin/bash\necho ran\n", ("--dependency=afternotok:{job:T7-afternotok-bad}",)),
)


@pytest.mark.early(*AFTERNOTOK)
def test_afternotok_runs_only_after_failure(request, submit):
    bad, child = (c.job for c in _claimed(request, submit, *AFTERNOTOK))
    states = submit.wait(bad, child, timeout=job_timeout(stages=2))  # parent, then child
    _ended(request, submit, bad, child)
    requirement(
        states[bad].state == "FAILED" and states[child].state == "COMPLETED",
        "afternotok child ran because its parent failed",
        str(states),
    )


#: Two jobs of one name (``EarlyJob.name``), each ``--dependency=singleton``, the first the longer: submitted in this
#: order, the second may start only once the first ended. (A check that submits them itself names both after
#: itself.)
SINGLETON = (
    EarlyJob("T7-singleton-first", SLEEP.format(s=3), ("--dependency=singleton",), name="T7-singleton"),
    EarlyJob("T7-singleton-second", SLEEP.format(s=1), ("--dependency=singleton",), name="T7-singleton"),
)


@pytest.mark.early(*SINGLETON)
def test_singleton_serializes_jobs_of_one_name(request, submit):
    first, second = (c.job for c in _claimed(request, submit, *SINGLETON))
    submit.wait(first, second, timeout=job_timeout(3 + 1, stages=2))  # one after the other
    _ended(request, submit, first, second)
    a, b = submit.slurm.job_info(first), submit.slurm.job_info(second)
    requirement(
        b["StartTime"] >= a["EndTime"],
        "the second singleton job started after the first ended",
        f"first {a['StartTime']}..{a['EndTime']}, second {b['StartTime']}..{b['EndTime']}",
    )


def test_hold_and_release(submit):
    job = submit.sbatch("#!/bin/bash\necho released\n", "--hold")
    held = submit.slurm.jobs([job])[job]
    requirement(held.state == "PENDING" and "JobHeld" in held.reason, "a held job stays pending", str(held))
    submit.login.run("scontrol release", job).check()
    state = submit.wait(job)[job]
    requirement(state.state == "COMPLETED" and "released" in submit.output(job), "a released job runs", str(state))


#: The job to cancel tells Slurm its script runs (its own job's comment) before it sleeps: Slurm shows RUNNING when
#: it allocated the job, before the script started, and a cancel in that window (measured on the local substrate:
#: within 0.1 s of RUNNING, six times in six) reaches no task; Slurm then ends the job by SIGKILL after KillWait
#: (4.8 s instead of 1.7 s), holding its CPU from other checks meanwhile. A worker without scontrol (or a site that
#: refuses the update) never says so: the check then cancels after SCRIPT_STARTS_S, as it did before.
CANCELLABLE = '#!/bin/bash\nscontrol update jobid="$SLURM_JOB_ID" comment={nonce}-runs >/dev/null 2>&1\nsleep 300\n'
SCRIPT_STARTS_S = 15


def _script_runs(submit: Jobs, job: str, nonce: str) -> Result:
    """Wait (one command on the login node, squeue at 20 Hz) until the job's comment says its script runs: exit 0;
    3 when it ran that long without saying so; 4 when it left RUNNING uncancelled (its state printed)."""
    line = quoted(
        "end=$((SECONDS + %s)); while :; do s=$(squeue -h -j %s -o '%%T|%%k'); case $s in"
        ' %s) exit 0;; RUNNING*) ;; *) echo "$s"; exit 4;; esac; [ $SECONDS -lt $end ] || exit 3; sleep 0.05; done',
        SCRIPT_STARTS_S,
        job,
        f"RUNNING|{nonce}-runs",
    )
    return submit.login.run(line, timeout=SCRIPT_STARTS_S + 30)


def test_scancel_ends_a_running_job(submit):
    mark = Mark.new()
    job = submit.sbatch(CANCELLABLE.format(nonce=mark.nonce))
    # a job that ends before it was seen running fails here at once, not after the wait's timeout; queueing behind
    # other checks' jobs (T8's whole-worker requests hold every worker) is not scancel's business: seen on a 2-worker
    # Slurm 22.05 cluster, the job pended over one scheduler pass "reserved for jobs in higher priority partitions"
    started = submit.slurm.wait([job], until=frozenset({"RUNNING"}) | TERMINAL_STATES, timeout=queue_timeout())[job]
    requirement(started.state == "RUNNING", "the job to cancel runs (control)", str(started))
    runs = _script_runs(submit, job, mark.nonce)
    requirement(runs.exit_status in (0, 3), "the job to cancel runs until it is cancelled (control)", runs)
    submit.slurm.cancel(job).check()
    state = submit.wait(job, timeout=job_timeout())[job]  # KillWait is within a pass
    requirement(state.state == "CANCELLED", "scancel ends a running job as CANCELLED", str(state))


def _enforcement(jobs: Jobs) -> Enforcement:
    """How this cluster enforces a time limit, read where it states it (both commands are the check's evidence)."""
    config = parse_show_config(jobs.login.run("scontrol show config").check().stdout)
    return enforcement(config, jobs.slurm.partition_state(jobs.partition).raw)


def _elapsed(jobs: Jobs, job: str) -> tuple[float, float]:
    """(StartTime, EndTime) as slurmctld recorded them, epoch seconds."""
    res = jobs.login.run("scontrol -o show job", job, env={"SLURM_TIME_FORMAT": "%s"}).check()
    info = parse_kv_line(res.stdout.splitlines()[0])
    return float(info["StartTime"]), float(info["EndTime"])


@pytest.mark.long_wait(early=TIME_LIMITED)
def test_time_limit_is_enforced(request, time_limited_job):
    """Slurm ends the job with TIMEOUT, and when its rule says (pytest_slurmflox/judges/timelimit.py): after the limit
    plus the OverTimeLimit the cluster configures, within one enforcement period (and a loaded controller's lag)."""
    jobs, job = time_limited_job
    rule = _enforcement(jobs)
    if rule.over_time is None or LIMIT_MINUTES + rule.over_time >= JOB_MINUTES:
        pytest.skip(
            f"{NOT_RUN_PREFIX}this cluster ends a job past its limit only after {rule.shown}: longer than "
            f"the check's {JOB_MINUTES}-minute job runs"
        )
    # Queueing is not the limit's business: in a concurrent run the job may wait behind other checks' jobs first.
    jobs.wait(job, timeout=queue_timeout(), until=frozenset({"RUNNING"}) | TERMINAL_STATES)
    state = jobs.wait(
        job,
        timeout=limit_timeout(LIMIT_MINUTES + rule.over_time),
        what=f"job {job} to outlive its {LIMIT_MINUTES}-minute time limit and end TIMEOUT",
    )[job]
    ended = jobs.slurm.end_time(job)  # the span ends when Slurm ended the job, not when this check, last, looked
    if ended:
        request.node.user_properties.append((UNTIL, ended))
    requirement(state.state == "TIMEOUT", "a job past its time limit ends with TIMEOUT", str(state))
    problem = rule.problem(LIMIT_MINUTES, *_elapsed(jobs, job))
    requirement(
        problem is None,
        f"Slurm ends a job at its {LIMIT_MINUTES}-minute limit plus the configured overtime, within one "
        f"enforcement period ({rule.shown})",
        problem or "",
    )
