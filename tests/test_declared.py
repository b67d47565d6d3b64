"""Declared expectations only (issue 17): a customer target's undeclared expectation makes its checks NOT RUN."""

from __future__ import annotations

from pytest_slurmflox.signoff import FAIL, NOT_RUN, NOT_RUN_PREFIX, PASS, SKIP, Check, group_verdict
from pytest_slurmflox.target import parse_target

LOGIN = {"host": "127.0.0.1", "port": 22, "user": "u", "key": "/dev/null"}


def test_a_customer_target_declares_only_what_its_file_names():
    spec = parse_target({"login": LOGIN, "expect": {"settings": {"WORKER_MEM_MB": "4096"}}})
    assert spec.substrate == "existing"
    assert spec.expect.declared == frozenset({"WORKER_MEM_MB"})
    assert "WORKER_CPUS" not in spec.expect.declared


def test_a_substrate_written_target_declares_everything():
    spec = parse_target({"substrate": "local", "login": LOGIN})
    assert spec.expect.declared is None


def test_not_run_outranks_skip_and_pass_but_not_fail():
    not_run = Check("t8::a", "T8", NOT_RUN, reason=NOT_RUN_PREFIX + "expect.settings.WORKER_CPUS")
    assert group_verdict([Check("t8::b", "T8", PASS), not_run, Check("t8::c", "T8", SKIP)]) == NOT_RUN
    assert group_verdict([not_run, Check("t8::d", "T8", FAIL)]) == FAIL


def test_the_start_message_lists_the_missing_keys_per_group():
    from pytest_slurmflox.target import undeclared, undeclared_message

    spec = parse_target({"login": LOGIN, "expect": {"settings": {"WORKER_MEM_MB": "4096", "WORKER_HOME_PATH": "/h"}}})
    assert undeclared(spec)["T8"] == ["WORKER_CPUS"]
    assert "T9" not in undeclared(spec) and "TI" not in undeclared(spec)
    assert "T8: WORKER_CPUS" in undeclared_message(spec)
    assert undeclared_message(parse_target({"substrate": "local", "login": LOGIN})) == ""
