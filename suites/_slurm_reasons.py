"""Slurm's own reasons for refusing work: a check that expects a refusal judges it by Slurm's words, never by a
non-zero exit alone (a missing user, a partition ACL or a typo'd partition also exit non-zero)."""

from __future__ import annotations

import re

from pytest_slurmflox.base.run import Result

#: Slurm's own reason for a submission refused for its association (AccountingStorageEnforce=associations): the
#: text of ESLURM_INVALID_ACCOUNT in SchedMD/slurm src/common/slurm_errno.c, which sbatch prints after "Batch job
#: submission failed: ". Any other failure (no such user, a partition ACL, a typo'd partition: "Invalid partition
#: name specified") is not that refusal.
ASSOCIATION_REFUSAL = "Invalid account or account/partition combination specified"


def association_refused(res: Result) -> bool:
    """Whether an sbatch was refused for its association, by Slurm's reason (a non-zero exit alone says nothing)."""
    return not res.ok and f"submission failed: {ASSOCIATION_REFUSAL}" in f"{res.stdout}\n{res.stderr}"


#: What slurmstepd writes into a batch job's output (its stderr logs errors there: SchedMD/slurm
#: src/slurmd/slurmstepd/mgr.c) when the job's script is gone before it runs it. slurmd deletes a batch step's script
#: as "vestigial" when the step's socket refuses a connection (src/common/stepd_api.c ``_step_connect`` ->
#: ``_handle_stray_script``), and a starting slurmstepd's socket refuses one between its bind() and its listen()
#: (src/slurmd/slurmstepd/req.c ``_create_socket``): a race in Slurm itself, seen on a healthy local cluster at 32
#: workers on 2 cores (one batch job in about 500; slurmd.log: "Purging vestigial job script", then "execve():
#: .../slurm_script: No such file or directory").
_LOST_SCRIPT = re.compile(
    r"slurmstepd(?:-\S+)?: error: execve\(\): \S*/job0*(\d+)/slurm_script: No such file or directory"
)


def lost_scripts(output: str) -> set[str]:
    """The ids of the batch jobs whose script Slurm lost before running it, by slurmstepd's own line in their
    output. Such a job ran none of the check's script: it says nothing of what the check asks, so the check submits
    it once more (and judges that one); a second loss, or any other failure, is judged as it is."""
    return {match.group(1) for match in _LOST_SCRIPT.finditer(output)}
