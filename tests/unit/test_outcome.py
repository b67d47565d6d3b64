"""One owner each (issue 28): the exit status, deselection, the group property and the redactor's lessons.

The exit status is set in one place (``SlurmfloxSession``, after every reporter) from :class:`ExitRules`; the
rules are tested here as a table, the one-setter rule by reading the package's AST. The redactor is taught by
``Redactor.learn`` only, and learns the admin key too (the ``target`` fixture once taught it a list without it).
"""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_slurmflox.harness.selection import Selection
from pytest_slurmflox.model.secrets import REDACTED, Redactor
from pytest_slurmflox.model.target import Endpoint
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.reporting.outcome import BY_PYTEST, NEVER_RAN, Deselected, ExitRules

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_slurmflox"
OK, FAILED, NONE, INTERRUPTED = (
    pytest.ExitCode.OK,
    pytest.ExitCode.TESTS_FAILED,
    pytest.ExitCode.NO_TESTS_COLLECTED,
    pytest.ExitCode.INTERRUPTED,
)


@pytest.mark.parametrize(
    ("rules", "status", "settled"),
    [
        (ExitRules(), OK, OK),
        (ExitRules(), NONE, NONE),  # a test run that found nothing says so
        (ExitRules(provisioned=True), NONE, OK),  # a provisioning run succeeded
        (ExitRules(provisioned=True), FAILED, FAILED),
        # up + a sign-off whose suites were not collected (run outside the project): measured exit 0, now 5
        (ExitRules(provisioned=True, unsigned=True), NONE, NONE),
        (ExitRules(unsigned=True), OK, FAILED),  # passing checks, no sign-off
        (ExitRules(unsigned=True), INTERRUPTED, INTERRUPTED),  # an interrupted run stays interrupted
        (ExitRules(leaks=["reports/x/evidence.json"]), OK, FAILED),
        (ExitRules(provisioned=True, leaks=["x"]), NONE, FAILED),  # a leak fails whatever else
    ],
)
def test_exit_rules(rules, status, settled):
    assert rules.settle(status) == settled


def test_the_exit_status_is_set_in_one_place():
    setters = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "exitstatus" for t in targets):
                    setters.append(f"{path.name}:{node.lineno}")
    assert len(setters) == 1 and setters[0].startswith("session.py:"), setters


def test_the_group_property_is_set_in_one_place():
    sites = [
        f"{path.name}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Tuple) and node.elts and getattr(node.elts[0], "value", None) == "slurmflox_group"
    ]
    assert len(sites) == 1 and sites[0].startswith("session.py:"), sites


def _item(group: str | None, acceptance: bool = True, nodeid: str = "") -> SimpleNamespace:
    marks = {"acceptance"} if acceptance else set()
    if group:
        marks.add(group)
    return SimpleNamespace(
        nodeid=nodeid or f"suites/test_x.py::test_{group}",
        get_closest_marker=lambda name: name if name in marks else None,
        iter_markers=lambda: [SimpleNamespace(name=m) for m in sorted(marks)],
    )


def test_selection_records_its_reasons_per_group_and_pytests_drops_do_not_overwrite_them():
    record = Deselected()
    selection = Selection({"T3"}, frozenset(), False, True, False, record)
    keep, drop = selection.split([_item("T3"), _item("T4"), _item("T4"), _item("T11R")])
    assert len(keep) == 1 and len(drop) == 3
    assert record.groups == {"T4": "group not in --slurmflox-groups", "T11R": "group not in --slurmflox-groups"}
    assert record.reasons == {"group not in --slurmflox-groups": 3}
    record.record("T4", BY_PYTEST, count=False)  # what the session's pytest_deselected hook adds
    record.record("T5", BY_PYTEST, count=False)
    assert record.groups["T4"] == "group not in --slurmflox-groups" and record.groups["T5"] == BY_PYTEST
    assert record.reasons == {"group not in --slurmflox-groups": 3}


def test_each_check_left_out_is_named_with_its_first_reason_and_one_never_reported_too():
    """Issue 40 item 3: the record knows every check the modules hold and why each one that has no report did not
    run; the selection's reason comes first, pytest's deselection does not overwrite it."""
    record = Deselected()
    for group, name in (("T3", "a"), ("T6", "ranks"), ("T6", "pmix"), ("T4", "b")):
        record.collected(f"m.py::{name}", group)
    selection = Selection({"T3", "T6"}, frozenset(), False, True, False, record)
    items = [_item(g, nodeid=f"m.py::{n}") for g, n in (("T3", "a"), ("T6", "ranks"), ("T6", "pmix"), ("T4", "b"))]
    selection.split(items)
    record.record("T4", BY_PYTEST, count=False, nodeid="m.py::b")  # the hook sees the selection's drops too
    record.record("T6", BY_PYTEST, count=False, nodeid="m.py::ranks")  # -k "not ranks"
    assert record.left_out(["m.py::a"]) == {
        "m.py::ranks": ("T6", BY_PYTEST),
        "m.py::pmix": ("T6", NEVER_RAN),  # kept, never reported: the run stopped before it
        "m.py::b": ("T4", "group not in --slurmflox-groups"),
    }
    controller = Deselected()
    controller.merge(record.as_dict())
    assert controller.left_out(["m.py::a", "m.py::pmix"]) == {
        "m.py::ranks": ("T6", BY_PYTEST),
        "m.py::b": ("T4", "group not in --slurmflox-groups"),
    }


def test_the_controller_merges_worker_records_without_summing_counts():
    a, b, controller = Deselected(), Deselected(), Deselected()
    for worker in (a, b):
        worker.record("T9", "group not in --slurmflox-groups")
        worker.record(None, "not an acceptance check")
    for worker in (a, b):
        controller.merge(worker.as_dict())
    assert controller.groups == {"T9": "group not in --slurmflox-groups"}
    assert controller.reasons == {"group not in --slurmflox-groups": 1, "not an acceptance check": 1}


def test_the_redactor_learns_the_admin_key(tmp_path):
    """The admin's key is a file of its own (another user's key): what it holds never reaches evidence."""
    login_key, admin_key = tmp_path / "id_login", tmp_path / "id_admin"
    login_key.write_bytes(os.urandom(64))
    admin_secret = "admin-" + os.urandom(24).hex()
    admin_key.write_text(admin_secret + "\n")
    login = Endpoint("127.0.0.1", 22, "alice", login_key, None)
    spec = SimpleNamespace(
        workdir=None, login=login, admin=dataclasses.replace(login, user="root", key=admin_key), kubernetes=None
    )
    redact = Redactor()
    redact.learn(Workdir(tmp_path / "operator"), spec)
    assert redact(f"cat said {admin_secret}") == f"cat said {REDACTED}"


def test_the_redactor_is_taught_only_through_learn():
    """``add_file`` is the redactor's own step; everyone else calls ``learn`` (one list: :func:`secret_files`)."""
    callers = [
        f"{path.name}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "secrets.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_file"
    ]
    assert callers == []
