"""The suites' per-worker requirement (suites/_capability.py ``EveryWorker``): every worker is judged before the
check FAILs, and the FAIL names each worker that missed a part, not only the first."""

from __future__ import annotations

import pytest
from pytest_slurmflox.suites._capability import EveryWorker, requirement

from pytest_slurmflox.cluster.workerfail import WorkersFailed


def test_a_requirement_met_on_every_worker_settles_quietly():
    every = EveryWorker("the profile is complete on each of the 2 workers")
    assert every.holds("worker1", True, "worker1: schema 1") and every.holds("worker2", True, "worker2: schema 1")
    every.settle("evidence")


def test_the_fail_names_every_worker_that_missed_a_part_after_judging_them_all():
    every = EveryWorker("the profile is complete on each of the 3 workers")
    for node, ok in (("worker1", True), ("worker2", False), ("worker3", False)):
        if every.holds(node, ok, f"{node}: a task can read its profile"):
            every.holds(node, node != "worker1", f"{node}: schema 1")
    with pytest.raises(pytest.fail.Exception) as failed:
        every.settle("the step's answers")
    message = str(failed.value)
    assert message.startswith("requirement not met: the profile is complete on each of the 3 workers: ")
    assert "worker1: schema 1; worker2: a task can read its profile; worker3: a task can read its profile" in message
    assert message.endswith("\nthe step's answers")
    # the workers go with the FAIL as data, each with its first unmet part: what quarantine drains
    assert isinstance(failed.value, WorkersFailed)
    assert failed.value.workers == {
        "worker1": "worker1: schema 1",
        "worker2": "worker2: a task can read its profile",
        "worker3": "worker3: a task can read its profile",
    }


def test_a_requirement_of_the_whole_step_carries_no_workers_and_one_given_none_is_a_plain_fail():
    with pytest.raises(WorkersFailed) as failed:
        requirement(False, "the ranks are 0..2", "evidence", workers={})
    assert failed.value.workers == {} and str(failed.value).startswith("requirement not met: the ranks are 0..2")
    with pytest.raises(pytest.fail.Exception) as plain:
        requirement(False, "the login shows Slurm's config")
    assert not isinstance(plain.value, WorkersFailed)
