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
- Quarantine's loop (T3's fail-closed check, worker TaskPrologs failing open): worker2 alone broken is drained with
  ``--slurmflox-quarantine``, the reason naming the run and the check; every worker broken drains nothing more (the
  share is exceeded) and a sign-off names the drained worker2 NOT RUN; restored, ``--slurmflox-retest=quarantined``
  resumes worker2 and leaves a worker drained by hand with another reason drained.

The cluster is this module's own (private work dir and port; COMPUTE_REPLICAS=3 for its ``up``).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from acceptance_helpers import TASK_PROLOG as PROLOG
from acceptance_helpers import deployed, mutated, node_sh, passes_again, run_checks

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


#: T3's fail-closed check alone: one step on every worker, the cheapest per-worker requirement a TaskProlog breaks.
FAILS_CLOSED = ("-m", "T3", "-k", "fails_closed")
FAILS_CLOSED_CHECK = "test_task_prolog_in_force_fails_closed_on_every_worker"
#: worker's TaskProlog fails open: a bind-mounted copy whose refusals end ``exit 0`` (restored by unmounting it).
FAIL_OPEN = (
    f"cp {PROLOG} /tmp/.sfx-open-prolog.sh && sed -i 's/^\\texit 1$/\\texit 0/' /tmp/.sfx-open-prolog.sh && "
    f"! grep -qP '^\\texit 1$' /tmp/.sfx-open-prolog.sh && mount --bind /tmp/.sfx-open-prolog.sh {PROLOG}",
    f"umount {PROLOG}",
)


def _reasons(workdir: Path) -> dict[str, tuple[str, str]]:
    out = node_sh(workdir, "ctl", "sinfo -h -N -o '%N|%T|%E'")
    return {n: (s, r) for n, s, r in (line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2)}


def _quarantine_of(home: Path, run_id: str) -> dict:
    return json.loads((home / "reports" / run_id / "evidence.json").read_text())["run"]["quarantine"]


def test_quarantine_drains_the_one_broken_worker_and_a_retest_resumes_it(deployment):
    """The loop on three workers, in three runs of T3's fail-closed check (one step each):

    1. worker2's TaskProlog failing open, ``--slurmflox-quarantine``: worker2 alone is drained, the reason naming
       the run and the check, the run NOT SIGNED OFF naming it;
    2. every worker's TaskProlog failing open, a sign-off with ``--slurmflox-quarantine`` while worker2 is still
       drained: it is left out of the cohort and the verdict names it NOT RUN (quarantined); worker1 and worker3
       FAIL the same way, more than the share allows: nothing more is drained, one line says why;
    3. restored, worker3 drained by hand with another reason, ``--slurmflox-retest=quarantined``: worker2 is
       re-tested alone and resumed, the evidence naming the run that cleared it; worker3 stays drained."""
    home, workdir, _, _ = deployment
    tag = os.getpid()
    q1, q2, r1 = f"q1{tag}", f"q2{tag}", f"r1{tag}"
    failed = [f"test_t03_task_profile::{FAILS_CLOSED_CHECK}"]
    run = mutated(
        deployment, {"worker2": FAIL_OPEN}, *FAILS_CLOSED, "--slurmflox-quarantine", f"--slurmflox-run-id={q1}"
    )
    assert run.outcomes("failure") == failed, run.output[-3000:]
    states = _reasons(workdir)
    assert "drain" in states["worker2"][0], states
    assert states["worker2"][1].startswith(f"slurmflox {q1}: T3 {FAILS_CLOSED_CHECK}: worker2: TaskProlog"), states
    assert "drain" not in states["worker1"][0] and "drain" not in states["worker3"][0], states
    assert "NOT SIGNED OFF" in run.output and "quarantined by this run: worker2 drained" in run.output, run.output[
        -3000:
    ]
    actions = _quarantine_of(home, q1)["actions"]
    assert [(a["worker"], a["action"], a["run_id"]) for a in actions] == [("worker2", "drained", q1)], actions
    print("drained:", states["worker2"])
    try:
        every = {w: FAIL_OPEN for w in ("worker1", "worker2", "worker3")}
        held = mutated(deployment, every, *FAILS_CLOSED, "--slurmflox-signoff", "--slurmflox-quarantine",
                       f"--slurmflox-run-id={q2}")  # fmt: skip
        assert held.outcomes("failure") == failed and held.rc != 0, held.output[-3000:]
        assert f"NOT RUN on worker2: quarantined (slurmflox {q1}: T3" in held.output, held.output[-3000:]
        refused = [line for line in held.output.splitlines() if "quarantine refused" in line]
        assert refused and "name 2 of 3 workers (worker1, worker3)" in refused[0], held.output[-3000:]
        assert "nothing drained" in refused[0], refused
        assert _quarantine_of(home, q2)["held"] == {"worker2": states["worker2"][1]}
        states = _reasons(workdir)
        assert "drain" not in states["worker1"][0] and "drain" not in states["worker3"][0], states

        node_sh(workdir, "ctl", "scontrol update nodename=worker3 state=drain reason='ops: fan replaced'")
        again = run_checks(deployment, *FAILS_CLOSED, "--slurmflox-retest=quarantined", f"--slurmflox-run-id={r1}")
        assert again.outcomes("passed") == failed, again.output[-3000:]
        done = _quarantine_of(home, r1)
        assert [(a["worker"], a["action"], a["run_id"]) for a in done["actions"]] == [("worker2", "resumed", r1)], done
        assert f"cleared by run {r1}" in done["actions"][0]["reason"], done
        states = _reasons(workdir)
        assert "drain" not in states["worker2"][0], states
        assert "drain" in states["worker3"][0] and states["worker3"][1] == "ops: fan replaced", states
        shown = node_sh(workdir, "ctl", "scontrol -o show reservation 2>&1; true")
        assert f"sfx-retest-{r1}" not in shown, shown
    finally:
        for worker in ("worker2", "worker3"):
            node_sh(workdir, "ctl", f"scontrol update nodename={worker} state=resume 2>/dev/null; true")
        node_sh(workdir, "ctl", f"scontrol delete reservation=sfx-retest-{r1} 2>/dev/null; true")
    for worker in ("worker2", "worker3"):  # a node resumed from DRAIN reads idle* until slurmctld pings it
        _serving_again(workdir, worker)
