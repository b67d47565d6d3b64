"""T6: multi-node MPI through the Slurm MPI plugin the target declares.

Requirement: an MPI program launched with ``srun --mpi=<plugin>`` across every worker of the cohort (one step, one
rank per worker, ``-w`` all of them) initializes one world with one rank on each worker; a worker where MPI is
broken is named. The program is compiled for the occasion on a worker with the worker's own mpicc.

Where the expectations come from: the plugin is the target file's ``slurm.mpi`` (pmix unless it says; the local
substrate's sid image declares pmi2, substrates/local/mpistack.py), never what the cluster offers or defaults to;
the program is written here and prints its world size and ranks; the expected size and node spread are the cohort
the pre-flight decided (Slurm's partition cross-checked with the owner).
Starting is not talking: the program (suites/_mpitalk.py) prints its rank and world size, then exchanges messages in
a ring across every worker and between every pair, and a pair of workers that cannot exchange one is named. Both
checks judge the same step, made once in the run (suites/_shared.py): one MPI launch over the cohort, not two (at 64
workers each costs about 20 s of the host's CPU). Where the workers cannot compile it, the start check runs the image's
shipped hello program instead and the talking check SKIPs.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.run import command_line, quoted
from pytest_slurmflox.base.waits import job_timeout
from pytest_slurmflox.judges.mpiplugins import offered_plugins

from ._capability import requirement
from ._cohort import Across, across
from ._marks import per_node
from ._mpitalk import MPI_TALK, WAIT_S, exchange_seconds, pairs_message, program_seconds, silent_pairs
from ._shared import observe_once

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


def test_the_declared_mpi_plugin_is_offered(submit, target):
    plugin = target.spec.mpi
    res = submit.login.run("srun --mpi=list")
    offered = offered_plugins(res.stdout + res.stderr)
    requirement(
        res.ok and plugin in offered,
        f"Slurm offers the MPI plugin the target declares (slurm.mpi: {plugin}); srun --mpi=list offers "
        + (", ".join(offered) or "none"),
        res,
    )


def _probe(submit, target, name: str = "mpi_hello", source: str = MPI_HELLO, shipped: str = "mpi-hello") -> str:
    """An MPI program on the workers: ``source`` compiled now with the worker's mpicc, else ``shipped`` if the
    worker image ships it (none for the talking program)."""
    outdir = submit.made_outdir()
    target.login.run(quoted("cat > %s/%s.c", outdir, name), input=source).check()
    program = f"{outdir}/{name}"
    compile_it = quoted("command -v mpicc >/dev/null || exit 97; mpicc -o %s %s.c", program, program)
    build = submit.srun("-N1 -n1", command_line("bash -c", [compile_it]))
    if build.ok:
        return program
    found = submit.srun("-N1 -n1", command_line("bash -c", [quoted("command -v %s", shipped)])) if shipped else None
    if found is not None and found.ok and found.stdout.strip():
        return found.stdout.strip()
    pytest.skip(
        "missing capability mpi-probe: the workers can neither compile an MPI program (no working mpicc) nor "
        f"ship one ({shipped or name})"
    )


def _talk_step(request, submit, target, workers) -> Across:
    """The talking program once on every worker (one rank each), made once in the run and judged by both checks;
    SKIPs (:func:`_probe`) where the workers cannot compile it."""

    def observe() -> dict:
        program = _probe(submit, target, "mpi_talk", MPI_TALK, "")
        n = len(workers)
        # the allocation and the PMI wire-up (as the start check), then the ring and every round, within the alarm
        script = quoted("%s %s", program, f"{exchange_seconds(n):g}")
        timeout = job_timeout(stages=2) + program_seconds(n)
        return {"step": across(submit, workers, script, args=f"--mpi={target.spec.mpi}", timeout=timeout).result}

    result = observe_once(request, "t6-talk", observe)["step"]
    return Across(result, tuple(sorted(workers)), per_node(result))


def test_mpi_ranks_on_every_worker(request, submit, target, workers):
    """One MPI world with one rank on every worker of the cohort (``-w`` all of them): MPI broken on any one worker
    (its MPI plugin, its MPI library) FAILS naming that worker. Judged on the ranks' ``rank=`` lines of the talking
    step (whether they then talk is the next check's); where it cannot be compiled, on the shipped hello program."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    n = len(workers)
    try:
        step, program, whole = _talk_step(request, submit, target, workers), "the talking program", False
    except pytest.skip.Exception:
        program = _probe(submit, target)
        # the allocation, then the ranks' PMI wire-up (up to a pass of its own on a loaded host)
        args = f"--mpi={target.spec.mpi}"
        step = across(submit, workers, quoted("%s", program), args=args, timeout=job_timeout(stages=2))
        whole = True  # the hello program does nothing after its line: it must end well too

    def judge(node: str, lines: list[str]) -> str | None:
        ranks = [line for line in lines if line.startswith("rank=")]
        if len(ranks) != 1 or ranks[0].split()[1:2] != [f"size={n}"]:
            return f"no rank of one {n}-rank MPI world ran there: {lines[-3:]!r}"
        return None

    problems = step.wrong(judge)
    ranks = sorted(int(line.split("rank=")[1].split()[0]) for lines in step.lines.values() for line in lines
                   if line.startswith("rank="))  # fmt: skip
    if not problems and ranks != list(range(n)):
        problems.append(f"the ranks are {ranks}, not 0..{n - 1}")
    requirement(
        (step.result.ok or not whole) and not problems,
        f"one MPI world ({program}) with a rank on each of the {n} workers: " + "; ".join(problems),
        step.result,
        workers=problems.workers,
    )


def test_mpi_ranks_talk_between_every_pair_of_workers(request, submit, target, workers):
    """One rank on every worker; each rank sends to the next (a ring over the whole cohort), then to every other in
    shifted rounds, each receive bounded by ``MPI_Wtime`` and the whole exchange by a budget that grows with the
    cohort (suites/_mpitalk.py): a pair of workers whose ranks start but cannot exchange a message FAILS naming the
    pair (sender -> receiver)."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    n = len(workers)
    step = _talk_step(request, submit, target, workers)
    problems = step.wrong(lambda node, lines: None if any(x.startswith("rank=") for x in lines) else "no rank ran")
    pairs = silent_pairs(step.lines, n)
    requirement(
        step.result.ok and not problems and not pairs,
        f"the ranks on the {n} workers exchange messages (a ring, then every pair in {n - 1} rounds; {WAIT_S} s per "
        f"round, {exchange_seconds(n):g} s for all): " + "; ".join(problems + pairs_message(pairs)),
        step.result,
    )
