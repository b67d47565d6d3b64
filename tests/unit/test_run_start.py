"""Records belong to one start of a run (issue 40 item 4): a run id given again after a killed run judges only what
that start observed itself.

Real files and real processes: a process of the "killed" run is SIGKILLed while it holds a record's lock, and a
real pytest run is SIGKILLed (its whole process group: controller and xdist workers) after its checks recorded a
shared observation; the same run id is then run again and its evidence must hold only its own commands.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pytest_slurmflox.model.runrecord import (
    RunRecords,
    begin,
    forget,
    locked,
    new_start,
    once_per_run,
    record_path,
    start_of,
)


def _killed_run(run: RunRecords, ready) -> None:
    """A process of a run that is about to be killed: it records its cohort verdict and an early job, then holds
    the early-submission lock until SIGKILL."""
    once_per_run(run, "cohort", lambda: {"nodes": ["old-worker"], "failure": None})
    record_path(run, "T7-timelimit").write_text(json.dumps({"job": "41", "submitted": 1.0, "nonce": "old"}))
    with locked(record_path(run, "early-submission")):
        ready.set()
        time.sleep(600)


def test_a_killed_starts_records_are_never_read_and_go_when_its_run_id_starts_again():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    old, new = RunRecords(run_id, new_start()), RunRecords(run_id, new_start())
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    proc = context.Process(target=_killed_run, args=(old, ready))
    try:
        proc.start()
        assert ready.wait(20)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(20)
        assert record_path(old, "cohort").exists() and record_path(old, "T7-timelimit").exists()  # left behind
        assert begin(new) == [old.start]  # the new start's controller, before its workers
        assert not old.folder.exists()
        assert once_per_run(new, "cohort", lambda: {"nodes": ["worker1"], "failure": None}) == (
            {"nodes": ["worker1"], "failure": None},
            True,  # computed by this start, not read from the killed one
        )
        assert not record_path(new, "T7-timelimit").exists()  # no early job of the killed run to claim
        with locked(record_path(new, "early-submission")):  # the dead process's lock went with it
            pass
        # a process of the killed run still alive (an orphaned worker) writes under its own start: never read here
        once_per_run(old, "task-profiles", lambda: {"step": "old"})
        assert once_per_run(new, "task-profiles", lambda: {"step": "new"}) == ({"step": "new"}, True)
        forget(new)
        assert not new.folder.exists() and old.folder.exists()  # another start's are the next begin's to remove
        assert begin(RunRecords(run_id, new_start())) == [old.start]
    finally:
        if proc.is_alive():
            proc.kill()
        shutil.rmtree(old.run_folder, ignore_errors=True)


def test_a_start_from_the_controller_is_checked():
    mine = start_of(None)
    assert len(mine) == 16 and mine != start_of(None)
    assert start_of({"slurmflox_run_start": mine}) == mine  # an xdist worker takes its controller's
    for hostile in ("../../etc", "", "a" * 15, mine.upper(), 7):
        with pytest.raises(ValueError, match="not a start nonce"):
            start_of({"slurmflox_run_start": hostile})


CHECKS = """
import os
import time
from pathlib import Path

import pytest
from pytest_slurmflox.base.run import LocalRunner
from pytest_slurmflox.reporting.sessionstate import session_state
from pytest_slurmflox.suites._shared import observe_once

pytestmark = [pytest.mark.acceptance, pytest.mark.T3]


def observe(request):
    with open("observed.log", "a") as log:
        log.write(os.environ["SFX_RUN"] + "\\n")
    runner = LocalRunner(observer=session_state(request.config).evidence)
    return {"step": runner.run("echo observed-by-" + os.environ["SFX_RUN"])}


@pytest.mark.parametrize("i", range(2))
def test_judge(request, i):
    value = observe_once(request, "task-profiles", lambda: observe(request))
    assert value["step"].stdout.startswith("observed-by-")
    if os.environ.get("SFX_HANG"):
        Path(f"ready-{i}").write_text("recorded")
        time.sleep(600)
"""


def _pytest(cwd: Path, run_id: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "acceptance"]
    command += [f"--slurmflox-run-id={run_id}", f"--slurmflox-reports={cwd / 'reports'}", *args]
    return subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_same_run_id_after_sigkill_judges_only_its_own_commands(pytester: pytest.Pytester, tmp_path, workers):
    pytester.makepyfile(test_checks=CHECKS)
    run_id = f"reused-{uuid.uuid4().hex[:6]}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "SLURMFLOX_WORKDIR": str(tmp_path / "operator"), "SFX_RUN": "killed"}
    env.pop("PYTEST_ADDOPTS", None)
    run_folder = tmp / f"slurmflox-run-{run_id}"
    killed = _pytest(pytester.path, run_id, {**env, "SFX_HANG": "1"}, *workers)
    try:
        deadline = time.monotonic() + 120
        while not list(pytester.path.glob("ready-*")) and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert killed.poll() is None, killed.communicate()[0][-3000:]
        os.killpg(killed.pid, signal.SIGKILL)  # the controller and its workers: no session end runs
        killed.wait(30)
        left = [p.relative_to(run_folder).as_posix() for p in run_folder.rglob("*.job")]
        assert [p.split("/", 1)[1] for p in left] == ["task-profiles.job"], left  # the killed start's record
        again = _pytest(pytester.path, run_id, {**env, "SFX_RUN": "again"}, *workers)
        out = again.communicate(timeout=300)[0]
        assert again.returncode == 0, out[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)
    assert (pytester.path / "observed.log").read_text().split() == ["killed", "again"]  # observed again, once
    evidence = json.loads((pytester.path / "reports" / run_id / "evidence.json").read_text())
    commands = [e["command"] for check in evidence["checks"] for e in check["evidence"]]
    assert commands == ["echo observed-by-again"] * 2, commands  # the observer's own, and the reader's copy
    assert not run_folder.exists()  # the killed start's records went at the start, this start's at its end
