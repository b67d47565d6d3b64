"""T8: advertised capacity, honoured allocations, and no stray processes.

Requirement: each worker advertises exactly the CPUs and memory the deployment declares for it (not its host's), a
request beyond that is refused rather than over-committed, and when a job ends or is cancelled none of its
processes survive on the worker.
"""

from __future__ import annotations

import pytest

from ._support import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T8]


def test_advertised_capacity_equals_declared(slurm, workers, expect):
    nodes = {n.name: n for n in slurm.nodes()}
    s = expect.settings
    for name in workers:
        node = nodes.get(name)
        requirement(node is not None, f"{name} is registered with slurmctld", str(sorted(nodes)))
        requirement(
            node.cpus == s.worker_cpus,
            f"{name} advertises WORKER_CPUS={s.worker_cpus}",
            f"CPUTot={node.cpus} ({node.raw.get('CPUTot')}), State={node.state}",
        )
        requirement(
            node.real_memory == s.worker_mem_mb,
            f"{name} advertises WORKER_MEM_MB={s.worker_mem_mb}",
            f"RealMemory={node.real_memory}",
        )


def test_allocation_is_honoured(submit, expect):
    cpus = expect.settings.worker_cpus
    res = submit.srun(f"-N1 -n1 -c{cpus}", "bash -c 'echo cpus=$SLURM_CPUS_ON_NODE'")
    requirement(res.ok and f"cpus={cpus}" in res.stdout, f"a whole-worker request gets {cpus} CPUs", res)
    too_many = submit.srun(f"-N1 -n1 -c{cpus + 1} --immediate=5", "true", timeout=60)
    requirement(not too_many.ok, "a request beyond a worker's declared CPUs is refused", too_many)
    too_much = submit.srun(f"-N1 -n1 --mem={expect.settings.worker_mem_mb + 1} --immediate=5", "true", timeout=60)
    requirement(not too_much.ok, "a request beyond a worker's declared memory is refused", too_much)


def _leftovers(submit, node: str, marker: str):
    """Processes on ``node`` whose command line holds ``marker`` (seen from a task there; pgrep itself excluded)."""
    return submit.srun(
        f"-N1 -n1 -w {node}", f"bash -c 'pgrep -af -- {marker} | grep -v -e pgrep -e \"bash -c\" || true'"
    )


def test_no_stray_processes_after_a_job_ends(submit, workers, run_id):
    marker = f"sfxstray{run_id.replace('-', '')[-10:]}end"
    node = workers[0]
    job = submit.sbatch(f"#!/bin/bash\n(exec -a {marker} sleep 600) &\nsleep 1\necho started\n", f"-w{node}")
    state = submit.wait(job)[job]
    requirement(state.state == "COMPLETED", "the job that leaves a background child completed", str(state))
    left = _leftovers(submit, node, marker)
    requirement(left.ok and marker not in left.stdout, "no process of the ended job survives", left)


def test_no_stray_processes_after_cancel(submit, workers, run_id):
    marker = f"sfxstray{run_id.replace('-', '')[-10:]}cancel"
    node = workers[-1]
    job = submit.sbatch(f"#!/bin/bash\n(exec -a {marker} sleep 600) &\nsleep 600\n", f"-w{node}")
    submit.slurm.wait([job], until=frozenset({"RUNNING"}), timeout=60)
    seen = _leftovers(submit, node, marker)
    requirement(marker in seen.stdout, "the probe process runs while the job runs (the check can see it)", seen)
    submit.slurm.cancel(job).check()
    submit.wait(job, timeout=60)
    left = _leftovers(submit, node, marker)
    requirement(left.ok and marker not in left.stdout, "no process of the cancelled job survives", left)
