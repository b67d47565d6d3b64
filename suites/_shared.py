"""One observation of the cluster, made once in a run and judged by every check that asks for it.

Why: several checks judge different requirements on the same observation. T3's four profile checks and T11's
revision check read the same task-profile files on every worker; T8's child and detached stray processes can be
left by the same job. Each observation is a step on every worker (T8's: a job and three of them), and on a large cohort
such a step costs seconds of the host's CPU in Slurm's own daemons, so the run makes it once: the first check
to need it makes it while holding the run's lock and records it (pytest_slurmflox/model/runrecord.py); every other
check,
in the same process or another xdist process, reads the record and shows the recorded commands as its own evidence,
so each verdict still names the step it was judged on. The observation only observes: what is right is decided by
each check, against its own expectations.

A run that may include a destructive group changes the cohort between checks (a revision update, a CPU change):
an observation made earlier may no longer be the cluster's, so there every check observes for itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_slurmflox.base.run import Result

from ._marks import Marked

#: The key marking an encoded :class:`Result` (or :class:`Marked`) in a record.
_RESULT = "__result__"


def observe_once(request: pytest.FixtureRequest, name: str, observe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``observe()``'s value, made at most once in the run under ``name``: JSON values, and :class:`Result` objects
    anywhere in them (they come back as themselves, and as this check's evidence where another check ran them).
    An exception from ``observe`` records nothing (the next check observes again)."""
    from pytest_slurmflox.harness.concurrency import selects_destructive
    from pytest_slurmflox.model.runrecord import once_per_run
    from pytest_slurmflox.reporting.sessionstate import session_state

    if selects_destructive(request.config):
        return observe()
    state = session_state(request.config)
    record, here = once_per_run(state.records, name, lambda: encode(observe()))
    value = decode(record)
    if not here:
        for result in results(value):
            state.evidence(result)
    return value


def encode(value: Any) -> Any:
    """``value`` as JSON values: a :class:`Result` becomes a dict carrying :data:`_RESULT`."""
    if isinstance(value, Result):
        return {_RESULT: dataclasses.asdict(value)}
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`encode` (a tuple comes back as a list)."""
    if isinstance(value, dict):
        if set(value) == {_RESULT}:
            fields = value[_RESULT]
            return Marked(**fields) if "nonce" in fields else Result(**fields)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def results(value: Any) -> Iterator[Result]:
    """Every :class:`Result` in ``value``, in order."""
    if isinstance(value, Result):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from results(v)
    elif isinstance(value, list):
        for v in value:
            yield from results(v)
