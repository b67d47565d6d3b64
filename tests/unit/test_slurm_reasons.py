"""TA's judge of a refusal (issue 26): Slurm's reason for an association refusal, nothing else, counts.

The texts are Slurm's own (SchedMD/slurm src/common/slurm_errno.c: ESLURM_INVALID_ACCOUNT,
ESLURM_INVALID_PARTITION_NAME) and runuser's; tests/integration/test_accounting_rest_local.py shows them from a live
cluster.
"""

from __future__ import annotations

import pytest
from pytest_slurmflox.suites._slurm_reasons import association_refused, lost_scripts

from pytest_slurmflox.base.run import Result


def _sbatch(exit_status: int, stderr: str, stdout: str = "") -> Result:
    return Result("runuser -u x -- sbatch ...", "login", "root", exit_status, stdout, stderr, 0.1)


def test_slurms_association_refusal_is_a_refusal():
    text = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n"
    assert association_refused(_sbatch(1, text))


@pytest.mark.parametrize(
    "stderr",
    [
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n",  # a typo'd partition
        "sbatch: error: Batch job submission failed: User's group not permitted to use this partition\n",  # an ACL
        "runuser: user sfxstrangertypo does not exist or the user entry does not contain all the required fields\n",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
        "",
    ],
)
def test_any_other_failure_is_not_an_association_refusal(stderr):
    assert not association_refused(_sbatch(1, stderr))


def test_the_reason_without_a_failed_submission_is_not_a_refusal():
    """A site's banner or prolog repeating the words does not make an accepted job a refusal."""
    text = "Batch job submission failed: Invalid account or account/partition combination specified"
    assert not association_refused(_sbatch(0, "", stdout=f"{text}\n1234\n"))


def test_a_script_slurm_lost_before_running_it_is_named_by_its_job_id():
    """slurmstepd's own line in the job's output (a healthy local cluster at 32 workers, job 2083: slurmd purged the
    script as vestigial while the step started); our script's output, or another job's failure, is not that."""
    output = (
        "sfx|SUBMIT|...\n"
        "slurmstepd: error: execve(): /var/lib/slurm/slurmd/job02083/slurm_script: No such file or directory\n"
        "slurmstepd-worker7: error: execve(): /var/spool/slurmd/job123456/slurm_script: No such file or directory\n"
        "slurmstepd: error: execve(): /var/lib/slurm/slurmd/job02084/slurm_script: Permission denied\n"
        "bash: line 1: slurm_script: No such file or directory\n"
    )
    assert lost_scripts(output) == {"2083", "123456"}
    assert lost_scripts("") == set()
