"""A check's span (#16): the wall time from its first action to its end. For a check whose job was submitted early
in the run (pytest_slurmflox/harness/early.py) the span starts at that submission, so neither the report's timeline nor
the
benchmark makes the longest check look shorter than its wait on Slurm was."""

from __future__ import annotations

import pytest

from pytest_slurmflox.reporting.signoff import SINCE, UNTIL, CheckCollector


def _report(when: str, start: float, stop: float, props: list) -> pytest.TestReport:
    return pytest.TestReport(
        "suites/test_t07_policy.py::test_time_limit_is_enforced",
        ("suites/test_t07_policy.py", 1, "test_time_limit_is_enforced"),
        {},
        "passed",
        None,
        when,
        user_properties=props,
        duration=stop - start,
        start=start,
        stop=stop,
    )


def test_an_early_jobs_submission_starts_the_checks_span():
    collector = CheckCollector()
    props = [("slurmflox_group", "T7"), (SINCE, 1000.0)]
    for when, start, stop in (("setup", 1070.0, 1070.5), ("call", 1070.5, 1075.0), ("teardown", 1075.0, 1075.2)):
        check = collector.add(_report(when, start, stop, props))
    record = check.as_dict()
    assert check.start == 1000.0 and record["span"] == pytest.approx(75.2)
    assert record["duration"] == pytest.approx(5.2)  # pytest's own time stays what it was


def test_without_an_early_job_the_span_is_setup_to_teardown():
    collector = CheckCollector()
    for when, start, stop in (("setup", 10.0, 11.0), ("call", 11.0, 14.0), ("teardown", 14.0, 14.5)):
        check = collector.add(_report(when, start, stop, [(SINCE, 0)]))  # no submission time: ignored
    assert check.as_dict()["span"] == pytest.approx(4.5)


def test_a_check_that_collected_late_ends_its_span_when_slurm_ended_the_job():
    """Serial run: the early job timed out at 1072, the check (ordered last) only looked at 1160."""
    collector = CheckCollector()
    props = [(SINCE, 1000.0), (UNTIL, 1072.0)]
    for when, start, stop in (("setup", 1159.0, 1159.2), ("call", 1159.2, 1159.8), ("teardown", 1159.8, 1160.0)):
        check = collector.add(_report(when, start, stop, props))
    assert check.as_dict()["span"] == pytest.approx(72.0)
