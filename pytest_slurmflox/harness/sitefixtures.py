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

from collections.abc import Iterator
from typing import Any

import pytest
from testinfra.host import Host

from .sitehosts import LoginBackend, Workers


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
    worker's system asked once per run (the session's ``worker_systems``)."""
    yield Workers(submit, tuple(target.slurm.partition_nodes()), systems=slurmflox_state.worker_systems)
