"""Where a wait's status lines go: the terminal of the process that owns the run, and the report's run notes.

Why: a wait of minutes (a worker another user's job holds, a job waiting out its time limit, the node image's
build) that prints nothing looks like a hang, with or without ``-q``. Every wait says what it waits for through
the ``logging`` logger :data:`~pytest_slurmflox.base.waits.WAIT_LOGGER` (waits.Status); this plugin object is that
logger's handler for one pytest process, from session start to session end:

- in the process that owns the run (a serial run, or the xdist controller) a line goes to pytest's terminal at once,
  whatever the verbosity, and into :attr:`SessionState.notes` with the time of day it was said
  (:func:`~pytest_slurmflox.reporting.sessionstate.progress_printer`);
- an xdist worker's terminal is nobody's, and its output reaches the controller only when the worker ends, so a
  worker appends each line to the run's wait log (:data:`LOG_NAME` in the records of this start of the run,
  ``RunRecords.folder``, one ``O_APPEND`` write per line), which the controller tails every :data:`TAIL_EVERY`
  seconds from a thread of its own and says as its own lines, marked with the worker's id.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ..base.waits import WAIT_LOGGER
from ..reporting.sessionstate import SessionState, progress_printer

#: The run's wait log, in the records of this start of the run (shared by its processes on this host).
LOG_NAME = "waits.log"
#: Seconds between two looks of the controller at the wait log.
TAIL_EVERY = 1.0


def clock() -> str:
    """The time of day a line was said, as the report's run notes show it (UTC)."""
    return time.strftime("%H:%M:%SZ", time.gmtime())


class _Handler(logging.Handler):
    """Hands each record's message, with the time it was said, to ``sink``."""

    def __init__(self, sink: Any) -> None:
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sink(record.getMessage())
        except Exception:  # a status line must never break the wait it describes
            self.handleError(record)


def append_line(log: Path, line: str) -> None:
    """One line appended to ``log`` in one write (O_APPEND: lines of several processes never interleave)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
    finally:
        os.close(fd)


class Tail:
    """The lines appended to ``log`` since the last :meth:`read` (only whole lines; the file may not exist yet)."""

    def __init__(self, log: Path) -> None:
        self.log, self.offset = log, 0

    def read(self) -> list[str]:
        try:
            with self.log.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode(errors="replace").splitlines()


class WaitNotes:
    """The wait logger's handler for one pytest process (see the module docstring)."""

    def __init__(self, config: pytest.Config, state: SessionState) -> None:
        self.config, self.state = config, state
        self.worker: str | None = (getattr(config, "workerinput", None) or {}).get("workerid")
        self.handler: _Handler | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.tail: Tail | None = None

    @property
    def log(self) -> Path:
        return self.state.records.folder / LOG_NAME

    @pytest.hookimpl(trylast=True)  # after the session's own start removed other starts' records (runrecord.begin)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.worker is not None:
            log = self.log
            sink = lambda message: append_line(log, f"{clock()} {self.worker}: {message}")  # noqa: E731
        else:
            sink = lambda message: self._say(f"{clock()} {message}")  # noqa: E731
            self.tail = Tail(self.log)
            self.thread = threading.Thread(target=self._follow, name="slurmflox-wait-notes", daemon=True)
            self.thread.start()
        self.handler = _Handler(sink)
        logger = logging.getLogger(WAIT_LOGGER)
        logger.setLevel(logging.INFO)
        logger.addHandler(self.handler)

    def _follow(self) -> None:
        """The controller's thread: say the workers' lines as they come."""
        while not self.stop.wait(TAIL_EVERY):
            self._drain()

    def _say(self, line: str) -> None:
        """A line of its own on the terminal (after the progress dots of ``-q``) and in the run's notes."""
        writer = self.config.get_terminal_writer()
        if writer.width_of_current_line:
            writer.line()
        progress_printer(self.config)(line)

    def _drain(self) -> None:
        if self.tail is None:
            return
        for line in self.tail.read():
            self._say(line)

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # before the report writer reads the notes
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
            self._drain()  # what the workers said after the thread's last look
        if self.handler is not None:
            logger = logging.getLogger(WAIT_LOGGER)
            logger.removeHandler(self.handler)
            if not logger.handlers:  # a session around this one (pytester in-process) keeps hearing its waits
                logger.setLevel(logging.NOTSET)
            self.handler = None
        return (yield)
