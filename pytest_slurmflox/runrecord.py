"""What a run's processes share: small JSON records under the run id, written and read in turn under a lock.

Why: under pytest-xdist a run is several processes on this host (popen workers and their controller) with one run
id. Some work belongs to the run, not to a process: the early jobs (early.py) are submitted once, and the cohort
pre-flight (suites/conftest.py) is decided once. The first process to need a record computes it while holding the
record's lock; every other process waits on that lock and reads what the first one decided, so all of them judge
against the same cohort and the cluster sees one pre-flight step, not one per process. The controller (or the
serial process) removes the run's records at session end, after xdist tore its workers down (:func:`forget`); a
worker that outlived an interrupted controller removes them itself (:func:`orphaned`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["forget", "locked", "once_per_run", "orphaned", "record_path"]


def _folder(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"slurmflox-run-{run_id}"


def record_path(run_id: str, name: str) -> Path:
    """Where the run's processes keep the record ``name`` (``<tmp>/slurmflox-run-<run id>/<name>.job``)."""
    return _folder(run_id) / f"{name}.job"


@contextlib.contextmanager
def locked(record: Path) -> Iterator[None]:
    """Hold ``record``'s lock (a sibling ``.lock`` file, flock: released when the process dies, too)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    with record.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def once_per_run(run_id: str, name: str, compute: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The run's record ``name``: computed here (``compute()``, under the lock) if no process of the run has yet,
    else read. Returns (record, computed here). An exception from ``compute`` records nothing: the next process
    computes again (and meets the same cause itself)."""
    record = record_path(run_id, name)
    with locked(record):
        if record.exists():
            return json.loads(record.read_text()), False
        value = compute()
        record.write_text(json.dumps(value))
        return value, True


def forget(run_id: str) -> None:
    """Remove the run's records (session end of the process that owns the run: serial, or the xdist controller)."""
    folder = _folder(run_id)
    for path in folder.glob("*"):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


def orphaned(owner_pid: object) -> bool:
    """Whether this process (an xdist worker) outlived the process that owns the run, its parent: the kernel gives
    an orphan another parent the moment its parent exits. An interrupted controller (SIGTERM) exits while its
    workers still finish their check and may write records after it removed them."""
    return isinstance(owner_pid, int) and os.getppid() != owner_pid
