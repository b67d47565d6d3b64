"""A step that needs every worker waits for workers other jobs hold, within the run's budget; past it, NOT RUN.

Why here: every step that must reach every worker (the cohort pre-flight, the every-worker observations of
``_cohort.across``/``_marks.on_each``, T8's whole-worker request) goes through :func:`waiting_for_held`, so a busy
worker is waited for the same way everywhere. The wait is Slurm's own queue: the step is asked again with
``--immediate=<a slice of what is left of the budget>``, so it starts the moment its resources are free.
Whether to wait is decided by Slurm, never by the clock (pytest_slurmflox/model/busy.py): only a step whose allocation
was never granted (srun says it queued and was not given its nodes) waits, and only while a node it needs is held
by a job that is not the run's own, in a state that serves. A worker that is down, drained or not responding is
not waited for: the step's result goes back to its check, which FAILs naming it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import pytest

from pytest_slurmflox.base.waits import Status
from pytest_slurmflox.cluster.submit import Jobs
from pytest_slurmflox.model.busy import Look, look_command, parse_look, queued_job
from pytest_slurmflox.model.runrecord import RunRecords
from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX


class _Step(Protocol):
    """What a step's result shows (``_marks.Marked``): its output, and the lines that carry its mark."""

    stdout: str
    stderr: str
    exit_status: int

    @property
    def own(self) -> list[str]: ...


S = TypeVar("S", bound=_Step)
#: The run's record of when it began to wait for held workers (pytest_slurmflox/model/runrecord.py).
BUSY_RECORD = "busy-since"
#: Seconds of one wait in Slurm's queue between two looks at the nodes (a node that stops serving ends the wait);
#: each look says what the step waits for (waits.Status), so a line comes at least every 30 s with the look's time.
SLICE = 25
#: An ``--immediate`` a caller gave: the retry replaces it with what is left of the budget.
_IMMEDIATE = re.compile(r"\s*--immediate(?:=\S+)?")


class BusyPastBudget(pytest.skip.Exception):
    """NOT RUN: a worker a step needs was held by other jobs for the whole budget. A skip whose reason starts with
    :data:`~pytest_slurmflox.reporting.signoff.NOT_RUN_PREFIX` (the verdict's NOT RUN, never SKIP or FAIL); the message
    names
    each held worker, its state, and the jobs that hold it (id, user, name, expected end)."""

    def __init__(self, look: Look, budget: float, nodes: Sequence[str]) -> None:
        self.look = look
        super().__init__(
            f"{NOT_RUN_PREFIX}busy past the budget: {look.describe()}; a step that needs every worker "
            f"({', '.join(nodes)}) found it held past the run's budget of {budget:.0f} s of waiting "
            "(slurm.busy_timeout, --slurmflox-busy-timeout)"
        )


def look(jobs, nodes: Sequence[str]) -> Look:
    """One look at ``nodes``: their states and reasons, and the jobs not of this run that hold them."""
    res = jobs.login.run(look_command(jobs.partition, nodes), timeout=60)
    return parse_look(res.stdout, nodes, own_prefix=f"sfx-{jobs.run_id}-")


def _busy_since(run: RunRecords) -> float:
    """When the run began to wait for held workers (epoch seconds), one record its processes share: the budget is
    the run's, so once it ran out every later step that meets a held worker is NOT RUN at once, not after a budget
    of its own."""
    from pytest_slurmflox.model.runrecord import once_per_run

    return float(once_per_run(run, BUSY_RECORD, lambda: {"since": time.time()})[0]["since"])


def _busy_over(run: RunRecords) -> None:
    """The workers a step waited for are free: a later hold starts a budget of its own."""
    from pytest_slurmflox.model.runrecord import locked, record_path

    record = record_path(run, BUSY_RECORD)
    with locked(record):
        record.unlink(missing_ok=True)


def waiting_for_held(jobs, nodes: Sequence[str], attempt: Callable[[str, float], S], args: str, timeout: float) -> S:
    """``attempt(args, timeout)`` (one step on every node of ``nodes``), and while its allocation was not granted
    because other jobs hold a node it needs, ``attempt`` again with ``--immediate`` slices of what is left of the
    budget, looking at the nodes between slices: a node that stops serving meanwhile ends the wait at once. The
    budget runs from the run's first wait for a hold until a wait sees the nodes free (:func:`_busy_since`). Returns
    the step's result for its check to judge; raises :class:`BusyPastBudget` (NOT RUN) when the budget ran out
    with a node still held. ``jobs.busy_timeout`` None (a caller that is not a check) never waits."""
    # T10's admin step is no Jobs, and Jobs without the run's records cannot share its budget: neither waits
    budget = jobs.busy_timeout if isinstance(jobs, Jobs) and jobs.records is not None else None
    res, waited = attempt(args, timeout), False
    status = Status(f"a step on every worker ({', '.join(nodes)}) whose allocation queued", first=0)
    while budget is not None and not res.own:
        queued = queued_job(res.stdout + res.stderr)
        if queued is None:
            return res  # the step got its nodes: what it shows is its check's to judge
        seen = look(jobs, nodes)
        if seen.broken:
            return res
        if not seen.held:  # nobody else holds them: as asked once more if it waited (the holder just left)
            _busy_over(jobs.records)
            return attempt(args, timeout) if waited else res
        left = int(_busy_since(jobs.records) + budget - time.time())
        if left < 1:
            raise BusyPastBudget(seen, budget, nodes)
        status.tick(f"{seen.describe()}; {left} s left of the run's budget of {budget:.0f} s (job {queued} queued)")
        if res.exit_status == 124:  # the runner gave up on the client: its request may still be queued ahead
            jobs.slurm.cancel(queued)
        wait = min(left, SLICE)
        res, waited = attempt(f"{_IMMEDIATE.sub('', args)} --immediate={wait}", wait + timeout), True
    return res
