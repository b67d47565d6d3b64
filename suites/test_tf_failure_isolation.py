"""TF: a worker whose runtime cannot be realized never becomes Slurm capacity.

Requirement: when the pinned environment cannot be realized, that worker never starts slurmd and never appears in
Slurm, while the rest of the cohort keeps working. On the local substrate a throwaway worker is started with an
environment that fails to realize; on Kubernetes this would roll a broken NodeSet and is left to the destructive
lifecycle group T11F. A second throwaway worker realizes, but its activation fails: its node init (the real one)
must fail before slurmd, so it never registers either.

Where the expectations come from: the broken definitions are the local runtime provider's ``broken/1`` (declares
``bin/broken-tool`` and does not ship it) and ``failhook/1`` (activation hook exits non-zero), so the reason each
worker must report is known here; the healthy cohort is the ``workers`` fixture (Slurm cross-checked with the
owner).

Both throwaway workers are started with the run (``early(EarlyWorker(...))``, pytest_slurmflox/harness/throwaway.py):
their time out of Slurm runs beside the other checks, and each check, run last, judges a worker that has been out of
Slurm since then, waiting only for what is left of :data:`WINDOW` (the whole window when it started its own).
"""

from __future__ import annotations

import contextlib
import time

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.base.waits import WaitTimedOut, poll
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.harness.early import SINCE, UNTIL
from pytest_slurmflox.harness.throwaway import EarlyWorker, Started, claim_worker
from pytest_slurmflox.reporting.sessionstate import session_state

from ._capability import requirement
from ._marks import Mark, every_worker_step

pytestmark = [pytest.mark.acceptance, pytest.mark.TF]

#: A worker whose runtime cannot be realized (the provider's ``broken/1``) and one whose activation fails
#: (``failhook/1``).
BROKEN = EarlyWorker("tfprobe", "local/broken:1")
FAILHOOK = EarlyWorker("tfhook", "local/failhook:1")


#: How long a throwaway worker must stay out of sinfo, from its start (a slurmd that started registers within a
#: second or two on the local substrate, its dynamic node record stays listed after).
WINDOW = 8.0


def _never_registers(target, worker: EarlyWorker, since: float, window: float = WINDOW) -> None:
    """FAILs the moment the worker appears in sinfo; passes when it stayed out for ``window`` seconds since
    ``since`` (epoch seconds: when it was started, maybe by another process of the run)."""

    def absent() -> None:
        res = target.login.run("sinfo -h -N -o %N")
        requirement(
            worker.name not in res.stdout.split(), f"{worker.name} (runtime {worker.ref}) never appears in sinfo", res
        )

    left = max(0.0, window - (time.time() - since))
    with contextlib.suppress(WaitTimedOut):  # the time is up with the worker never seen: the pass
        poll(absent, what=f"{worker.name} kept out of sinfo", timeout=left, interval=1)


def _claimed(request, target, worker: EarlyWorker) -> Started:
    """The run's early start of ``worker`` (or one now). The check's span starts when the worker did; when the window
    closed before the check, ordered last, got to look, the span ends with the window (as an early job's ends when
    Slurm ended it, pytest_slurmflox/harness/early.py): it is what the check would take alone, not the run's length."""
    started = claim_worker(target.pool, session_state(request.config).records, worker)
    request.node.user_properties.append((SINCE, started.at))
    if time.time() >= started.at + WINDOW:
        request.node.user_properties.append((UNTIL, started.at + WINDOW))
    return started


@pytest.mark.early(BROKEN)
def test_unrealizable_worker_never_registers(request, target, submit, workers):
    require(target, "isolated-worker")
    try:
        started = _claimed(request, target, BROKEN)
        # one look now: a worker listed already FAILs at once
        _never_registers(target, BROKEN, started.at, window=0)
        phase = target.pool.phase(BROKEN.name)
        requirement(
            phase.startswith("failed: realization") and "broken-tool" in phase,
            f"{BROKEN.name} failed for the right reason: {BROKEN.ref} cannot be realized (bin/broken-tool is missing)",
            f"phase: {phase}",
            f"isolated worker outcome: {started.outcome}",
        )
        mark = Mark.new()
        ok = every_worker_step(submit, workers, "", "bash -c " + quoted("%s", mark.wrap("hostname")), mark)
        requirement(
            ok.ok and sorted(set(mark.lines(ok.stdout))) == sorted(workers),
            "the rest of the cohort keeps working",
            ok,
            f"isolated worker outcome: {started.outcome}",
        )
        # what is left of the window (none when it started with the run) runs beside the cohort's step: a node that
        # registered meanwhile is still listed at the next look
        _never_registers(target, BROKEN, started.at)
    finally:
        target.pool.stop_isolated_worker(BROKEN.name)


@pytest.mark.early(FAILHOOK)
def test_worker_whose_initializer_fails_never_starts_slurmd(request, target, workers):
    require(target, "isolated-worker")
    try:
        started = _claimed(request, target, FAILHOOK)
        info = next((w for w in target.pool.workers() if w.name == FAILHOOK.name), None)
        requirement(
            info is not None and not info.ready,
            f"{FAILHOOK.name} (runtime {FAILHOOK.ref}) is listed by its owner and not ready",
            str(info),
            f"isolated worker outcome: {started.outcome}",
        )
        phase = target.pool.phase(FAILHOOK.name)
        requirement(
            phase.startswith("failed: task-profile initializer failed"),
            f"{FAILHOOK.name}'s own node init stopped at the task-profile initializer, before slurmd",
            f"phase: {phase}",
        )
        _never_registers(target, FAILHOOK, started.at)
    finally:
        target.pool.stop_isolated_worker(FAILHOOK.name)
