"""SIGTERM ends a session the way Ctrl-C does, so its teardown still runs.

Why: a run is stopped by SIGTERM far more often than by Ctrl-C (a CI job's timeout, ``kill``, a batch system's
limit), and Python's default for SIGTERM ends the process at once: no fixture teardown cancels the run's jobs, no
session end sweeps the queue or removes the run's records in /tmp. Under pytest-xdist the signal usually reaches the
controller alone; it must then tear its workers down the way xdist does (execnet asks each to end, interrupts it
after 5 s, kills it after 10 more), and only after that sweep the run's jobs and remove its records, since a worker
still mid-check submits and records until it is gone. A controller killed outright left all of that to its orphaned
workers, which execnet ends with ``os._exit`` when their teardown takes longer than its grace (seen in CI on a
loaded host: a cohort record left in /tmp).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["terminate_as_interrupt"]


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread while inside; the previous handler is put back after.
    Outside the main thread (where Python delivers no signal) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
