"""TA: accounting through slurmdbd: finished jobs and their steps in sacct, associations and their limits enforced.

Requirement: a finished job is in ``sacct`` with its state, exit code, node list, elapsed time, user and
account; its steps appear; a user without an association is refused at submission; an association limit is
enforced. Runs where the target file declares ``accounting`` (capabilities.py); SKIPs naming the capability where
it declares none; FAILS when it is declared but slurmdbd does not answer.

Where the expectations come from (never from the accounting records under test):

- state, exit code and steps: the job this check submits (a script that runs one step and exits 3: Slurm's
  documented FAILED with ExitCode ``3:0``);
- node list and a lower bound of elapsed time: the job's own output (the node it printed, the seconds it slept);
- user and account: the target file (``login.user``, ``accounting.account``);
- the unassociated user and the limited account with its MaxJobs: the target file's ``accounting`` section (these
  two checks SKIP naming the key when it is not declared);
- what a refusal for an association looks like: Slurm's own reason text (:data:`ASSOCIATION_REFUSAL`), never a
  non-zero exit alone (a missing user or a typo'd partition also exits non-zero).

Accounting surviving a restart of slurmdbd and of slurmctld is group TAR (test_tar_accounting_restart.py): restarting
the daemons is destructive, so it is opt-in like the lifecycle groups.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.base.waits import poll_last
from pytest_slurmflox.cluster.gates import require

from ._capability import requirement
from ._marks import Mark, marked
from ._slurm_reasons import ASSOCIATION_REFUSAL, association_refused

pytestmark = [pytest.mark.acceptance, pytest.mark.TA]

#: sacct fields each check reads (``-P``: '|' separated, no truncation)
FIELDS = "JobID,State,ExitCode,NodeList,ElapsedRaw,User,Account"


@pytest.fixture(scope="module")
def acct(target):
    require(target, "accounting")
    return target.spec.accounting


def _sacct(submit, job: str, want_steps: tuple[str, ...], timeout: float = 60.0):
    """sacct's rows of ``job`` (JobID -> fields), polled until the job and ``want_steps`` are recorded as finished
    (slurmdbd receives records asynchronously from slurmctld)."""

    def look():
        res = submit.login.run(f"sacct -n -P --format={FIELDS} -j", job, timeout=30)
        rows = {}
        for line in res.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == len(FIELDS.split(",")):
                rows[parts[0]] = dict(zip(FIELDS.split(","), parts, strict=True))
        return rows, res

    def recorded(seen) -> bool:
        rows = seen[0]
        done = job in rows and rows[job]["State"] not in ("PENDING", "RUNNING", "COMPLETING")
        return done and all(f"{job}.{s}" in rows for s in want_steps)

    what = f"job {job} and steps {want_steps} ended in sacct"
    return poll_last(look, recorded, what=what, timeout=timeout, interval=0.5)


def test_finished_job_and_its_steps_are_in_sacct(submit, target, acct, workers):
    mark = Mark.new()
    script = f"#!/bin/bash\n{mark.echo('node=$SLURMD_NODENAME')}\nsrun -n1 /bin/true\nsleep 2\nexit 3\n"
    job = submit.sbatch(script, "-N1", f"--account={acct.account}")
    state = submit.wait(job)[job]
    out = marked(submit.login.run("cat " + submit.outdir + quoted("/%s.out", job)), mark)
    ran_on = [line.split("=", 1)[1] for line in out.own if line.startswith("node=")]
    requirement(len(ran_on) == 1, f"job {job} ran and printed its node", str(state), out)
    rows, res = _sacct(submit, job, ("batch", "0"))
    row = rows.get(job)
    requirement(row is not None, f"job {job} is in sacct", res)
    user = target.spec.login.user
    requirement(row["State"] == "FAILED", f"sacct: job {job} State FAILED (its script exited 3)", res)
    requirement(row["ExitCode"] == "3:0", f"sacct: job {job} ExitCode 3:0", res)
    requirement(row["NodeList"] == ran_on[0], f"sacct: job {job} NodeList {ran_on[0]} (where it ran)", res, out)
    requirement(int(row["ElapsedRaw"] or 0) >= 2, f"sacct: job {job} elapsed >= 2 s (it slept 2 s)", res)
    requirement(row["User"] == user, f"sacct: job {job} User {user} (the target's login user)", res)
    requirement(row["Account"] == acct.account, f"sacct: job {job} Account {acct.account}", res)
    step = rows.get(f"{job}.0")
    requirement(step is not None, f"sacct: step {job}.0 (the script's srun) is recorded", res)
    requirement(step["State"] == "COMPLETED", f"sacct: step {job}.0 COMPLETED (/bin/true)", res)
    requirement(step["ExitCode"] == "0:0", f"sacct: step {job}.0 ExitCode 0:0", res)
    requirement(f"{job}.batch" in rows, f"sacct: the batch step {job}.batch is recorded", res)


def test_user_without_association_is_refused_at_submission(submit, target, acct):
    if not acct.unassociated_user:
        pytest.skip("missing capability accounting.unassociated_user: the target file names no user without one")
    require(target, "admin")
    stranger = acct.unassociated_user
    sbatch = ("sbatch", "--parsable", "-J", submit.name, *submit.placement, "-o", "/dev/null")
    res = target.admin.run("runuser -u", stranger, "--", *sbatch, "--wrap", "/bin/true", timeout=60)
    accepted = [t for t in res.stdout.split() if t.split(";")[0].isdigit()]
    if accepted:
        target.admin.run("scancel", *(t.split(";")[0] for t in accepted), timeout=30)
    requirement(
        association_refused(res) and not accepted,
        f"sbatch as {stranger} (no association) is refused at submission for its association: Slurm says "
        f"'{ASSOCIATION_REFUSAL}' (AccountingStorageEnforce=associations), not another error",
        res,
    )
    assoc = submit.login.run(quoted("sacctmgr -n -P show assoc where user=%s format=account", stranger))
    requirement(not assoc.stdout.strip(), f"{stranger} really has no association", assoc)


def test_association_limit_is_enforced(submit, acct):
    if not acct.limited_account:
        pytest.skip("missing capability accounting.limited_account: the target file names no limited association")
    limit = int(acct.limited_max_jobs or 1)
    jobs = [
        submit.sbatch("#!/bin/bash\nsleep 120\n", "-N1", "-n1", f"--account={acct.limited_account}", suffix=str(i))
        for i in range(limit + 1)
    ]

    def look():
        res = submit.login.run("squeue -h -o '%i|%T|%r' -j", ",".join(jobs))
        rows = [line.split("|") for line in res.stdout.splitlines() if line.count("|") == 2]
        running = [r for r in rows if r[1] == "RUNNING"]
        held = [r for r in rows if r[1] == "PENDING" and "AssocMaxJobsLimit" in r[2]]
        return res, running, held

    what = f"{limit} job(s) of {acct.limited_account} running and one held on AssocMaxJobsLimit"
    res, running, held = poll_last(
        look, lambda seen: len(seen[1]) == limit and len(seen[2]) == 1, what=what, timeout=60.0, interval=0.5
    )
    submit.slurm.cancel(*jobs)
    requirement(
        len(running) == limit and len(held) == 1,
        f"account {acct.limited_account} (MaxJobs={limit}): {limit} job(s) run, the next pends on AssocMaxJobsLimit",
        res,
    )
