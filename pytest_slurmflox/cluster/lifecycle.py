"""Reconcile a worker cohort to a runtime revision without Slurm ever admitting work onto a mixed cohort.

Written once against :class:`~pytest_slurmflox.model.pool.WorkerPool` and
:class:`~pytest_slurmflox.cluster.slurm.SlurmClient`,
so the same code drives a Slinky NodeSet and the local substrate's workers.

Decision (made only on evidence; unknown controller or partition state is an error, never health):

    desired revision unchanged, partition UP    -> fast path: nothing is touched
    desired revision unchanged, partition DOWN  -> recovery: an earlier cycle did not finish, or a first deploy
    desired revision or worker count changed    -> the maintenance barrier

The barrier's steps run in this order (names are what progress lines and ``on_step`` see). Once it has begun,
any failure leaves the partition DOWN and names the step; a later run with the same desired revision finds the
partition DOWN and completes the cycle (recovery), so an interruption can never reopen an unvalidated cohort.
The chaos tests interrupt it from outside (they watch the progress lines and SIGKILL the process); production
code carries no hook that kills itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.run import Runner
from ..base.waits import WaitTimedOut, poll, poll_missing
from ..model.pool import WorkerPool
from ..model.settings import Settings
from .slurm import NodeState, SlurmClient, SlurmError

STEPS = (
    "partition-down",
    "drain",
    "wait-running",
    "apply",
    "wait-ready",
    "verify-workers",
    "verify-profiles",
    "repair-stale",
    "wait-registered",
    "resume",
    "verify-usable",
    "reopen",
)
#: Node state flags that mean "the controller's record of this node is not usable as it stands".
STALE_FLAGS = frozenset({"INVALID_REG", "INVALID"})
#: Our drain reason begins so. It must NOT begin with the Slinky operator's prefix ``slurm-operator: ``: the
#: operator undrains any node whose reason is empty or carries that prefix (slurm-operator v1.2.1
#: internal/controller/nodeset/slurmcontrol/slurmcontrol.go ``IsNodeReasonOurs``, used by nodeset_sync.go
#: ``syncCordon``), and leaves every other reason alone ("If Slurm node was externally set into a state, preserve it").
DRAIN_REASON = "slurmflox maintenance"


class ReconcileError(RuntimeError):
    """Reconciliation failed. ``step`` names where; the partition is left DOWN if the barrier had begun."""

    def __init__(self, step: str, message: str) -> None:
        self.step = step
        super().__init__(f"{step}: {message}")


@dataclass
class Outcome:
    path: str  #: fast-path | recovery | update
    revision: str
    steps: list[tuple[str, float]] = field(default_factory=list)  #: (step, seconds)
    repaired: list[str] = field(default_factory=list)  #: stale node records that were deleted


@dataclass
class Reconciler:
    slurm: SlurmClient
    pool: WorkerPool
    login: Runner | None = None  #: the user's login endpoint, to prove it reaches Slurm at the end
    say: Callable[[str], None] = print
    timeout: float = 600.0  #: per waiting step
    poll: float = 0.5

    def reconcile(self, settings: Settings) -> Outcome:
        t0 = time.monotonic()
        try:
            self.slurm.ping()
            partition = self.slurm.partition_state()
        except SlurmError as exc:
            raise ReconcileError("controller", f"cannot prove the controller's state: {exc}") from None
        wanted = self.pool.revision_for(settings)
        path = self._decide(settings, wanted, partition.name, partition.state.upper())
        if path == "fast-path":
            return Outcome("fast-path", wanted)
        outcome = Outcome(path, wanted)
        for number, step in enumerate(STEPS, 1):
            self.say(f"reconcile: step {step} begins")
            started = time.monotonic()
            try:
                getattr(self, "_" + step.replace("-", "_"))(settings, wanted, outcome)
            except ReconcileError:
                raise
            except Exception as exc:
                raise ReconcileError(step, f"{exc} (partition left DOWN)") from exc
            took = time.monotonic() - started
            outcome.steps.append((step, took))
            self.say(
                f"reconcile [{number:2}/{len(STEPS)}] {step:16} done in {took:5.1f}s "
                f"(total {time.monotonic() - t0:5.1f}s)"
            )
        return outcome

    def _decide(self, settings: Settings, wanted: str, partition: str, state: str) -> str:
        """fast-path, recovery or update (see the module docstring); a changed COMPUTE_REPLICAS is an update too:
        it is not in the revision (REFERENCE-DESIGN), but only the barrier's apply changes the cohort."""
        current = self.pool.desired_revision()
        count, want = self.pool.desired_count() if current is not None else None, settings.compute_replicas
        if current == wanted and count == want and state == "UP":
            self.say(f"reconcile: revision {wanted} unchanged and partition {partition} UP: nothing to do")
            return "fast-path"
        if current == wanted and count == want and state in ("DOWN", "DRAIN", "INACTIVE"):
            self.say(
                f"reconcile: partition {partition} is {state} at revision {wanted}: completing the "
                "interrupted maintenance cycle (or verifying a first deployment)"
            )
            return "recovery"
        if state in ("UP", "DOWN", "DRAIN", "INACTIVE"):
            change = f"runtime revision {current} -> {wanted}" if current != wanted else f"workers {count} -> {want}"
            self.say(f"reconcile: {change}: whole-cohort maintenance barrier")
            return "update"
        raise ReconcileError("controller", f"partition {partition} reports unknown state {state!r}")

    # -- helpers -----------------------------------------------------------------------------------
    def _cohort_nodes(self) -> list[NodeState]:
        names = {w.name for w in self.pool.workers()}
        return [n for n in self.slurm.nodes() if n.name in names]

    def _wait(self, what: str, check: Callable[[], str | None]) -> None:
        """Poll ``check`` (None = done, else what is still missing) until done or timeout."""
        try:
            poll_missing(check, what=what, timeout=self.timeout, interval=self.poll)
        except WaitTimedOut as exc:
            raise ReconcileError(what, f"timed out after {self.timeout:.0f}s: {exc.last}") from None

    # -- the steps ---------------------------------------------------------------------------------
    def _partition_down(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        self.slurm.set_partition("DOWN")

    def _drain(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        names = [n.name for n in self._cohort_nodes() if not n.flags & STALE_FLAGS]
        self.slurm.drain(names, reason=f"{DRAIN_REASON} to {wanted[:19]}")

    def _hold_drain(self, wanted: str) -> None:
        """Drain again every cohort node whose drain is not ours any more.

        A Slinky rollout replaces it: the slurmd preStop hook runs ``scontrol update state=down
        reason='slurm-operator: Pod is terminating'`` (slurm-operator v1.2.1 internal/builder/workerbuilder/
        worker_app.go), which overwrites our reason with one the operator believes is its own, so its syncCordon
        undrains the node once the new pod is up (slurmcontrol.go ``MakeNodeUndrain``: state=UNDRAIN); a record
        deleted by repair-stale registers anew, not drained at all. Called while waiting for the new cohort and for
        its registration, so from drain to resume no node of the cohort stays undrained under our barrier.
        """
        lost = [
            n.name
            for n in self._cohort_nodes()
            if not n.flags & STALE_FLAGS and not ("DRAIN" in n.flags and n.reason.startswith(DRAIN_REASON))
        ]
        if lost:
            self.say(f"reconcile: draining {', '.join(lost)} again (the rollout replaced our drain)")
            self.slurm.drain(lost, reason=f"{DRAIN_REASON} to {wanted[:19]}")

    def _wait_running(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        def running() -> str | None:
            jobs = self.slurm.active_jobs()
            return f"jobs still running: {' '.join(jobs)}" if jobs else None

        self._wait("wait-running", running)

    def _apply(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        applied = self.pool.apply(settings)
        if applied != wanted:
            raise ReconcileError("apply", f"the owner applied {applied}, not {wanted}")

    def _wait_ready(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        count = self.pool.desired_count()

        def ready() -> str | None:
            self._hold_drain(wanted)
            workers = self.pool.workers()
            good = [w for w in workers if w.ready and w.revision == wanted]
            if len(good) == count and len(workers) == count:
                return None
            return f"{len(good)}/{count} workers updated and ready: " + ", ".join(
                f"{w.name}(ready={w.ready}, rev={(w.revision or '-')[:19]})" for w in workers
            )

        self._wait("wait-ready", ready)

    def _verify_workers(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        for w in self.pool.workers():
            if w.environment != settings.worker_flox_ref or w.revision != wanted:
                raise ReconcileError(
                    "verify-workers",
                    f"{w.name} carries {w.environment} / {w.revision}, not {settings.worker_flox_ref} / {wanted}",
                )

    def _verify_profiles(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        for w in self.pool.workers():
            got = self.pool.profile_revision(w.name)
            if got != wanted:
                raise ReconcileError("verify-profiles", f"{w.name}'s task profile reports {got}, not {wanted}")

    def _stale(self, settings: Settings) -> list[NodeState]:
        """Records the controller keeps for a worker that no longer match it (CoreSpec/CPU/memory changed)."""
        return [
            n
            for n in self._cohort_nodes()
            if n.flags & STALE_FLAGS
            or "differ" in n.reason.lower()
            or n.cpus != settings.worker_cpus
            or n.real_memory != settings.worker_mem_mb
        ]

    def _repair(self, node: NodeState, outcome: Outcome) -> None:
        self.say(
            f"reconcile: stale node record {node.name} ({node.state}, CPUs={node.cpus}, "
            f"RealMemory={node.real_memory}, reason={node.reason!r}): deleting it, the worker registers again"
        )
        res = self.slurm.delete_node(node.name)
        if not res.ok and "Invalid node name" not in res.stderr:
            raise ReconcileError("repair-stale", res.describe())
        self.pool.restart(node.name)
        outcome.repaired.append(node.name)

    def _repair_stale(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        """Let registrations settle (each worker either matches its record or is stale), then repair."""
        expected = {w.name for w in self.pool.workers()}

        def settled() -> bool | None:
            nodes = {n.name: n for n in self._cohort_nodes()}
            stale = {n.name for n in self._stale(settings)}
            done = set(nodes) == expected and all(
                name in stale or ("*" not in nodes[name].state and "NOT_RESPONDING" not in nodes[name].flags)
                for name in expected
            )
            return True if done else None

        with contextlib.suppress(WaitTimedOut):  # unsettled after 15 s: repair what is stale by then
            poll(settled, what="registrations to settle", timeout=15, interval=self.poll)
        for node in self._stale(settings):
            self._repair(node, outcome)

    def _wait_registered(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        expected = {w.name for w in self.pool.workers()}

        def registered() -> str | None:
            for node in self._stale(settings):
                if outcome.repaired.count(node.name) < 3:  # a late stale registration is repaired too
                    self._repair(node, outcome)
            self._hold_drain(wanted)
            nodes = {n.name: n for n in self.slurm.nodes()}
            bad = []
            for name in sorted(expected):
                record = nodes.get(name)
                if record is None:
                    bad.append(f"{name}: not registered")
                elif record.flags & STALE_FLAGS or "NOT_RESPONDING" in record.flags or "*" in record.state:
                    bad.append(f"{name}: {record.state}")
                elif record.cpus != settings.worker_cpus or record.real_memory != settings.worker_mem_mb:
                    bad.append(f"{name}: CPUs={record.cpus} RealMemory={record.real_memory}")
            return "; ".join(bad) or None

        self._wait("wait-registered", registered)

    def _resume(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        names = [n.name for n in self._cohort_nodes() if n.flags & {"DRAIN", "DRAINED", "DRAINING", "DOWN"}]
        self.slurm.resume(names)

    def _verify_usable(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        def usable() -> str | None:
            nodes = self._cohort_nodes()
            bad = [f"{n.name}: {n.state}" for n in nodes if not n.usable]
            if len(nodes) != self.pool.desired_count():
                bad.append(f"{len(nodes)}/{self.pool.desired_count()} registered")
            return "; ".join(bad) or None

        self._wait("verify-usable", usable)
        if self.login is not None:
            try:
                SlurmClient(user=self.login, partition=self.slurm.partition).partition_nodes()
            except SlurmError as exc:
                raise ReconcileError("verify-usable", f"the login endpoint cannot reach Slurm: {exc}") from None

    def _reopen(self, settings: Settings, wanted: str, outcome: Outcome) -> None:
        self.slurm.set_partition("UP")
