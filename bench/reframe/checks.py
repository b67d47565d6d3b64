"""ReFrame equivalents of six pytest-slurmflox acceptance checks, run by bench/reframe_bench.py.

Each class submits, through ReFrame's ``slurm`` scheduler, the Slurm work of the pytest check named in its
docstring and judges the same facts in its sanity function. Where ReFrame's model differs, its own idiom is used:
ReFrame has no interactive step, so the srun check is a batch job running one ``srun``; a Slurm dependency needs the
parent's job id, which ReFrame hands over through a test dependency (the child is submitted when the parent ended);
a check acting on a running job (scancel) does so in ``run_complete``, which ReFrame's async policy calls after each
of its batched polls. ``SFX_RFM_WORKERS`` is the cohort size (the MPI world and the ring span every worker).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import run_after, run_before, sanity_function, variable

WORKERS = int(os.environ.get("SFX_RFM_WORKERS", "2"))


class _SlurmCheck(rfm.RunOnlyRegressionTest):
    valid_systems = ["slurmflox:all"]
    valid_prog_environs = ["builtin"]
    #: a plain batch script (no srun in it), as the pytest check's ``sbatch``
    plain = False

    @run_before("run")
    def no_launcher(self):
        if self.plain:
            self.job.launcher = getlauncher("local")()


@rfm.simple_test
class SrunSpansTwoWorkers(_SlurmCheck):
    """suites/test_t05_interactive.py::test_srun_spans_two_workers: one task on each of two distinct workers."""

    num_tasks = 2
    num_tasks_per_node = 1
    executable = "bash"
    executable_opts = ["-c", "'echo node=$SLURMD_NODENAME'"]

    @sanity_function
    def two_distinct_workers(self):
        names = sn.extractall(r"^node=(\S+)$", self.stdout, 1)
        return sn.all([sn.assert_eq(sn.count(names), 2), sn.assert_eq(sn.count_uniq(names), 2)])


@rfm.simple_test
class JobArrayRunsEveryTask(_SlurmCheck):
    """suites/test_t07_policy.py::test_job_array_runs_every_task: four tasks, each with its own task id."""

    plain = True
    executable = "echo"
    executable_opts = ["task=$SLURM_ARRAY_TASK_ID"]

    @run_before("run")
    def array(self):
        self.job.options += ["--array=0-3"]

    @sanity_function
    def every_task(self):
        # Slurm writes one output per task (ReFrame adds _%a); ReFrame's poll joins the four states
        found = [sn.assert_found(rf"^task={i}$", f"{self.stdout}_{i}") for i in range(4)]
        return sn.all([*found, sn.assert_eq(self.job.state, ",".join(["COMPLETED"] * 4))])


class _Parent(_SlurmCheck):
    plain = True
    executable = "exit"
    code = variable(int, value=0)

    @run_before("run")
    def script(self):
        self.executable_opts = [str(self.code)]

    @sanity_function
    def ended_as_scripted(self):
        state = "COMPLETED" if self.code == 0 else "FAILED"
        return sn.all([sn.assert_eq(self.job.exitcode, self.code), sn.assert_eq(self.job.state, state)])


@rfm.simple_test
class AfterokGoodParent(_Parent):
    """suites/test_t07_policy.py::test_afterok_runs_after_success_and_never_after_failure, the good parent."""

    code = 0


@rfm.simple_test
class AfterokBadParent(_Parent):
    """... the failing parent (exit 3)."""

    code = 3


class _Child(_SlurmCheck):
    plain = True
    executable = "echo"
    executable_opts = ["ran"]
    parent = variable(str, value="")

    @run_after("init")
    def after_parent(self):
        self.depends_on(self.parent)

    @run_before("run")
    def afterok(self):
        job = self.getdep(self.parent).job.jobid
        self.job.options += [f"--dependency=afterok:{job}", "--kill-on-invalid-dep=yes"]


@rfm.simple_test
class AfterokChildOfGood(_Child):
    """... the child of the good parent runs."""

    parent = "AfterokGoodParent"

    @sanity_function
    def ran(self):
        return sn.all([sn.assert_eq(self.job.state, "COMPLETED"), sn.assert_found(r"^ran$", self.stdout)])


@rfm.simple_test
class AfterokChildOfBad(_Child):
    """... the child of the failed parent never runs: Slurm ends it (DependencyNeverSatisfied, killed)."""

    parent = "AfterokBadParent"

    @sanity_function
    def never_ran(self):
        return sn.all([sn.assert_eq(self.job.state, "CANCELLED"), sn.assert_false(sn.path_exists(self.stdout))])

    @run_before("cleanup")
    def empty_outputs(self):
        """ReFrame's cleanup copies the job's outputs, which a job that never ran has not: empty ones, after the
        sanity function judged their absence."""
        for name in (self.job.stdout, self.job.stderr):
            Path(self.stagedir, name).touch()


@rfm.simple_test
class MpiRanksOnDistinctNodes(rfm.RegressionTest):
    """suites/test_t06_mpi.py::test_mpi_ranks_on_every_worker: compiled on a worker with its mpicc (a build job),
    then one ``srun --mpi=pmix`` world with one rank on each worker."""

    valid_systems = ["slurmflox:all"]
    valid_prog_environs = ["builtin"]
    sourcepath = "mpi_hello.c"
    build_system = "SingleSource"
    build_locally = False
    num_tasks = WORKERS
    num_tasks_per_node = 1

    @run_before("run")
    def pmix(self):
        self.job.launcher.options = ["--mpi=pmix"]

    @sanity_function
    def one_world_one_rank_per_worker(self):
        ranks = sn.extractall(rf"^rank=(\d+) size={WORKERS} host=(\S+)$", self.stdout, 1, int)
        hosts = sn.extractall(rf"^rank=\d+ size={WORKERS} host=(\S+)$", self.stdout, 1)
        return sn.all(
            [sn.assert_eq(sn.sorted(ranks), list(range(WORKERS))), sn.assert_eq(sn.count_uniq(hosts), WORKERS)]
        )


@rfm.simple_test
class WriteOnOneWorkerReadOnAnother(_SlurmCheck):
    """suites/test_t09_storage_login.py::test_write_on_one_worker_read_on_another_and_at_login: a ring over every
    worker in one step (task i writes, task i+1 reads), each file owned by the reader's uid:gid; ReFrame's host
    reads every file too (the pytest check reads them at the login node)."""

    num_tasks = WORKERS
    num_tasks_per_node = 1
    executable = "./ring.sh"

    @sanity_function
    def each_reads_the_previous(self):
        # read <rank> <reader's node> <token: written-on-<writer's node>-<job>> <file's uid:gid> <reader's uid:gid>
        out = Path(self.stagedir, self.job.stdout).read_text()
        reads = re.findall(r"^read \d+ (\S+) written-on-(\S+)-\d+ (\S+) (\S+)$", out, re.M)
        wrong = [read for read in reads if read[0] == read[1] or read[2] != read[3]]
        here = [sn.assert_found(r"^written-on-", f"shared-{i}.txt") for i in range(WORKERS)]
        return sn.all([sn.assert_eq(len(reads), WORKERS), sn.assert_eq(wrong, []), *here])


@rfm.simple_test
class ScancelEndsARunningJob(_SlurmCheck, special=True):
    """suites/test_t07_policy.py::test_scancel_ends_a_running_job: a job seen RUNNING is cancelled and ends
    CANCELLED. Cancelled from ``run_complete`` (ReFrame calls it after each batched poll), never blocking."""

    plain = True
    executable = "sleep"
    executable_opts = ["300"]
    seen_running = variable(bool, value=False)

    def run_complete(self):
        if self.job.state == "RUNNING" and not self.seen_running:
            self.seen_running = True
            self.job.cancel()
        return super().run_complete()

    @sanity_function
    def cancelled(self):
        return sn.all([sn.assert_true(self.seen_running), sn.assert_eq(self.job.state, "CANCELLED")])
