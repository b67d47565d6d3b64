"""Every wait says what it waits for (harness/waitnotes.py, base/waits.py's Status): the lines reach the terminal of
the process that owns the run while the wait lasts, under ``-q`` and from xdist workers, and the report's run notes
with their times."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_slurmflox.base import waits
from pytest_slurmflox.base.waits import STATUS_EVERY, WAIT_LOGGER, Status, lines_or_silence, poll_missing
from pytest_slurmflox.harness.waitnotes import Tail, append_line
from pytest_slurmflox.reporting.artifacts import ReportPaths

#: A check that waits for a file the test writes only once it has seen the check's status line on the terminal:
#: the line cannot have come after the wait (the check would FAIL on the poll's timeout instead).
WAITING_CHECK = r"""
import os
import pytest
from pathlib import Path
from pytest_slurmflox.base.waits import Status, poll

pytestmark = pytest.mark.acceptance


@pytest.mark.T5
def test_waits_for_a_held_worker():
    release = Path(os.environ["SFX_RELEASE"])
    status = Status("a step on every worker (worker1, worker2) whose allocation queued", first=0)

    def released():
        status.tick("worker1 (state allocated) is held by job 4242 of user root (site-hold, expected end 05:00:00)")
        return release.exists() or None

    poll(released, what="the test to see the status line", timeout=120, interval=0.2)


@pytest.mark.T3
def test_other():
    pass
"""

HELD = "worker1 (state allocated) is held by job 4242 of user root"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    key = tmp_path / "id_site"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    target = tmp_path / "target.yaml"
    target.write_text(
        "version: 1\nname: fake-site\nsubstrate: existing\n"
        f"login: {{host: 127.0.0.1, port: 22, user: alice, key: {key}}}\n"
    )
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "test_fake_wait.py").write_text(WAITING_CHECK)
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    monkeypatch.setenv("SFX_RELEASE", str(tmp_path / "release"))
    return {"target": target, "reports": tmp_path / "reports", "checks": tmp_path / "checks", "root": tmp_path}


def _run_until_said(site: dict, run_id: str, *args: str) -> tuple[list[str], int]:
    """A ``-q`` acceptance run of the waiting check; once the status line is on its terminal, release the wait.
    Returns the terminal's lines and the exit status."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    argv += [f"--slurmflox-target={site['target']}", f"--slurmflox-reports={site['reports']}"]
    argv += [f"--slurmflox-run-id={run_id}", str(site["checks"])]
    proc = subprocess.Popen(argv, cwd=site["root"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if HELD in line:
            Path(site["root"] / "release").write_text("seen\n")
    return lines, proc.wait(timeout=120)


@pytest.mark.parametrize("workers", [("-n", "2"), ("-p", "no:xdist")], ids=["xdist", "serial"])
def test_a_wait_is_said_on_the_terminal_while_it_lasts_and_in_the_run_notes(site, workers):
    lines, rc = _run_until_said(site, f"w-{workers[1].replace(':', '')}", *workers)
    said = [line for line in lines if HELD in line]
    assert rc == 0, "\n".join(lines[-40:])  # the check was released: its line came while it waited
    assert said, "\n".join(lines)
    where = r"gw\d: " if workers[0] == "-n" else ""
    shape = (
        rf"\[slurmflox +[\d.]+s\] \d\d:\d\d:\d\dZ {where}waiting \d+ s for a step on every worker \(worker1, worker2\)"
    )
    assert re.match(shape, said[0]), said[0]
    assert "job 4242" in said[0] and "expected end 05:00:00" in said[0]
    run_id = f"w-{workers[1].replace(':', '')}"
    report = ReportPaths(site["reports"] / run_id).html.read_text()
    notes = report[report.index('id="slurmflox-notes"') :]
    assert "job 4242 of user root" in notes and re.search(r"\d\d:\d\d:\d\dZ", notes)


def test_a_status_is_said_once_due_and_again_only_after_its_interval(caplog):
    caplog.set_level(logging.INFO, logger=WAIT_LOGGER)
    status = Status("job 7 to end")
    assert status.tick("7=PENDING/Priority") is False  # a wait that has not lasted says nothing
    status.began -= 11  # the wait has lasted 11 s
    assert status.tick("7=RUNNING/None") is True
    assert status.tick("7=RUNNING/None") is False  # said a moment ago
    assert status.said is not None
    status.said -= STATUS_EVERY
    assert status.tick("7=COMPLETING/None") is True
    assert [r.getMessage() for r in caplog.records] == [
        "waiting 11 s for job 7 to end: 7=RUNNING/None",
        "waiting 11 s for job 7 to end: 7=COMPLETING/None",
    ]
    assert STATUS_EVERY < 30  # a line at least every 30 s, with the time a look itself takes


def test_a_poll_says_what_is_still_missing(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=WAIT_LOGGER)
    monkeypatch.setattr(waits, "FIRST_STATUS", 0.0)
    missing = iter(["worker2 unregistered", None])
    poll_missing(lambda: next(missing), what="workers registered", timeout=5, interval=0.001)
    assert [r.getMessage() for r in caplog.records] == ["waiting 0 s for workers registered: worker2 unregistered"]


def test_the_wait_log_hands_over_whole_lines_only(tmp_path):
    log = tmp_path / "records" / "waits.log"
    tail = Tail(log)
    assert tail.read() == []  # no log yet
    append_line(log, "04:00:00Z gw0: waiting 30 s for\nx")
    with log.open("ab") as handle:
        handle.write(b"04:00:01Z gw1: half a li")
    assert tail.read() == ["04:00:00Z gw0: waiting 30 s for x"]
    with log.open("ab") as handle:
        handle.write(b"ne\n")
    assert tail.read() == ["04:00:01Z gw1: half a line"]


def test_a_silent_process_is_looked_at_between_its_lines():
    proc = subprocess.Popen(["sh", "-c", "echo a; sleep 0.5; printf 'b\\nc'"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    began = time.monotonic()
    got = list(lines_or_silence(proc.stdout.fileno(), 0.05))
    proc.wait()
    words = [line for line in got if line is not None]
    assert words == ["a\n", "b\n", "c"]
    assert None in got[1 : got.index("b\n")]  # the silence between a and b was looked at
    assert time.monotonic() - began < 60
