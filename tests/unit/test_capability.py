"""The suites' per-worker requirement (suites/_capability.py ``EveryWorker``): every worker is judged before the
check FAILs, and the FAIL names each worker that missed a part, not only the first."""

from __future__ import annotations

import pytest
from pytest_slurmflox.suites._capability import EveryWorker


def test_a_requirement_met_on_every_worker_settles_quietly():
    every = EveryWorker("the profile is complete on each of the 2 workers")
    assert every.holds(True, "worker1: schema 1") and every.holds(True, "worker2: schema 1")
    every.settle("evidence")


def test_the_fail_names_every_worker_that_missed_a_part_after_judging_them_all():
    every = EveryWorker("the profile is complete on each of the 3 workers")
    for node, ok in (("worker1", True), ("worker2", False), ("worker3", False)):
        if every.holds(ok, f"{node}: a task can read its profile"):
            every.holds(node != "worker1", f"{node}: schema 1")
    with pytest.raises(pytest.fail.Exception) as failed:
        every.settle("the step's answers")
    message = str(failed.value)
    assert message.startswith("requirement not met: the profile is complete on each of the 3 workers: ")
    assert "worker1: schema 1; worker2: a task can read its profile; worker3: a task can read its profile" in message
    assert message.endswith("\nthe step's answers")
