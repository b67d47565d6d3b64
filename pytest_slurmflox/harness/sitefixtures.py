"""The documented fixtures for a site's own checks (docs/site-checks.md): stable names, each a thin view of what the
suites themselves use, so a site check lands in the same report, evidence and verdict as a group.

- ``slurmflox_target``: the parsed target (``Target``: ``.spec`` the target file, ``.login`` the runner, ``.slurm``).
- ``slurmflox_login``: a testinfra ``Host`` on the login endpoint, over the run's own connection.
- ``slurmflox_workers``: one testinfra ``Host`` per worker of the partition (``slurmflox_workers["worker3"]``), each
  command a Slurm step on that worker with the run's site access; ``.gather({...})`` asks many facts of every
  worker in a few steps (harness/sitehosts.py).
- ``slurmflox_submit``: the job helpers (``srun``, ``sbatch``, ``salloc`` with the run's account, QOS and
  reservation, jobs named with the run id, cancelled at the end of the check).

A site check is marked ``@pytest.mark.site`` (its group in the report is ``site``); ``@pytest.mark.dependency(
depends=["T5"])`` makes it NOT RUN naming T5 when T5 did not pass in this run (harness/sitedeps.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pytest
from testinfra.host import Host

from ..base.run import Result
from .sitehosts import STEP_SECONDS, LoginBackend, Workers


@pytest.fixture(scope="session")
def slurmflox_target(target: Any) -> Any:
    return target


@pytest.fixture(scope="session")
def slurmflox_login(target: Any) -> Host:
    backend = LoginBackend(target.login, "login")
    host = Host(backend)
    backend.set_host(host)
    return host


@pytest.fixture
def slurmflox_submit(submit: Any) -> Any:
    return submit


@pytest.fixture
def slurmflox_workers(target: Any, submit: Any, slurmflox_state: Any) -> Iterator[Workers]:
    """The partition's workers (``sinfo``, the target's partition), each a testinfra Host through Slurm; each
    worker's system asked once per run (the session's ``worker_systems``). A step over workers other users' jobs
    hold waits for them as the groups' steps do (busywait.py: within the run's budget, NOT RUN past it naming the
    worker and the jobs), never FAILs for being queued."""
    nodes = tuple(target.slurm.partition_nodes())
    yield Workers(submit, nodes, systems=slurmflox_state.worker_systems, launch=_waiting_launch(submit))


@dataclass(frozen=True)
class _SiteStep(Result):
    """A gathering step's result, with the lines its own answers carry (sitehosts.step_script's nonce): what
    busywait.py reads to tell a step that ran from one still queued."""

    @property
    def own(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if _ANSWER.match(line)]


_ANSWER = re.compile(r"sfx[0-9a-f]{12}\|[^|]*\|\d+\|")


def _waiting_launch(submit: Any) -> Callable[[Sequence[str], str], Any]:
    """``launch`` for :class:`Workers`: one step with one task on each node, waiting for held workers."""
    from .busywait import waiting_for_held

    def launch(nodes: Sequence[str], command: str) -> Any:
        names = sorted(nodes)

        def attempt(options: str, limit: float) -> _SiteStep:
            line = f"-N{len(names)} -n{len(names)} --ntasks-per-node=1 -w {','.join(names)} {options}"
            res = submit.srun(line, command, timeout=limit)
            return _SiteStep(**{f.name: getattr(res, f.name) for f in fields(Result)})

        return waiting_for_held(submit, names, attempt, "", STEP_SECONDS)

    return launch
