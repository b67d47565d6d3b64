"""T6: multi-node MPI through Slurm's pmix plugin.

Requirement: an MPI program launched with ``srun --mpi=pmix`` across two workers initializes one world with its
ranks on distinct nodes. The program is compiled for the occasion on a worker with the worker's own mpicc.

Where the expectations come from: the program is written here and prints its world size and ranks; the expected
size and node spread are the counts the check asks Slurm for.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.waits import job_timeout

from ._support import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T6]

MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, len; char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank=%d size=%d host=%s\n", rank, size, host);
    MPI_Finalize();
    return 0;
}
"""


def test_pmix_is_offered(submit):
    res = submit.login.run("srun --mpi=list")
    requirement(res.ok and "pmix" in res.stdout + res.stderr, "Slurm offers the pmix MPI plugin", res)


def _probe(submit, target) -> str:
    """An MPI program on the workers: compiled now with the worker's mpicc, else one the worker image ships."""
    outdir = target.login.run(f"mkdir -p {submit.outdir} && cd {submit.outdir} && pwd").check().stdout.strip()
    target.login.run(f"cat > {outdir}/mpi_hello.c", input=MPI_HELLO).check()
    build = submit.srun(
        "-N1 -n1",
        f"bash -c 'command -v mpicc >/dev/null || exit 97; mpicc -o {outdir}/mpi_hello {outdir}/mpi_hello.c'",
    )
    if build.ok:
        return f"{outdir}/mpi_hello"
    shipped = submit.srun("-N1 -n1", "bash -c 'command -v mpi-hello'")
    if shipped.ok and shipped.stdout.strip():
        return shipped.stdout.strip()
    pytest.skip(
        "missing capability mpi-probe: the workers can neither compile an MPI program (no working mpicc) nor "
        "ship one (mpi-hello)"
    )


def test_mpi_ranks_on_distinct_nodes(submit, target):
    program = _probe(submit, target)
    # the allocation, then the two ranks' PMIx wire-up (up to a pass of its own on a loaded host)
    run = submit.srun("--mpi=pmix -N2 -n2 --ntasks-per-node=1", program, timeout=job_timeout(stages=2))
    lines = sorted(line for line in run.stdout.splitlines() if "rank=" in line)
    hosts = {line.split("host=")[1].split()[0] for line in lines}
    ranks = sorted(line.split("rank=")[1].split()[0] for line in lines)
    requirement(
        run.ok and ranks == ["0", "1"] and all("size=2" in line for line in lines) and len(hosts) == 2,
        f"two ranks of one MPI world ({program}) on two distinct workers",
        run,
    )
