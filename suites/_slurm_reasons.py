"""Slurm's own reasons for refusing work: a check that expects a refusal judges it by Slurm's words, never by a
non-zero exit alone (a missing user, a partition ACL or a typo'd partition also exit non-zero; issue 26)."""

from __future__ import annotations

from pytest_slurmflox.run import Result

#: Slurm's own reason for a submission refused for its association (AccountingStorageEnforce=associations): the
#: text of ESLURM_INVALID_ACCOUNT in SchedMD/slurm src/common/slurm_errno.c, which sbatch prints after "Batch job
#: submission failed: ". Any other failure (no such user, a partition ACL, a typo'd partition: "Invalid partition
#: name specified") is not that refusal.
ASSOCIATION_REFUSAL = "Invalid account or account/partition combination specified"


def association_refused(res: Result) -> bool:
    """Whether an sbatch was refused for its association, by Slurm's reason (a non-zero exit alone says nothing)."""
    return not res.ok and f"submission failed: {ASSOCIATION_REFUSAL}" in f"{res.stdout}\n{res.stderr}"
