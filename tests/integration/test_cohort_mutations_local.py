"""Integration: every worker, every time (issue 26). On a live local cluster of THREE workers, each mutation breaks
a worker that is not the first, runs the checks, asserts they FAIL naming exactly that worker, restores, and asserts
they PASS again.

- A stopped slurmd (SIGSTOP on worker2's slurmd: the process is there and holds its port, it answers nothing): the
  cohort pre-flight's step on every worker does not hear from worker2 (or sinfo already flags it ``*``), and the
  run ends non-zero within 60 s naming worker2, every check blocked with that reason.
- A TaskProlog on worker2 that exports ``SLURM_CONF=/tmp/x`` (every Slurm command in the task would read another
  configuration) and a name Slurm never sets: TP (srun and sbatch) and T10 FAIL naming worker2, the names Slurm
  sets being judged now instead of ignored. (``TMPDIR=/foreign`` from a TaskProlog does not reach the task: slurmstepd
  sets TMPDIR after the TaskProlog ran, measured on Slurm 24.11.)
- MPI broken on the third worker only (its pmix plugins hidden, as an image built without them): T6, whose MPI
  world has a rank on every worker, FAILS naming worker3 (it used to run ``-N2`` and pass).

The cluster is this module's own (private work dir and port; COMPUTE_REPLICAS=3 for its ``up``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from acceptance_helpers import deployed, mutated, node_sh, passes_again

pytestmark = pytest.mark.integration

GROUPS = "T6 or T9 or TI or TP"
THREE_WORKERS = ("--slurmflox-compute-replicas=3",)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "cohort3", "-m", GROUPS, options=THREE_WORKERS) as recorded:
        yield recorded


def _states(workdir: Path) -> dict[str, str]:
    out = node_sh(workdir, "ctl", "sinfo -h -N -o '%N %T'")
    return dict(line.split() for line in out.splitlines() if line.strip())


def _serving_again(workdir: Path, node: str, within: float = 120.0) -> None:
    """After the restore: Slurm has the node idle again (a node marked DOWN while stopped is resumed)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        state = _states(workdir).get(node, "")
        if state == "idle":
            return
        if state.startswith("down"):
            node_sh(workdir, "ctl", f"scontrol update nodename={node} state=resume")
        time.sleep(2)
    raise AssertionError(f"{node} did not serve again: {_states(workdir)}")


def test_healthy_three_worker_cluster_passes(deployment):
    _, workdir, _, run = deployment
    assert sorted(_states(workdir)) == ["worker1", "worker2", "worker3"], _states(workdir)
    assert run.outcomes("failure") == [] and run.outcomes("error") == [] and run.outcomes("passed"), run.output[-4000:]
    for module in ("test_t06_mpi", "test_t09_storage_login", "test_ti_identity"):
        assert run.in_module(module), (module, run.output[-3000:])


def test_a_stopped_slurmd_ends_the_run_within_60s_naming_the_worker(deployment):
    _, workdir, _, _ = deployment
    stop = "kill -STOP $(cat /run/slurmd.pid)"
    cont = "kill -CONT $(cat /run/slurmd.pid)"
    began = time.monotonic()
    try:
        run = mutated(deployment, {"worker2": (stop, cont)}, "-m", "T5 or T6")
        took = time.monotonic() - began
    finally:
        _serving_again(workdir, "worker2")
    print(f"stopped slurmd: run ended with exit {run.rc} in {took:.1f} s")
    assert run.rc != 0 and run.outcomes("passed") == [], run.output[-4000:]
    assert took < 60, (took, run.output[-3000:])
    blocked = run.outcomes("error") + run.outcomes("failure")
    assert blocked, run.output[-4000:]
    for name in blocked:
        said = re.findall(r"requirement not met: [^\n]*", run.cases[name][1])
        # named: worker2 does not answer the pre-flight step, or sinfo already flags it not serving
        assert said and "worker2" in said[0], (name, run.cases[name][1][-2000:])
        assert "worker1" not in said[0] and "worker3" not in said[0], said
    passes_again(deployment, "-m", "T6")


def test_mpi_broken_on_the_third_worker_fails_t6_naming_it(deployment):
    _, workdir, _, _ = deployment
    plugin_dir = node_sh(workdir, "ctl", "scontrol show config | sed -n 's/^PluginDir *= *//p'").strip().split(":")[0]
    hide = f"cd {plugin_dir} && ls mpi_pmix*.so && for f in mpi_pmix*.so; do mv $f $f.sfx-hidden; done"
    show = f"cd {plugin_dir} && for f in mpi_pmix*.so.sfx-hidden; do mv $f ${{f%.sfx-hidden}}; done"
    run = mutated(deployment, {"worker3": (hide, show)}, "-m", "T6")
    assert run.outcomes("failure") == [
        "test_t06_mpi::test_mpi_ranks_on_every_worker",
        "test_t06_mpi::test_mpi_ranks_talk_between_every_pair_of_workers",  # no rank started, so none talked
    ], run.output[-3000:]
    message = run.messages()
    said = re.findall(r"requirement not met: [^\n]*", message)[0]
    # srun aborts the whole step when one worker cannot launch it: that worker is named as the cause
    assert "with a rank on each of the 3 workers" in said and "worker3: the step could not launch there" in said, said
    assert "could not launch on worker3" in said and "worker1: the step" not in said, said
    passes_again(deployment, "-m", "T6")


def test_a_task_prolog_redirecting_slurm_on_worker2_fails_tp_and_t10(deployment):
    prolog = "/etc/slurm/flox-task-prolog/task-prolog.sh"
    extra = 'printf "%s\\n" "export SLURM_CONF=/tmp/x" "export SLURM_SFX_SITE=1"; exit 0'
    breaks = (
        f"cp {prolog} /tmp/.sfx-task-prolog.sh && sed -i 's|^exit 0$|{extra}|' /tmp/.sfx-task-prolog.sh && "
        f"grep -q SLURM_CONF /tmp/.sfx-task-prolog.sh && mount --bind /tmp/.sfx-task-prolog.sh {prolog}"
    )
    run = mutated(deployment, {"worker2": (breaks, f"umount {prolog}")}, "-m", "TP or T10")
    failed = run.outcomes("failure")
    assert any(f.startswith("test_tp_provenance::test_srun_task_environment") for f in failed), run.output[-3000:]
    assert any(f.startswith("test_tp_provenance::test_sbatch_task_environment") for f in failed), run.output[-3000:]
    assert any("no_pod_or_floxhub_credentials" in f for f in failed), run.output[-3000:]
    said = re.findall(r"requirement not met: [^\n]*", run.messages())
    assert said and all("worker2" in line and "worker1" not in line and "worker3" not in line for line in said), said
    message = run.messages()
    assert "SLURM_CONF='/tmp/x' redirects Slurm's configuration" in message, message[-3000:]
    assert "sets SLURM_SFX_SITE, unlike the other workers' tasks" in message, message[-3000:]
    passes_again(deployment, "-m", "TP or T10")
