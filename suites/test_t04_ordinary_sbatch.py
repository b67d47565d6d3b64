"""T4: ordinary sbatch scripts work unchanged, and a submission creates no Kubernetes object.

Requirement: a plain batch script (only #SBATCH directives, no Kubernetes syntax) runs to completion on a worker;
Slurm, not Kubernetes, takes the work: no Job or Pod appears for it.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.checks import job_objects

from ._support import require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T4]

PLAIN_SCRIPT = """#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --time=2
echo "host=$(hostname) job=$SLURM_JOB_ID"
echo done-ordinary
"""


def test_plain_batch_script_completes(submit, workers):
    assert "kube" not in PLAIN_SCRIPT.lower() and "pod" not in PLAIN_SCRIPT.lower()
    job = submit.sbatch(PLAIN_SCRIPT)
    state = submit.wait(job)[job]
    out = submit.output(job)
    requirement(state.state == "COMPLETED", "the ordinary batch job COMPLETED", str(state), out)
    requirement("done-ordinary" in out and f"job={job}" in out, "its script ran as written", out)


def test_submission_creates_no_kubernetes_object(target, submit):
    require(target, "kubernetes")
    before = job_objects(target.kube.jobs_all_namespaces(), target.kube.pods_all_namespaces())
    job = submit.sbatch(PLAIN_SCRIPT)
    submit.wait(job)
    after = job_objects(target.kube.jobs_all_namespaces(), target.kube.pods_all_namespaces())
    requirement(after - before == set(), "no Job/Pod created by a Slurm submission", sorted(after - before))
