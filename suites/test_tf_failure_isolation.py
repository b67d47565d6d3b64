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
"""

from __future__ import annotations

import contextlib
import time

import pytest

from pytest_slurmflox.gates import require
from pytest_slurmflox.waits import WaitTimedOut, poll

from ._capability import requirement
from ._marks import Mark, _q

pytestmark = [pytest.mark.acceptance, pytest.mark.TF]

BROKEN = "local/broken:1"
FAILHOOK = "local/failhook:1"


#: How long a throwaway worker must stay out of sinfo, from its start (a slurmd that started registers within a
#: second or two on the local substrate, its dynamic node record stays listed after).
WINDOW = 8.0


def _never_registers(target, name: str, ref: str, started: float, window: float = WINDOW) -> None:
    """FAILs the moment ``name`` appears in sinfo; passes when it stayed out for ``window`` seconds since
    ``started`` (monotonic: when the worker was started)."""

    def absent() -> None:
        res = target.login.run("sinfo -h -N -o %N")
        requirement(name not in res.stdout.split(), f"{name} (runtime {ref}) never appears in sinfo", res)

    left = max(0.0, window - (time.monotonic() - started))
    with contextlib.suppress(WaitTimedOut):  # the time is up with the worker never seen: the pass
        poll(absent, what=f"{name} kept out of sinfo", timeout=left, interval=1)


def test_unrealizable_worker_never_registers(target, submit, workers):
    require(target, "isolated-worker")
    name = "tfprobe"
    info = None
    try:
        started = time.monotonic()
        try:
            info = target.pool.start_isolated_worker(name, BROKEN)
        except Exception as exc:  # realization failure surfaces here on the local substrate
            info = exc
        # one look now: a worker listed already FAILs at once
        _never_registers(target, name, BROKEN, started, window=0)
        phase = target.pool.phase(name)
        requirement(
            phase.startswith("failed: realization") and "broken-tool" in phase,
            f"{name} failed for the right reason: {BROKEN} cannot be realized (bin/broken-tool is missing)",
            f"phase: {phase}",
            f"isolated worker outcome: {info!r}",
        )
        n = len(workers)
        mark = Mark.new()
        ok = submit.srun(
            f"-N{n} -n{n} --ntasks-per-node=1 -w {','.join(workers)}", "bash -c " + _q(mark.wrap("hostname"))
        )
        requirement(
            ok.ok and sorted(set(mark.lines(ok.stdout))) == sorted(workers),
            "the rest of the cohort keeps working",
            ok,
            f"isolated worker outcome: {info!r}",
        )
        # the window runs beside the cohort's step (#29: it was 8 s before the step): a node that registered
        # meanwhile is still listed at the next look
        _never_registers(target, name, BROKEN, started)
    finally:
        target.pool.stop_isolated_worker(name)


def test_worker_whose_initializer_fails_never_starts_slurmd(target, workers):
    require(target, "isolated-worker")
    name = "tfhook"
    try:
        started = time.monotonic()
        info = target.pool.start_isolated_worker(name, FAILHOOK)
        requirement(not info.ready, f"{name} (runtime {FAILHOOK}) is not ready", str(info))
        phase = target.pool.phase(name)
        requirement(
            phase.startswith("failed: task-profile initializer failed"),
            f"{name}'s own node init stopped at the task-profile initializer, before slurmd",
            f"phase: {phase}",
        )
        _never_registers(target, name, FAILHOOK, started)
    finally:
        target.pool.stop_isolated_worker(name)
