"""A site check that depends on a group or a check: pytest-dependency's ``depends``, judged against this run.

Contract. ``@pytest.mark.dependency(depends=["T5"])`` (a group) or ``depends=["<node id of a check>"]`` on a check:

- It runs only after every check it depends on has ended in this run, in any xdist process (each process records
  each check's outcome in the run's records folder; the dependent waits, bounded by :data:`WAIT_S`, and is placed
  after every other check: harness/concurrency.py).
- Every one of them PASSed: the dependency is met, and pytest-dependency is told so (the name registered as passed in
  its manager for the marker's scope), so its own check lets the test run.
- Any did not (FAIL, SKIP, NOT RUN, not selected in this run, not ended in time): the dependent is NOT RUN naming
  the dependency and why; never FAIL, never PASS.

Names that are neither a group nor a collected check are left to pytest-dependency (its own ``dependency(name=...)``
marks, in its scopes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pytest_dependency import DependencyItemStatus, DependencyManager

from ..base.waits import WaitTimedOut, poll
from ..model.groups import GROUPS, item_group
from ..model.runrecord import RunRecords
from ..model.workdir import atomic_write
from ..reporting.signoff import NOT_RUN_PREFIX as NOT_RUN

#: Seconds a dependent check waits for what it depends on to end (the longest group, a time limit, is minutes).
WAIT_S = 1800.0


#: eq=False: a registered plugin must stay hashable (pytest builds sets of plugins for a test file outside
#: the conftests' folders, e.g. a site's own checks beside the suites); identity is what a plugin's equality is.
@dataclass(eq=False)
class SiteDependencies:
    """The plugin (one per pytest process): records outcomes, holds a dependent until its dependencies end."""

    state: Any  #: the run's SessionState: its records folder is the one every process of this start shares
    groups: dict[str, list[str]] = field(default_factory=dict)  #: group -> node ids selected in this run
    selected: set[str] = field(default_factory=set)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """What this run selected, by group; nothing at all is recorded in a run where no check depends on another."""
        if not any(_depends(item) for item in items):
            self.selected, self.groups = set(), {}
            return
        self.selected = {item.nodeid for item in items}
        self.groups = {}
        for item in items:
            group = item_group(item)
            if group:
                self.groups.setdefault(group, []).append(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A check's outcome, once known: its first phase that did not pass, else its teardown's pass."""
        if report.nodeid not in self.selected or self._outcome_path(report.nodeid).exists():
            return
        if report.outcome != "passed" or report.when == "teardown":
            outcome = "passed" if report.outcome == "passed" else ("skipped" if report.skipped else "failed")
            atomic_write(self._outcome_path(report.nodeid), json.dumps({"outcome": outcome}))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        mark = item.get_closest_marker("dependency")
        depends = _depends(item)
        ours = [name for name in depends if name in GROUPS or name in self.selected]
        if not ours:
            return
        for name in ours:
            members = self.groups.get(name, [name] if name in self.selected else [])
            if not members:
                pytest.skip(f"{NOT_RUN}depends on {name}, which is not in this run (deselected or not collected)")
            why = self._unmet(members)
            if why:
                pytest.skip(f"{NOT_RUN}depends on {name}: {why}")
            manager = DependencyManager.getManager(item, scope=mark.kwargs.get("scope", "module") if mark else "module")
            status = DependencyItemStatus()
            status.results = dict.fromkeys(DependencyItemStatus.Phases, "passed")
            manager.results[name] = status

    def _unmet(self, members: list[str]) -> str:
        """Why the checks ``members`` did not all pass ("" when they did), waiting up to :data:`WAIT_S` for each to
        end (they run beside it, so the waits overlap: the first is the long one)."""
        not_passed = []
        for nodeid in members:
            path = self._outcome_path(nodeid)
            try:
                poll(partial(_ended, path), what=nodeid, timeout=WAIT_S, interval=0.5)
            except WaitTimedOut:
                return f"{nodeid.rsplit('::', 1)[-1]} did not end within {WAIT_S:g} s"
            outcome = json.loads(path.read_text())["outcome"]
            if outcome != "passed":
                not_passed.append(f"{nodeid.rsplit('::', 1)[-1]} {outcome}")
        return "; ".join(not_passed)

    def _outcome_path(self, nodeid: str) -> Path:
        digest = hashlib.sha256(nodeid.encode()).hexdigest()[:24]
        records: RunRecords = self.state.records
        return records.folder / f"outcome-{digest}.json"


def _ended(outcome: Path) -> Path | None:
    """The check's outcome record once it is written (by whichever process ran the check)."""
    return outcome if outcome.exists() else None


def _depends(item: pytest.Item) -> list[str]:
    """The names ``@pytest.mark.dependency(depends=[...])`` gives an item ([] without one)."""
    mark = item.get_closest_marker("dependency")
    return list(mark.kwargs.get("depends") or []) if mark is not None else []
