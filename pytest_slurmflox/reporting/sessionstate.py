"""The session state every hook reads: what the plugin holds for one pytest session, in ``config.stash``.

Nothing is kept in module globals, so several pytest sessions in one process (pytester) never see each other's
state. The option table that fills it is options.py's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..model.evidence import EvidenceLog
from ..model.quarantine import Outcome, Retest
from ..model.runrecord import RunRecords, new_start
from ..model.settings import Resolved
from ..model.target import TargetSpec
from ..model.workdir import Workdir
from .outcome import Deselected, ExitRules


@dataclass
class SessionState:
    """Everything the plugin holds for one pytest session (kept in ``config.stash``)."""

    run_id: str
    workdir: Workdir
    substrate: str | None = None
    resolved: Resolved | None = None
    target_path: Path | None = None
    target_source: str = ""  #: how the target was found: --slurmflox-target, --slurmflox-up, recorded
    #: the target file read once in this process
    #: (:meth:`~pytest_slurmflox.harness.session.SlurmfloxSession.read_target`),
    #: or the objects ``up`` wrote it from; handed to the fixtures, the report writer and the sweep
    spec: TargetSpec | None = None
    spec_error: str = ""  #: why the target file could not be read (the fixtures turn it into a usage error)
    target: Any = None  #: target.Target once connected
    evidence: EvidenceLog = field(default_factory=EvidenceLog)
    started: float = field(default_factory=time.monotonic)
    deselected: Deselected = field(default_factory=Deselected)  #: what the selection left out, and why
    exit: ExitRules = field(default_factory=ExitRules)  #: applied once, by the session, at the very end
    #: this start of the run (runrecord.py): drawn by the controller or serial process, handed to xdist workers
    start: str = field(default_factory=new_start)
    #: when this run's provisioning (``--slurmflox-up``) began and ended, wall clock (the report's ``up`` band)
    up: tuple[float, float] | None = None
    #: what the run said on its progress lines (:func:`progress_printer`): the run's, never one check's
    notes: list[str] = field(default_factory=list)
    #: each worker's system as testinfra asks it (harness/sitehosts.py ``SYSTEM_COMMANDS``: node -> command ->
    #: [rc, stdout, stderr]), answered once per run by the cohort pre-flight or a worker Host's first step
    worker_systems: dict[str, dict[str, list]] = field(default_factory=dict)
    #: what quarantine and re-test did to workers (harness/quarantine.py), for the verdict and the evidence
    quarantine: Outcome = field(default_factory=Outcome)
    #: a re-test run's reservation and workers (``--slurmflox-retest``), decided at session start
    retest: Retest | None = None
    #: workers the cohort left out because this tool quarantined them and the target still counts (worker -> reason)
    held: dict[str, str] = field(default_factory=dict)

    @property
    def records(self) -> RunRecords:
        """Where this start of the run keeps what its processes share (runrecord.py)."""
        return RunRecords(self.run_id, self.start)


STATE = pytest.StashKey[SessionState]()


def session_state(config: pytest.Config) -> SessionState:
    return config.stash[STATE]


def progress_printer(config: pytest.Config) -> Any:
    """One timestamped line per step of long work. It goes to pytest's terminal outside any check's captured output
    (a line said while a session fixture is set up for the first check that needs it is the run's, not that
    check's: it must not land in that check's row of the report) and into the run's notes
    (:attr:`SessionState.notes`; an xdist worker's terminal is nobody's, so its notes go to the controller)."""
    state = session_state(config)
    writer = config.get_terminal_writer()
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(message: str) -> None:
        line = f"[slurmflox {time.monotonic() - state.started:7.1f}s] {message}"
        state.notes.append(line)
        main = threading.current_thread() is threading.main_thread()  # capture is switched on the main thread only
        with capture.global_and_fixture_disabled() if capture is not None and main else contextlib.nullcontext():
            writer.line(line)
            writer.flush()

    return say
