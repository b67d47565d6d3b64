"""Timeouts derived from what a wait waits for (#16): the arithmetic, and that no suite keeps a blanket number."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pytest_slurmflox.base.waits import (
    START_SLACK,
    WaitTimedOut,
    job_timeout,
    limit_timeout,
    poll,
    poll_last,
    poll_missing,
    queue_timeout,
)

SUITES = Path(__file__).resolve().parents[2] / "suites"


def test_a_job_gets_its_runtime_plus_one_pass_per_stage():
    assert job_timeout() == START_SLACK  # a job with no runtime of its own still gets its pass
    assert job_timeout(4, stages=2) == 4 + 2 * START_SLACK
    assert job_timeout(300) == 360.0


def test_a_time_limit_wait_is_the_limit_plus_slurms_enforcement():
    # two 30 s time-limit sweeps and a 30 s KillWait, doubled for a loaded host
    assert limit_timeout(1) == 240.0
    assert limit_timeout(2) == 300.0


def test_queueing_in_a_concurrent_run_is_bounded_by_the_short_jobs_ahead():
    assert queue_timeout() == 3 * START_SLACK
    assert queue_timeout() < limit_timeout(1)


@pytest.mark.parametrize("bad", [{"runtime": -1}, {"stages": 0}])
def test_impossible_waits_are_refused(bad):
    with pytest.raises(ValueError):
        job_timeout(**bad)
    with pytest.raises(ValueError):
        limit_timeout(0)


def test_no_job_wait_in_the_suites_has_a_literal_timeout():
    """Every ``wait(...)`` and ``srun(...)`` on a job in the suites derives its timeout
    (pytest_slurmflox.base.waits)."""
    literal = re.compile(r"\b(wait|srun)\([^)]*timeout=\d")
    offenders = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(SUITES.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert offenders == []


# ----------------------------------------------------------------------------------------- poll
def test_poll_returns_the_first_answer_that_is_not_none():
    answers = iter([None, None, 7])
    assert poll(lambda: next(answers), what="a seven", timeout=5, interval=0.001) == 7


def test_poll_returns_a_falsy_answer_that_is_not_none():
    assert poll(lambda: 0, what="a zero", timeout=1) == 0


def test_poll_times_out_naming_what_it_awaited():
    calls = []
    with pytest.raises(WaitTimedOut, match=r"timed out after 0s waiting for slurmctld to answer") as caught:
        poll(lambda: calls.append(1), what="slurmctld to answer", timeout=0.05, interval=0.01)
    assert isinstance(caught.value, TimeoutError) and caught.value.what == "slurmctld to answer"
    assert len(calls) >= 2  # it looked more than once before giving up


def test_poll_lets_the_probe_stop_the_wait_at_once():
    def probe():
        raise RuntimeError("the process died")

    with pytest.raises(RuntimeError, match="died"):
        poll(probe, what="a process", timeout=60)


def test_poll_missing_says_what_was_still_missing():
    missing = iter(["worker1, worker2 unregistered", "worker2 unregistered"] + ["worker2 unregistered"] * 1000)
    with pytest.raises(WaitTimedOut) as caught:
        poll_missing(lambda: next(missing), what="workers registered", timeout=0.05, interval=0.01)
    assert caught.value.last == "worker2 unregistered"
    assert str(caught.value).endswith("waiting for workers registered: worker2 unregistered")


def test_poll_missing_returns_when_nothing_is_missing():
    states = iter(["worker1 unregistered", None])
    assert poll_missing(lambda: next(states), what="workers registered", timeout=5, interval=0.001) is None


def test_poll_last_returns_the_first_look_that_is_done():
    looks = iter(["PENDING", "RUNNING", "COMPLETED"])
    assert poll_last(lambda: next(looks), lambda s: s != "PENDING", what="job 7 to start", timeout=5) == "RUNNING"


def test_poll_last_returns_the_last_look_when_the_time_is_up():
    looks = iter(range(1000))
    seen = poll_last(lambda: next(looks), lambda n: n < 0, what="a negative", timeout=0.05, interval=0.01)
    assert seen >= 2  # looked more than once, and handed back the last look for the caller to judge


def test_poll_last_accepts_a_look_that_is_none():
    assert poll_last(lambda: None, lambda s: s is None, what="job 7 gone", timeout=60) is None


def test_poll_last_lets_the_look_stop_the_wait_at_once():
    def look():
        raise RuntimeError("worker9 appeared in sinfo")

    with pytest.raises(RuntimeError, match="appeared"):
        poll_last(look, lambda _: False, what="worker9 kept out of sinfo", timeout=60)


#: The deadline loops that are not a poll of a condition: how many lines each file has, and why (each also says so
#: where it stands).
NOT_A_POLL = {
    "pytest_slurmflox/base/waits.py": (1, "poll itself"),
    "pytest_slurmflox/base/run.py": (
        2,
        "SSHRunner.run drains the channel until EOF (and a grace after exit); a timeout is a result (rc 124)",
    ),
    "pytest_slurmflox/cluster/kube.py": (
        1,
        "a pod exec drains the websocket until it closes; a timeout is a result (rc 124)",
    ),
}
#: A hand-written deadline: ``time.monotonic() + timeout`` kept for later, or ``time.monotonic() - t0 > timeout``
#: compared in the loop (either side, ``<``, ``>``, ``<=``, ``>=``).
DEADLINE = re.compile(r"monotonic\(\)\s*\+|monotonic\(\)\s*-\s*[\w.]+\s*[<>]|[<>]=?\s*(?:time\.)?monotonic\(\)\s*-")


def _deadlines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if DEADLINE.search(line)]


def test_the_package_and_the_suites_wait_through_poll():
    """A hand-written deadline in the package or the suites is a poll() that was not used (#28); waits.poll_last
    keeps a check's own FAIL message."""
    root = SUITES.parent
    found = [
        f"{path.relative_to(root)}:{n}"
        for top in ("pytest_slurmflox", "suites")
        for path in sorted((root / top).rglob("*.py"))
        for n in _deadlines(path.read_text())
    ]
    per_file = Counter(f.rsplit(":", 1)[0] for f in found)
    assert per_file == {f: n for f, (n, _) in NOT_A_POLL.items()}, (
        f"use waits.poll/poll_last (or list it here): {found}"
    )


def test_the_deadline_rule_sees_both_forms():
    """Both forms of a hand-written deadline are found, as qemu/ready.py's loop once was."""
    loop = (
        "t0 = time.monotonic()\nwhile True:\n    if time.monotonic() - t0 > timeout:\n        raise X\n"
        "deadline = time.monotonic() + 5\nif timeout < monotonic() - start:\n    pass\n"
        "took = time.monotonic() - t0\n"
    )
    assert _deadlines(loop) == [3, 5, 6]
