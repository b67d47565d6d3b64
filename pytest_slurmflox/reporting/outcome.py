"""What a run's outcome is made of besides its test reports, each with one owner.

- :class:`Deselected`: what this process's selection left out and why, and every acceptance check the collected
  modules hold (:attr:`Deselected.inventory`: what a group *has*, not what ran).
:class:`~pytest_slurmflox.harness.selection.
  Selection` records its own reasons, the session's ``pytest_deselected`` hook adds what pytest's ``-k``, ``-m``,
  ``--deselect`` or ``--lf`` dropped, and the end of collection what the paths or node ids named left out; the
  terminal summary and the verdict (a required group NOT RUN naming each check it did not run) read the same
  record. Under pytest-xdist the workers collect and deselect; each hands its record to the controller
  (``workeroutput``).
- :class:`ExitRules`: why the exit status differs from pytest's own. The report writer notes an unsigned
  sign-off and leaked secrets here; :class:`~pytest_slurmflox.harness.session.SlurmfloxSession` alone sets
  ``session.exitstatus``, once, after every reporter (and the artifact scan) is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

#: the reason a group's checks did not run when pytest's own selection (``-k``, ``-m``, ``--deselect``, ``--lf``)
#: dropped them
BY_PYTEST = "deselected by this run's selection (-k, -m, --deselect or --lf)"
#: the reason for a check its module holds that the paths or node ids named on the command line left out
NOT_NAMED = "not collected: the paths or node ids named left it out"
#: the reason for a check that was collected and kept but never reported (the run stopped before it)
NEVER_RAN = "collected but never run (the run stopped before it)"


@dataclass
class Deselected:
    """Deselection of one process: reason -> count (slurmflox's own rules, for the terminal summary) and
    acceptance group -> why its checks did not run (for the verdict)."""

    reasons: dict[str, int] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)  #: node id of an acceptance check left out -> why
    inventory: dict[str, str] = field(default_factory=dict)  #: node id -> group: every check the modules hold

    def record(self, group: str | None, reason: str, *, count: bool = True, nodeid: str | None = None) -> None:
        """One item left out; the first reason a group (or a check, ``nodeid``) gets is the one the verdict names."""
        if count:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if group is not None:
            self.groups.setdefault(group, reason)
        if nodeid is not None:
            self.checks.setdefault(nodeid, reason)

    def collected(self, nodeid: str, group: str | None) -> None:
        """An acceptance check a collected module holds (before any selection: node ids, ``-k``, groups)."""
        self.inventory[nodeid] = group or ""

    def left_out(self, reported: Iterable[str]) -> dict[str, tuple[str, str]]:
        """node id -> (group, why) of each check of the inventory that has no report: deselected, not named, or
        (kept but never reported) :data:`NEVER_RAN`."""
        seen = set(reported)
        return {
            nodeid: (group, self.checks.get(nodeid, NEVER_RAN))
            for nodeid, group in self.inventory.items()
            if nodeid not in seen
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "reasons": dict(self.reasons),
            "groups": dict(self.groups),
            "checks": dict(self.checks),
            "inventory": dict(self.inventory),
        }

    def merge(self, other: Mapping[str, Any]) -> None:
        """A worker's record (:meth:`as_dict`), on the controller. Every worker collects the same items, so a
        count is the same in each: the largest is kept, not the sum."""
        for reason, n in (other.get("reasons") or {}).items():
            self.reasons[str(reason)] = max(self.reasons.get(str(reason), 0), int(n))
        for group, reason in (other.get("groups") or {}).items():
            self.groups.setdefault(str(group), str(reason))
        for nodeid, reason in (other.get("checks") or {}).items():
            self.checks.setdefault(str(nodeid), str(reason))
        for nodeid, group in (other.get("inventory") or {}).items():
            self.inventory.setdefault(str(nodeid), str(group))


@dataclass
class ExitRules:
    """Why this run's exit status is not pytest's own; :meth:`settle` is applied once, by the session."""

    provisioned: bool = False  #: ``--slurmflox-up`` provisioned: a run that collected nothing succeeded
    unsigned: bool = False  #: a sign-off was requested and not given: a run of passing checks fails
    leaks: list[str] = field(default_factory=list)  #: secrets found in the artifacts: the run fails regardless
    nothing_ran: bool = False  #: every check was NOT RUN for one reason (the login unreachable): the run fails
    late_failure: bool = False  #: a check judged at the session's end FAILed (TB's comparison): the run fails
    sign_failed: str = ""  #: a signature was asked for and could not be made (why): the run fails regardless

    def settle(self, status: int) -> int:
        if self.leaks or self.sign_failed:
            return pytest.ExitCode.TESTS_FAILED
        if (self.unsigned or self.nothing_ran or self.late_failure) and status == pytest.ExitCode.OK:
            return pytest.ExitCode.TESTS_FAILED
        # a provisioning run that collected nothing succeeded, unless it was asked for a sign-off
        if status == pytest.ExitCode.NO_TESTS_COLLECTED and self.provisioned and not self.unsigned:
            return pytest.ExitCode.OK
        return status
