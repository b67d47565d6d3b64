"""TAR (destructive, opt-in): accounting data survives a restart of slurmdbd and of slurmctld.

Requirement: a job recorded before the restarts is still in ``sacct`` with the same state, exit code, node
list and account after slurmdbd and then slurmctld were restarted, and a job run after them is recorded too.
Restarting the cluster's daemons disrupts everyone using it, so the group is destructive: it runs only when named
(``--slurmflox-groups=TAR``) or with ``--slurmflox-destructive``. It needs ``accounting`` and an owner that can
restart the services (``service-restart``: the local substrate's pool restarts its ``db`` and ``ctl`` nodes from
their kept state); a customer target has no such hook yet and SKIPs naming it.

Where the expectations come from: the record of the first job as sacct showed it *before* the restarts (taken
first, then compared), and the second job's own exit status (the script exits 5).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.waits import job_timeout, poll_last
from pytest_slurmflox.cluster.gates import require

from ._capability import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.destructive, pytest.mark.TAR]

FIELDS = "JobID,State,ExitCode,NodeList,Account"


def _record(login, job: str, timeout: float = 60.0) -> tuple[str, object]:
    """sacct's line of ``job``, polled until it is recorded as ended (or its last line after ``timeout``)."""

    def look():
        res = login.run(f"sacct -n -P -X --format={FIELDS} -j", job, timeout=30)
        return res.stdout.strip(), res

    def ended(seen) -> bool:
        line, res = seen
        return bool(res.ok and line and "|RUNNING|" not in line and "|PENDING|" not in line)

    return poll_last(look, ended, what=f"job {job} ended in sacct", timeout=timeout, interval=0.5)


def test_accounting_survives_slurmdbd_and_slurmctld_restarts(submit, target):
    require(target, "accounting")
    require(target, "service-restart")
    account = target.spec.accounting.account
    before_job = submit.sbatch("#!/bin/bash\nexit 4\n", "-N1", f"--account={account}")
    submit.wait(before_job)
    before, res = _record(submit.login, before_job)
    recorded = before.startswith(f"{before_job}|FAILED|4:0|")
    requirement(recorded, f"job {before_job} is recorded before the restarts", res)
    for service in ("slurmdbd", "slurmctld"):
        target.pool.restart_service(service)
        after, res = _record(submit.login, before_job)
        requirement(after == before, f"after restarting {service}, sacct shows job {before_job} unchanged", before, res)
    later = submit.sbatch("#!/bin/bash\nexit 5\n", "-N1", f"--account={account}")
    # the restarted controller: a pass to recover its state, one to start the job, one to record its end
    submit.wait(later, timeout=job_timeout(stages=3))
    line, res = _record(submit.login, later)
    requirement(line.startswith(f"{later}|FAILED|5:0|"), f"job {later}, run after the restarts, is recorded", res)
