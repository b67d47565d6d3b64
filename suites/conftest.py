"""Fixtures every suite shares. The cohort is decided here once per session, and decided strictly.

``workers`` is the project's one cohort fixture (the plugin's fixtures.py has none): deciding the cohort is an
acceptance check of its own, so it lives with the suites, and pytest loads this file as the package conftest both
in the checkout and from the wheel (``pytest --pyargs pytest_slurmflox.suites``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.harness.busywait import BusyPastBudget

from ._capability import declared, unmet
from ._cohort import cohort, preflight_step


@pytest.fixture(scope="session")
def workers(target, slurmflox_state, busy_timeout: float) -> list[str]:
    """Slurm node names of the worker cohort: the partition's nodes cross-checked with the owner's list.

    A node in the partition that the owner does not list, a listed worker that is not registered, or one that does
    not serve (a state flag such as ``*`` not responding included) is a FAIL naming it (it is not dropped, and it is
    no SKIP). Then one short step on every worker, with a deadline: a worker whose slurmd stopped before Slurm noticed
    FAILS the pre-flight within a minute, named, instead of every check waiting for it. Per-worker checks use every
    node.

    Busy is not broken: a worker other users' jobs hold (Slurm lists it ALLOCATED, MIXED or COMPLETING and runs a
    job there that is not this run's) is waited for, the step asked again in ``--immediate`` slices of the run's
    ``busy_timeout`` (harness/busywait.py); when the budget runs out first, every check is NOT RUN naming the worker and
    the jobs that hold it; a worker that stops serving meanwhile FAILs, named by its state. The verdict has three
    states: healthy (the nodes), broken (``failure``: FAIL), busy past the budget (``busy``: NOT RUN).

    Decided once per run: under pytest-xdist the first process to get here decides and records the verdict,
    the others read it (pytest_slurmflox/model/runrecord.py), so every process judges against the same cohort, a failing
    pre-flight reads the same in every process, and the cluster sees one pre-flight step instead of one per process.
    """
    from pytest_slurmflox.model.declared import COMMON_KEYS, KUBERNETES_KEYS
    from pytest_slurmflox.model.runrecord import once_per_run

    require(target, "slurm")
    # which nodes are the workers is itself declared: a customer's partition (and NodeSet) is never a default's
    declared(target, *COMMON_KEYS)
    if target.spec.kubernetes is not None:
        declared(target, *KUBERNETES_KEYS)
    verdict, _ = once_per_run(
        slurmflox_state.records, "cohort", lambda: _decide_cohort(target, slurmflox_state, busy_timeout)
    )
    if verdict["failure"]:
        pytest.fail(verdict["failure"], pytrace=False)
    if verdict.get("busy"):
        pytest.skip(verdict["busy"])  # NOT RUN (its text starts with signoff.NOT_RUN_PREFIX), never FAIL
    slurmflox_state.worker_systems.update(verdict.get("systems") or {})  # worker Hosts start from them
    slurmflox_state.held.update(verdict.get("quarantined") or {})
    return list(verdict["nodes"])


def _counted(target, nodes: list[str], held: dict[str, str]) -> dict[str, str]:
    """The quarantined workers the cohort still counts: all of them, unless the target declares ``expect.replicas``
    and the cohort without them has that many (the owner no longer counts them)."""
    from pytest_slurmflox.model.declared import REPLICAS, missing

    declared = not missing(target.spec.declared, (REPLICAS,))
    return {} if held and declared and len(nodes) >= target.spec.expect.replicas else held


def _decide_cohort(target, state, busy_timeout: float) -> dict:
    """The cohort check and the pre-flight step: ``{"nodes": [...], "failure": None or the unmet requirement,
    "busy": None or why the checks are NOT RUN (a worker other jobs held for the whole budget)}``."""
    from pytest_slurmflox.cluster.submit import Jobs

    held: dict[str, str] = {}
    nodes, problems, evidence = cohort(target, held)
    if problems:
        failure = unmet("the cohort is exactly the ready workers the owner lists: " + "; ".join(problems), *evidence)
        return {"nodes": nodes, "failure": failure, "busy": None}
    counted = _counted(target, nodes, held)
    jobs = Jobs.of(target, state.run_id, "preflight", busy_timeout=busy_timeout, records=state.records)
    try:
        pre = preflight_step(jobs, nodes)
    except BusyPastBudget as held:
        return {"nodes": nodes, "failure": None, "busy": held.msg}
    finally:
        jobs.cleanup()
    if not pre.silent:
        return {"nodes": nodes, "failure": None, "busy": None, "systems": pre.systems, "quarantined": counted}
    silent, step = pre.silent, pre.step
    _, problems, evidence = cohort(target)  # a worker that stopped serving while the step waited: named by its state
    if problems:
        failure = unmet("the cohort is exactly the ready workers the owner lists: " + "; ".join(problems), *evidence)
    else:
        failure = unmet("every worker of the cohort answers a step: " + "; ".join(silent), step.result)
    return {"nodes": nodes, "failure": failure, "busy": None}


@pytest.fixture
def cohort_hosts(submit, workers: list[str], slurmflox_state):
    """The cohort as testinfra Hosts (harness/sitehosts.py ``Workers``): facts asked of every worker in one step
    that waits for a worker other jobs hold (busy is not broken: harness/busywait.py), each worker's system known from
    the pre-flight."""
    from pytest_slurmflox.harness.sitehosts import STEP_SECONDS, Workers

    from ._marks import Mark, every_worker_step

    def launch(nodes, command):
        return every_worker_step(submit, nodes, "", command, Mark.new(), timeout=STEP_SECONDS)

    return Workers(submit, tuple(workers), systems=slurmflox_state.worker_systems, launch=launch)


@pytest.fixture(scope="session", autouse=True)
def _cohort_preflight(workers: list[str]) -> None:
    """The cohort pre-flight: every check depends on the cohort check of :func:`workers`, run once per process
    before the first check. A drained, unready, unregistered or foreign worker (or a login/controller that does not
    answer) FAILS the first check's setup naming the cause, and pytest re-raises the same cached failure for every
    later check at once: each is reported blocked with that reason instead of waiting for its own job timeout."""


@pytest.fixture(autouse=True)
def _quarantined_said(request, _cohort_preflight, slurmflox_state) -> None:
    """Each check's report names the workers the cohort left out because this tool quarantined them (the verdict
    makes them NOT RUN, pytest_slurmflox/reporting/quarantine.py), as data."""
    import json

    from pytest_slurmflox.model.quarantine import QUARANTINED

    if slurmflox_state.held:
        request.node.user_properties.append((QUARANTINED, json.dumps(slurmflox_state.held)))


@pytest.fixture(scope="session", autouse=True)
def _early_jobs(request, _cohort_preflight, target, slurmflox_state) -> None:
    """Jobs checks need long before they run (pytest_slurmflox/harness/early.py): submitted once per run as soon as the
    pre-flight passed, so a time limit's minute runs beside the other checks."""
    from pytest_slurmflox.cluster.submit import Jobs
    from pytest_slurmflox.harness.early import early_jobs, submit_early

    run_id = slurmflox_state.run_id
    jobs = Jobs.of(target, run_id, "early")
    submit_early(early_jobs(request.session.items), slurmflox_state.records, jobs)


@pytest.fixture(scope="session", autouse=True)
def _early_workers(request, _early_jobs, target, slurmflox_state) -> Iterator[None]:
    """Throwaway workers TF judges last (pytest_slurmflox/harness/throwaway.py): started once per run after the
    pre-flight
    and the early jobs, so their time out of Slurm runs beside the other checks; one no check of the run claimed is
    stopped when the run's last process ends."""
    from pytest_slurmflox.harness.concurrency import selects_destructive
    from pytest_slurmflox.harness.throwaway import early_workers, join, leave, release_unclaimed, start_early

    specs = early_workers(request.session.items)
    # a run that may roll the cohort (T11) leaves them to their checks: a throwaway worker alive through a rollout
    # would show T11's watcher a second revision while the partition is up
    if not specs or selects_destructive(request.config) or target.why_missing("isolated-worker") is not None:
        yield
        return
    run = slurmflox_state.records
    join(run)
    start_early(target.pool, run, specs)
    yield
    if leave(run):  # the run's last process: no check of it can claim one any more
        release_unclaimed(target.pool, run, specs)


@pytest.fixture(scope="session", autouse=True)
def _declared_login_answers(target) -> None:
    """The login endpoint (and Slurm behind it) is declared by every target file: when it does not answer, every
    check FAILS with the error instead of SKIPping as if the target had no Slurm."""
    require(target, "slurm")
