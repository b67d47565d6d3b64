"""T5: interactive and multi-step Slurm work.

Requirement: srun runs across nodes, salloc gives an allocation in which srun runs, and one batch job can run
several steps in sequence.

Where the expectations come from: Slurm's documented behaviour of srun, salloc and job steps (the commands, node
counts and step ids are chosen here); the cohort is the ``workers`` fixture (Slurm cross-checked with the owner).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.base.waits import job_timeout

from ._capability import requirement
from ._marks import Mark

pytestmark = [pytest.mark.acceptance, pytest.mark.T5]


def test_srun_spans_two_workers(submit, workers):
    mark = Mark.new()
    res = submit.srun("-N2 -n2 --ntasks-per-node=1", "bash -c " + quoted("%s", mark.echo("$SLURMD_NODENAME")))
    names = mark.lines(res.stdout)
    requirement(
        res.ok and len(set(names)) == 2 and set(names) <= set(workers),
        "srun -N2 runs one task on each of two distinct workers",
        res,
    )


def test_salloc_then_srun(submit, target):
    res = target.login.run(
        "salloc",
        *("-J", submit.name, *submit.placement, "-N1"),
        *("srun", "bash", "-c", "echo alloc=$SLURM_JOB_ID step=$SLURM_STEP_ID"),  # $ expanded by the step's bash
        timeout=job_timeout(stages=2),  # the allocation, then its step
    )
    requirement(
        res.ok and "alloc=" in res.stdout and "step=0" in res.stdout,
        "salloc grants an allocation and srun runs step 0 inside it",
        res,
    )


def test_batch_job_runs_several_steps(submit):
    mark = Mark.new()
    step = quoted("%s", mark.echo("step=$SLURM_STEP_ID"))
    script = f"#!/bin/bash\nfor i in 1 2 3; do srun -n1 bash -c {step}; done\n"
    job = submit.sbatch(script, "-N1")
    state = submit.wait(job)[job]
    out = submit.output(job)
    steps = mark.lines(out)
    requirement(
        state.state == "COMPLETED" and steps == ["step=0", "step=1", "step=2"],
        "three steps ran in order inside one batch job",
        str(state),
        out,
    )
