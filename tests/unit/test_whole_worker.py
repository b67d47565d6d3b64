"""T8's whole-worker request judged against each worker's node record (suites/test_t08_resources.py): the probe
runs here with bash (the real /proc/self/status and cgroup files of this process), the judge on its lines."""

from __future__ import annotations

import os
import subprocess

from pytest_slurmflox.suites.test_t08_resources import _WHOLE_PROBE, whole_worker_problem

GIB = 2**30


def test_a_worker_giving_every_declared_cpu_and_its_memory_passes():
    lines = ["allowed=0-1", f"memlimit={GIB} /sys/fs/cgroup/memory/slurm/job_1", "memlimit=9223372036854771712 /x"]
    assert whole_worker_problem([*lines, "done"], cpus=2, mem_mb=1024) is None


def test_fewer_cpus_or_a_lower_limit_above_the_task_is_named():
    lines = [
        "allowed=0",
        f"memlimit={GIB} /sys/fs/cgroup/memory/slurm/job_1",
        f"memlimit={GIB // 2} /sys/fs/cgroup/memory",
    ]
    problem = whole_worker_problem([*lines, "done"], cpus=2, mem_mb=1024)
    assert problem == (
        "its node record declares 2 CPUs but the kernel lets the task run on [0]; its node record declares 1024 MiB "
        "but /sys/fs/cgroup/memory limits the task to 512 MiB"
    )
    assert whole_worker_problem(["allowed=0-1"], cpus=2, mem_mb=1024).startswith("the probe did not finish")


def test_the_probe_reads_this_process_cpus_and_every_memory_limit_up_to_its_root():
    out = subprocess.run(["bash", "-c", _WHOLE_PROBE], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-1] == "done" and out[0] == "allowed=" + _allowed()
    cpus = len(os.sched_getaffinity(0))
    assert whole_worker_problem(out, cpus=cpus, mem_mb=1) is None
    assert "declares" in (whole_worker_problem(out, cpus=cpus + 1, mem_mb=1) or "")


def _allowed() -> str:
    with open("/proc/self/status") as status:
        return next(line.split(":", 1)[1].strip() for line in status if line.startswith("Cpus_allowed_list"))


def test_a_cluster_that_lets_jobs_use_part_of_a_node_is_judged_by_that_share():
    """cgroup.conf AllowedRAMSpace=50: Slurm limits a whole-worker job to half of RealMemory; that is the site's
    configuration, not a worker holding the task back (a pod limit below that share still is)."""
    job = f"memlimit={GIB // 2} /sys/fs/cgroup/memory/slurm/job_1"
    assert whole_worker_problem(["allowed=0-1", job, "done"], cpus=2, mem_mb=1024, allowed_pct=50.0) is None
    pod = f"memlimit={GIB // 4} /sys/fs/cgroup/memory"
    assert whole_worker_problem(["allowed=0-1", job, pod, "done"], cpus=2, mem_mb=1024, allowed_pct=50.0) == (
        "its node record declares 1024 MiB (AllowedRAMSpace 50%: 512 MiB) but /sys/fs/cgroup/memory limits the task "
        "to 256 MiB"
    )
