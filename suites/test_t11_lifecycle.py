"""T11R/T11U/T11C/T11F: the runtime lifecycle, exercised live. Destructive: they roll the worker cohort.

They run only when named (``-m T11U``, ``--slurmflox-groups=T11U``) or with ``--slurmflox-destructive``, need
administrative access and an owner of the workers, and put the original runtime back when they end.

- T11R: a rerun with an unchanged revision touches nothing; a partition left DOWN by an interrupted cycle is
  recovered to a validated, open cohort.
- T11U: a live runtime update moves the whole cohort behind the maintenance barrier: a job queued before it stays
  pending and then runs on a worker of the new revision, and a watcher sampling every 100 ms never sees the
  partition UP while workers disagree.
- T11C: a CPU-capacity revision: nodes advertise the new CPU count and no stale node record remains.
- T11F: a revision whose environment cannot be realized fails at wait-ready and leaves the partition DOWN; going
  back restores service. A worker whose task profile breaks fails closed: a user's step there does not start and
  the user sees why; the owner restarting the worker brings it back.

Where the expectations come from: the changed settings are made here from the target file's ``expect.settings``;
the revisions they should produce are computed with our own revision code, never read from a worker.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from pytest_slurmflox.base.run import command_line, quoted
from pytest_slurmflox.base.waits import job_timeout, poll_last
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.cluster.lifecycle import ReconcileError, Reconciler

from ._capability import requirement
from ._marks import Mark
from ._profile import read_profiles

pytestmark = [pytest.mark.acceptance, pytest.mark.destructive]


@pytest.fixture
def lifecycle(target, expect):
    """A reconciler for the target, and a guarantee that the original runtime is back afterwards."""
    require(target, "admin")
    require(target, "worker-owner")  # the barrier changes the cohort: a read-only NodeSet view is not enough
    log: list[str] = []
    rec = Reconciler(slurm=target.slurm, pool=target.pool, login=target.login, say=log.append, timeout=300)
    yield rec, log
    original = expect.settings
    try:
        rec.reconcile(original)
    finally:
        state = target.slurm.partition_state().state
        assert state == "UP", f"restoring the original runtime left the partition {state}; log: {log}"


def _changed(settings, **changes):
    return dataclasses.replace(settings, **changes)


class Watcher(threading.Thread):
    """Samples partition state and worker revisions every 100 ms on its own connection."""

    def __init__(self, target) -> None:
        super().__init__(daemon=True)
        runner = target.admin
        self.runner = dataclasses.replace(runner, observer=None) if dataclasses.is_dataclass(runner) else runner
        self.pool = target.pool
        self.partition = target.spec.partition
        self.samples: list[tuple[float, str, tuple[str, ...]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            res = self.runner.run(quoted("scontrol -o show partition %s", self.partition), timeout=10)
            state = next((t.split("=", 1)[1] for t in res.stdout.split() if t.startswith("State=")), "?")
            revisions = tuple(sorted({w.revision or "-" for w in self.pool.workers()}))
            self.samples.append((time.monotonic(), state, revisions))
            self.stop.wait(0.1)

    def violations(self) -> list[tuple[float, str, tuple[str, ...]]]:
        return [s for s in self.samples if s[1] == "UP" and len(s[2]) != 1]


@pytest.mark.T11R
def test_rerun_with_unchanged_revision_touches_nothing(lifecycle, target, expect):
    rec, log = lifecycle
    before = {n.name: n.raw.get("SlurmdStartTime") for n in target.slurm.nodes()}
    outcome = rec.reconcile(expect.settings)
    after = {n.name: n.raw.get("SlurmdStartTime") for n in target.slurm.nodes()}
    requirement(outcome.path == "fast-path" and outcome.steps == [], "an unchanged revision takes the fast path", log)
    requirement(before == after, "no worker was restarted", f"before {before}\nafter {after}")


@pytest.mark.T11R
def test_incomplete_maintenance_is_recovered(lifecycle, target, expect, workers):
    rec, log = lifecycle
    target.slurm.set_partition("DOWN")
    target.slurm.drain(workers, reason="simulated interrupted maintenance")
    outcome = rec.reconcile(expect.settings)
    requirement(outcome.path == "recovery", "a DOWN partition at the same revision is a recovery", log)
    requirement(target.slurm.partition_state().state == "UP", "recovery reopens the partition", log)
    states = {n.name: n.state for n in target.slurm.nodes() if n.name in workers}
    requirement(all(n.usable for n in target.slurm.nodes() if n.name in workers), "every worker is usable", states)


@pytest.mark.T11U
def test_live_update_moves_the_whole_cohort(lifecycle, target, expect, submit, workers):
    rec, log = lifecycle
    new_policy = "append" if expect.settings.worker_path_precedence == "prepend" else "prepend"
    new = _changed(expect.settings, worker_path_precedence=new_policy)
    # --exclusive: the blocker holds a whole worker, so the queued job really cannot start before the barrier (with
    # one of a worker's CPUs it could, and did: it then ran on the old revision before the partition closed)
    blocker = submit.sbatch("#!/bin/bash\nsleep 4\n", "-N1", "--exclusive", suffix="running")
    submit.slurm.wait([blocker], until=frozenset({"RUNNING"}), timeout=job_timeout())
    watcher = Watcher(target)
    watcher.start()
    try:
        mark = Mark.new()  # a site prolog or banner may print into the output: only our marked lines count
        profile = "/run/flox-task-profile/current"
        queued = submit.sbatch(
            "#!/bin/bash\n" + mark.wrap(f"cat {profile}/path-precedence {profile}/revision") + "\n",
            f"-N{len(workers)}",  # needs the whole cohort: it cannot start while the blocker holds a worker
            suffix="queued",
        )
        pending = submit.slurm.jobs([queued])[queued]
        requirement(pending.state == "PENDING", "the job is queued when the update begins", str(pending))
        outcome = rec.reconcile(new)
    finally:
        watcher.stop.set()
        watcher.join(timeout=10)
    requirement(outcome.path == "update", "a changed revision runs the maintenance barrier", log)
    states = submit.wait(blocker, queued, timeout=job_timeout(4, stages=2))  # blocker, then queued
    requirement(
        states[blocker].state == "COMPLETED", "the job running before the barrier finished naturally", str(states)
    )
    requirement(
        states[queued].state == "COMPLETED", "the job queued before the update ran after reopening", str(states)
    )
    out = mark.lines(submit.output(queued))
    requirement(out == [new_policy, outcome.revision], "it ran on a worker of the new revision", out, log)
    requirement(len(watcher.samples) > 20, "the watcher sampled throughout", f"{len(watcher.samples)} samples")
    requirement(
        not watcher.violations(),
        "the partition was never UP while workers disagreed",
        *map(str, watcher.violations()[:5]),
    )
    down_seen = [s for s in watcher.samples if s[1] != "UP"]
    requirement(bool(down_seen), "the watcher saw the partition closed during the barrier", str(watcher.samples[:3]))


@pytest.mark.T11C
def test_cpu_revision_readvertises_capacity_without_stale_records(lifecycle, target, expect, workers, submit):
    rec, log = lifecycle
    cpus = expect.settings.worker_cpus
    new_cpus = cpus - 1 if cpus > 1 else cpus + 1
    outcome = rec.reconcile(_changed(expect.settings, worker_cpus=new_cpus))
    nodes = {n.name: n for n in target.slurm.nodes()}
    requirement(
        all(nodes[w].cpus == new_cpus for w in workers if w in nodes) and set(workers) <= set(nodes),
        f"every worker advertises CPUs={new_cpus}",
        {k: (v.cpus, v.state) for k, v in nodes.items()},
        log,
    )
    stale = [n for n in nodes.values() if "INVALID" in n.state or "differ" in n.reason.lower()]
    requirement(not stale, "no stale node record remains", *map(str, stale))
    mark = Mark.new()
    res = submit.srun(f"-N1 -n1 -c{new_cpus}", "bash -c " + quoted("%s", mark.echo("$SLURM_CPUS_ON_NODE")))
    requirement(
        res.ok and mark.lines(res.stdout) == [str(new_cpus)],
        "a job gets the new capacity",
        res,
    )
    print(f"T11C: CPUs {cpus} -> {new_cpus}; stale records repaired by the barrier: {outcome.repaired or 'none'}")


@pytest.mark.T11F
def test_failed_revision_stays_unavailable_and_going_back_restores(lifecycle, target, expect, cohort_hosts):
    rec, log = lifecycle
    broken_env = "local/broken" if target.spec.substrate == "local" else "slurmflox-invalid/does-not-exist"
    broken = _changed(expect.settings, worker_flox_env=broken_env, worker_flox_generation=1)
    rec.timeout = 60
    with pytest.raises(ReconcileError) as failure:
        rec.reconcile(broken)
    requirement(
        failure.value.step == "wait-ready",
        "the update fails where an unrealizable runtime must stop it: no worker of it becomes ready (wait-ready), "
        f"not at {failure.value.step}",
        str(failure.value),
        log,
    )
    state = target.slurm.partition_state().state
    requirement(
        state == "DOWN",
        f"after the failed update ({failure.value.step}) the partition stays DOWN",
        str(failure.value),
        log,
    )
    rec.timeout = 300
    outcome = rec.reconcile(expect.settings)
    requirement(
        outcome.revision == expect.revision and target.slurm.partition_state().state == "UP",
        "an update back to the good revision restores service",
        log,
    )
    profiles, res = read_profiles(target, cohort_hosts)
    requirement(
        all(f.get("revision") == [expect.revision] for f in profiles.values()),
        "every worker runs the good revision again",
        res,
    )


@pytest.mark.T11F
def test_broken_task_profile_fails_closed_and_the_worker_serves_again(target, submit, workers):
    """Break the task profile on one worker (as root, through Slurm): a user's step there must not start and the
    user must see the fail-closed message; the owner restarting that worker must bring it back into service."""
    require(target, "admin")
    require(target, "worker-pool")
    node = workers[-1]
    profile = "/run/flox-task-profile"
    broke = target.admin.run(
        command_line("srun", [*submit.placement, "-N1", "-n1", "-w", node, "--export=NONE", "/bin/mv"])
        + quoted(" %s/current %s/current.sfx-broken", profile, profile),
        timeout=120,
    )
    requirement(broke.ok, f"root breaks {node}'s task profile", broke)
    try:
        res = submit.srun(f"-N1 -n1 -w {node}", "/bin/echo task-started")
        requirement(
            "task-started" not in res.stdout,
            f"a step on {node} does not start without a valid task profile (fail closed)",
            res,
        )
        requirement(
            "slurmflox: task profile invalid" in res.stdout + res.stderr,
            "the user is told why: the TaskProlog's fail-closed message",
            res,
        )
    finally:
        target.pool.restart(node)
    again = poll_last(
        lambda: submit.srun(f"-N1 -n1 -w {node} --immediate=30", "/bin/echo task-started", timeout=job_timeout(30)),
        lambda res: res.ok and "task-started" in res.stdout,
        what=f"{node} serving steps again after its restart",
        timeout=120,
        interval=2,
    )
    requirement(again.ok and "task-started" in again.stdout, f"after the owner restarts {node}, it serves again", again)
