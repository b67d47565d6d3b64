"""What a run's outcome is made of besides its test reports, each with one owner (issue 28).

- :class:`Deselected`: what this process's selection left out and why. :class:`~pytest_slurmflox.selection.
  Selection` records its own reasons, the session's ``pytest_deselected`` hook adds what pytest's ``-m``/``-k``
  dropped; the terminal summary and the verdict (a required group NOT RUN, naming why) read the same record.
  Under pytest-xdist the workers deselect; each hands its record to the controller (``workeroutput``).
- :class:`ExitRules`: why the exit status differs from pytest's own. The report writer notes an unsigned
  sign-off and leaked secrets here; :class:`~pytest_slurmflox.session.SlurmfloxSession` alone sets
  ``session.exitstatus``, once, after every reporter (and the artifact scan) is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

#: the reason a group's checks did not run when pytest's own selection (``-m``, ``-k``) dropped them
BY_PYTEST = "deselected by this run's selection (-m or -k)"


@dataclass
class Deselected:
    """Deselection of one process: reason -> count (slurmflox's own rules, for the terminal summary) and
    acceptance group -> why its checks did not run (for the verdict)."""

    reasons: dict[str, int] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)

    def record(self, group: str | None, reason: str, *, count: bool = True) -> None:
        """One item left out; the first reason a group gets is the one the verdict names."""
        if count:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if group is not None:
            self.groups.setdefault(group, reason)

    def as_dict(self) -> dict[str, Any]:
        return {"reasons": dict(self.reasons), "groups": dict(self.groups)}

    def merge(self, other: Mapping[str, Any]) -> None:
        """A worker's record (:meth:`as_dict`), on the controller. Every worker collects the same items, so a
        count is the same in each: the largest is kept, not the sum."""
        for reason, n in (other.get("reasons") or {}).items():
            self.reasons[str(reason)] = max(self.reasons.get(str(reason), 0), int(n))
        for group, reason in (other.get("groups") or {}).items():
            self.groups.setdefault(str(group), str(reason))


@dataclass
class ExitRules:
    """Why this run's exit status is not pytest's own; :meth:`settle` is applied once, by the session."""

    provisioned: bool = False  #: ``--slurmflox-up`` provisioned: a run that collected nothing succeeded
    unsigned: bool = False  #: a sign-off was requested and not given: a run of passing checks fails
    leaks: list[str] = field(default_factory=list)  #: secrets found in the artifacts: the run fails regardless

    def settle(self, status: int) -> int:
        if self.leaks:
            return pytest.ExitCode.TESTS_FAILED
        if self.unsigned and status == pytest.ExitCode.OK:
            return pytest.ExitCode.TESTS_FAILED
        if status == pytest.ExitCode.NO_TESTS_COLLECTED and self.provisioned:
            return pytest.ExitCode.OK
        return status
