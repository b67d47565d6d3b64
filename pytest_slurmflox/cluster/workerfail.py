"""A FAIL that names the workers it failed on, as data: what quarantine drains (model/quarantine.py) is read from
here, never parsed back out of a failure's text.

Why an exception: a per-worker requirement FAILs by raising pytest's ``Failed``; this subclass carries the workers
(worker -> the one line it missed) to the session's report hook, which puts them on the check's report
(:data:`~pytest_slurmflox.model.quarantine.FAILED_WORKERS`, serialized by pytest-xdist) for the controller. The
terminal, JUnit and the report show it exactly as any other FAIL.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest


class WorkersFailed(pytest.fail.Exception):  # type: ignore[name-defined]
    """pytest's FAIL (no traceback) with :attr:`workers`: each worker the requirement named and what it missed."""

    def __init__(self, msg: str, workers: Mapping[str, str]) -> None:
        super().__init__(msg, pytrace=False)
        self.workers = dict(workers)


def fail_naming(text: str, workers: Mapping[str, str]) -> None:
    """FAIL with ``text``; ``workers`` (possibly empty: a FAIL of the whole step) go with it as data."""
    raise WorkersFailed(text, workers)
