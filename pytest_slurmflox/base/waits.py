"""Timeouts derived from what a check waits for, never a blanket long timeout.

A wait on a Slurm job is bounded by what Slurm promises about that job: it starts within one pass of the main
scheduler once its resources are free, runs as long as its own script (or its ``--time`` limit) lets it, and ends
within a known span after that limit. A timeout is that sum, so a broken cluster FAILs as soon as Slurm has
demonstrably not done what it promises, and a loaded host still gets the slack Slurm itself allows.

Sources (slurm.conf(5), Slurm 24.11): ``sched_interval`` (default 60 s) is the longest gap between main scheduler
passes, which also run at every submit and job end; slurmctld checks time limits in its background loop about
every 30 s (``PERIODIC_TIMEOUT``) and gives a timed-out job ``KillWait`` (default 30 s) between SIGTERM and SIGKILL.

:func:`poll` is the one loop that waits for a condition on this host or a cluster: a timeout passed by name, a
message that says what was awaited (and what was still missing when it gave up). :func:`poll_last` is the same
loop for a check that judges what it saw with its own requirement, so its FAIL names what was wrong.

Every wait says what it waits for: once it has lasted :data:`FIRST_STATUS` seconds, a :class:`Status` line every
:data:`STATUS_EVERY` seconds at most (``waiting 42 s for jobs 17, 18 to end: 17=RUNNING/None``), through the
standard ``logging`` logger :data:`WAIT_LOGGER`. Whoever runs the wait decides where the lines go (the plugin sends
them to the terminal of the process that owns the run and to the report's run notes, harness/waitnotes.py); a wait
outside a run says them to nobody.
"""

from __future__ import annotations

import logging
import os
import select
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: One main-scheduler pass (``sched_interval``, default 60 s): a job whose resources are free starts within it; the
#: same span covers reporting its end (epilog, completion RPC, ``MessageTimeout`` 10 s) on a loaded host.
START_SLACK = 60.0

#: What Slurm may add after a time limit before the job is TIMEOUT: two sweeps of the 30 s time-limit check and a
#: ``KillWait`` of 30 s, doubled for a loaded host.
LIMIT_SLACK = 2 * (2 * 30.0 + 30.0)

#: Jobs of other checks that may hold the nodes while a concurrent run queues a job: each is a short job bounded by
#: :func:`job_timeout` with at most two stages, so queueing behind them costs at most that plus the job's own pass.
QUEUE_STAGES = 3

#: The logger every wait's status line goes to (INFO; its handler is the harness's, not this module's).
WAIT_LOGGER = "slurmflox.waits"
#: Seconds a wait lasts before it first says what it waits for.
FIRST_STATUS = 10.0
#: Seconds between two status lines of one wait at most, once it has begun to say them (under 30 s with the time a
#: look itself takes).
STATUS_EVERY = 25.0


class Status:
    """The status lines of one wait for ``what``: :meth:`tick` at every look says ``waiting N s for <what>[:
    <detail>]`` once the wait has lasted ``first`` seconds, and again whenever :data:`STATUS_EVERY` seconds have
    passed since the last line (a caller that looks less often than that says a line at every look)."""

    def __init__(self, what: str, *, first: float | None = None) -> None:
        self.what, self.first = what, FIRST_STATUS if first is None else first
        self.began = time.monotonic()
        self.said: float | None = None

    def tick(self, detail: str = "") -> bool:
        """Say the status line if it is due (returns whether it said one)."""
        now = time.monotonic()
        waited = now - self.began
        due = waited >= self.first if self.said is None else now >= self.said + STATUS_EVERY
        if due:
            self.said = now
            logging.getLogger(WAIT_LOGGER).info(
                "waiting %.0f s for %s%s", waited, self.what, f": {detail}" if detail else ""
            )
        return due


def job_timeout(runtime: float = 0.0, *, stages: int = 1) -> float:
    """A job (or ``stages`` jobs that start one after another: a dependency chain, an allocation and its step)
    whose scripts run ``runtime`` seconds in total: each stage may wait one scheduling pass."""
    if runtime < 0 or stages < 1:
        raise ValueError(f"job_timeout: runtime {runtime} must be >= 0 and stages {stages} >= 1")
    return runtime + stages * START_SLACK


def limit_timeout(limit_minutes: float) -> float:
    """A running job that outlives its ``--time`` limit of ``limit_minutes``: the limit plus Slurm's enforcement."""
    if limit_minutes <= 0:
        raise ValueError(f"limit_timeout: a time limit of {limit_minutes} minutes is no limit")
    return limit_minutes * 60.0 + LIMIT_SLACK


def queue_timeout() -> float:
    """A job reaching RUNNING in a concurrent run: its own pass plus the short jobs of other checks ahead of it."""
    return job_timeout(stages=QUEUE_STAGES)


class WaitTimedOut(TimeoutError):
    """A :func:`poll` that gave up: ``what`` was awaited for ``timeout`` seconds; ``last`` is what was still
    missing at the last look ("" when the probe does not say)."""

    def __init__(self, what: str, timeout: float, last: str = "") -> None:
        self.what, self.timeout, self.last = what, timeout, last
        super().__init__(f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last}" if last else ""))


def poll(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.1,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something other than None, and return that.
    ``probe`` may raise to stop at once (a process that died is no reason to wait on). After ``timeout`` seconds
    raises :class:`WaitTimedOut` naming ``what``; the probe is always called at least once. A wait that lasts says
    what it waits for (:class:`Status`), with ``detail()`` (what is still missing) when given."""
    deadline = time.monotonic() + timeout
    status = Status(what)
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimedOut(what, timeout)
        status.tick(detail() if detail is not None else "")
        time.sleep(interval)


def poll_missing(check: Callable[[], str | None], *, what: str, timeout: float, interval: float = 0.1) -> None:
    """:func:`poll` for a ``check`` that returns None when done, else what is still missing: the timeout's
    message ends with the last thing missing (``worker2 not registered``), not only with what was awaited."""
    missing = ["not checked"]

    def probe() -> bool | None:
        result = check()
        if result is None:
            return True
        missing[0] = result
        return None

    try:
        poll(probe, what=what, timeout=timeout, interval=interval, detail=lambda: missing[0])
    except WaitTimedOut:
        raise WaitTimedOut(what, timeout, missing[0]) from None


def poll_last(
    look: Callable[[], T], done: Callable[[T], bool], *, what: str, timeout: float, interval: float = 0.1
) -> T:
    """:func:`poll` for a check that judges the outcome itself: ``look`` every ``interval`` seconds until ``done``
    accepts a look, and return that look, or the last look once ``timeout`` has passed. The check's requirement then
    FAILs on what was last seen (sacct's row, the job's state), which says more than a bare timeout; ``look`` may
    raise to stop the wait at once (a requirement already broken). A look may be None (a job that is gone)."""
    last: list[T] = []

    def probe() -> tuple[T] | None:
        value = look()
        last[:] = [value]
        return (value,) if done(value) else None

    try:
        return poll(probe, what=what, timeout=timeout, interval=interval)[0]
    except WaitTimedOut:
        return last[0]


def lines_or_silence(fd: int, every: float) -> Iterator[str | None]:
    """The lines a process writes to ``fd`` until it closes it, and None each time ``every`` seconds pass without
    a line (so the reader can say what it waits for)."""
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], every)
        if not ready:
            yield None
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line.decode(errors="replace") + "\n"
    if pending:
        yield pending.decode(errors="replace")
