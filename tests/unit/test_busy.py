"""Busy is not broken (issue 38): the budget's sources, what srun says about a queued allocation, and one look at the
workers (states, reasons, the jobs that hold them) read into busy, broken or free."""

from __future__ import annotations

import subprocess

import pytest

from pytest_slurmflox.model.busy import (
    DEFAULT_BUSY_TIMEOUT,
    busy,
    look_command,
    parse_busy_timeout,
    parse_look,
    queued_job,
    resolve_busy_timeout,
    serving,
)
from pytest_slurmflox.model.target import TargetError, parse_target, target_document

LOGIN = {"host": "login.example", "user": "alice", "key": "/k"}
OWN = "sfx-run1-"


@pytest.mark.parametrize("value", ["abc", -1, "-0.5", True, "inf", "nan", ""])
def test_a_budget_that_is_not_seconds_is_refused_naming_its_source(value):
    with pytest.raises(ValueError, match=r"^--x: expected seconds \(a number >= 0\)"):
        parse_busy_timeout(value, "--x")


def test_the_budget_comes_from_the_option_then_the_target_then_the_default():
    assert resolve_busy_timeout("45", 30.0) == 45.0
    assert resolve_busy_timeout(None, 30.0) == 30.0 and resolve_busy_timeout("", 0.0) == 0.0
    assert resolve_busy_timeout(None, None) == DEFAULT_BUSY_TIMEOUT == 600.0
    with pytest.raises(ValueError, match="--slurmflox-busy-timeout"):
        resolve_busy_timeout("soon", None)


def test_slurm_busy_timeout_in_a_target_file_round_trips_and_a_bad_one_names_the_key():
    spec = parse_target({"login": LOGIN, "slurm": {"partition": "batch", "busy_timeout": 90}})
    assert spec.busy_timeout == 90.0
    doc = target_document(spec)
    assert doc["slurm"] == {"partition": "batch", "busy_timeout": 90.0}
    assert parse_target(doc).busy_timeout == 90.0
    assert "busy_timeout" not in target_document(parse_target({"login": LOGIN}))["slurm"]
    with pytest.raises(TargetError, match=r"slurm\.busy_timeout: 'ten minutes' is text, expected a number"):
        parse_target({"login": LOGIN, "slurm": {"busy_timeout": "ten minutes"}})


def test_only_an_allocation_that_queued_and_was_never_granted_is_a_queued_job():
    refused = (
        "srun: job 3 queued and waiting for resources\n"
        "srun: error: Unable to allocate resources: Requested nodes are busy\n"
    )
    assert queued_job(refused) == "3"
    assert queued_job("srun: job 3 queued and waiting for resources\n[timed out after 20s]") == "3"
    granted = "srun: job 4 queued and waiting for resources\nsrun: job 4 has been allocated resources\n"
    assert queued_job(granted) is None  # it ran: what it printed is its check's to judge
    assert queued_job("srun: error: worker2: task 1: Exited with exit code 1") is None


@pytest.mark.parametrize(
    ("state", "serves", "runs_jobs"),
    [
        ("idle", True, False),
        ("allocated", True, True),
        ("mixed", True, True),
        ("completing", True, True),
        ("mixed@", True, True),  # reboot pending: it still runs jobs
        ("allocated*", False, False),  # not responding: broken, whatever it runs
        ("drained", False, False),
        ("draining", False, False),
        ("mixed+drain", False, False),
        ("down", False, False),
        ("idle~", False, False),
        ("inval", False, False),
    ],
)
def test_a_node_state_is_serving_busy_or_broken(state, serves, runs_jobs):
    assert serving(state) is serves
    assert busy(state) is runs_jobs


def test_a_look_names_the_held_workers_and_what_holds_them_never_the_runs_own_jobs():
    text = "\n".join(
        [
            "site banner line",
            "@state|worker1|allocated|none",
            "@state|worker2|mixed|none",
            "@state|worker3|idle|none",
            "@job|worker1|17|bob|2026-12-04T15:00:00|nightly|run",
            "@job|worker1|18|alice|NONE|sfx-run1-t8-abc",
            "@job|worker2|19|alice|NONE|sfx-run1-t5-def",
        ]
    )
    look = parse_look(text, ["worker1", "worker2", "worker3"], OWN)
    assert look.broken == []
    assert list(look.held) == ["worker1"]  # worker2 runs only this run's job: not held by anyone else
    assert look.describe() == (
        "worker1 (state allocated) is held by job 17 of user bob (nightly|run, expected end 2026-12-04T15:00:00)"
    )


def test_a_look_at_a_broken_or_unlisted_worker_says_broken_even_when_a_job_holds_it():
    text = "@state|worker1|allocated*|Not responding\n@job|worker1|17|bob|NONE|hold\n"
    look = parse_look(text, ["worker1", "worker2"], OWN)
    assert look.broken == ["worker1", "worker2"]  # not responding; Slurm did not list worker2 at all
    assert look.held == {}  # a node that does not serve is never "busy"


def test_a_worker_that_runs_jobs_slurm_does_not_show_is_held_by_them():
    """``PrivateData=jobs``: the login user sees only its own jobs; a node Slurm says runs jobs, none of them ours,
    is held by someone (named as unseen), while one that runs only the run's own jobs is not."""
    text = "@state|w1|allocated|none\n@state|w2|mixed|none\n@job|w2|9|alice|NONE|sfx-run1-t5-x\n"
    look = parse_look(text, ["w1", "w2"], OWN)
    assert look.held == {"w1": ()}
    assert look.describe() == "w1 (state allocated) is held by jobs Slurm does not show this user (PrivateData)"


def test_a_held_worker_without_a_time_limit_says_so():
    look = parse_look("@state|w1|completing|none\n@job|w1|5|root|NONE|hold\n", ["w1"], OWN)
    assert (
        look.describe() == "w1 (state completing) is held by job 5 of user root (hold, no expected end: no time limit)"
    )


def test_the_look_is_one_shell_command_with_every_node_quoted(tmp_path):
    """Run with stand-ins for sinfo and squeue on PATH (each prints its arguments): one command, the hostile node
    name stays one argument, and the answer parses back to every node."""
    for tool, line in (("sinfo", 'echo "@state|$6|idle|none"'), ("squeue", 'echo "$5|$7"')):
        path = tmp_path / tool
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(0o755)
    nodes = ["w1", "w 2;touch x"]
    command = look_command("all", nodes)
    out = subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        cwd=tmp_path,
        check=True,
    )
    assert not (tmp_path / "x").exists()
    assert out.stdout.splitlines()[0] == "@state|w 2;touch x,w1|idle|none"
    assert out.stdout.splitlines()[1:] == ["R,CG,CF,S|@job|w 2;touch x|%i|%u|%e|%j", "R,CG,CF,S|@job|w1|%i|%u|%e|%j"]
