"""What a run's processes share: small JSON records under the run id, written and read in turn under a lock.

Why: under pytest-xdist a run is several processes on this host (popen workers and their controller) with one run
id. Some work belongs to the run, not to a process: the early jobs (early.py) are submitted once, and the cohort
pre-flight (suites/conftest.py) is decided once. The first process to need a record computes it while holding the
record's lock; every other process waits on that lock and reads what the first one decided, so all of them judge
against the same cohort and the cluster sees one pre-flight step, not one per process. The controller (or the
serial process) removes the run's records at session end, after xdist tore its workers down (:func:`forget`); a
worker that outlived an interrupted controller removes them itself (:func:`orphaned`).

Records belong to one *start* of a run, not to its id: ``--slurmflox-run-id`` may be given again after a
run was killed (SIGKILL: no session end removed its records), and that run must judge only what it observed itself,
never the killed run's cohort verdict, task-profile reading or early jobs. So the controller (or the serial process)
draws a random start nonce when it starts (:func:`new_start`), hands it to its xdist workers with the run id
(``workerinput``, :func:`start_of`), and every record lives under ``<tmp>/slurmflox-run-<run id>/<start>/``
(:class:`RunRecords`): a record of another start is never read, and the controller removes every other start's
records of its run id before its first check (:func:`begin`). A process of the killed run that is still alive (an
orphaned xdist worker) writes under its own start, where nothing of the new run looks.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RunRecords",
    "begin",
    "forget",
    "locked",
    "new_start",
    "once_per_run",
    "orphaned",
    "record_path",
    "start_of",
]

#: A start nonce: what :func:`new_start` draws (checked again where it arrives from another process).
_START = re.compile(r"[0-9a-f]{16}")


def new_start() -> str:
    """A fresh start nonce for a run's controller (or serial process)."""
    return secrets.token_hex(8)


def start_of(workerinput: Mapping[str, Any] | None) -> str:
    """This process's start: the controller's (an xdist worker: ``workerinput`` is data from another process, so
    it is checked), else a fresh one."""
    given = (workerinput or {}).get("slurmflox_run_start")
    if given is None:
        return new_start()
    if not isinstance(given, str) or not _START.fullmatch(given):
        raise ValueError(f"run start from the xdist controller is not a start nonce: {given!r}")
    return given


@dataclass(frozen=True)
class RunRecords:
    """The records of one start of one run: ``<tmp>/slurmflox-run-<run id>/<start>/``."""

    run_id: str
    start: str

    @property
    def run_folder(self) -> Path:
        """Every start of this run id keeps its records below this folder."""
        return Path(tempfile.gettempdir()) / f"slurmflox-run-{self.run_id}"

    @property
    def folder(self) -> Path:
        return self.run_folder / self.start


def record_path(run: RunRecords, name: str) -> Path:
    """Where the run's processes keep the record ``name`` (``<run folder>/<start>/<name>.job``)."""
    return run.folder / f"{name}.job"


@contextlib.contextmanager
def locked(record: Path) -> Iterator[None]:
    """Hold ``record``'s lock (a sibling ``.lock`` file, flock: released when the process dies, too)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    with record.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def once_per_run(run: RunRecords, name: str, compute: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The run's record ``name``: computed here (``compute()``, under the lock) if no process of this start of the
    run has yet, else read. Returns (record, computed here). An exception from ``compute`` records nothing: the
    next process computes again (and meets the same cause itself)."""
    record = record_path(run, name)
    with locked(record):
        if record.exists():
            return json.loads(record.read_text()), False
        value = compute()
        record.write_text(json.dumps(value))
        return value, True


def begin(run: RunRecords) -> list[str]:
    """The controller's (or serial process's) first step on the run's records, before any worker starts: remove
    whatever another start of this run id left (a killed run's records, and files of the layout before starts);
    the names removed. This start's folder is made by the first record (:func:`locked`)."""
    removed = []
    if run.run_folder.is_dir():
        for path in run.run_folder.iterdir():
            if path.name == run.start:
                continue
            removed.append(path.name)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return removed


def forget(run: RunRecords) -> None:
    """Remove this start's records (session end of the process that owns the run: serial, or the xdist
    controller), and the run's folder when no other start's are left in it."""
    shutil.rmtree(run.folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        run.run_folder.rmdir()


def orphaned(owner_pid: object) -> bool:
    """Whether this process (an xdist worker) outlived the process that owns the run, its parent: the kernel gives
    an orphan another parent the moment its parent exits. An interrupted controller (SIGTERM) exits while its
    workers still finish their check and may write records after it removed them."""
    return isinstance(owner_pid, int) and os.getppid() != owner_pid
