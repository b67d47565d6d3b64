"""Fixtures every suite shares. The cohort is decided here once per session, and decided strictly.

``workers`` is the project's one cohort fixture (the plugin's fixtures.py has none): deciding the cohort is an
acceptance check of its own, so it lives with the suites, and pytest loads this file as the package conftest both
in the checkout and from the wheel (``pytest --pyargs pytest_slurmflox.suites``).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.gates import require

from ._capability import declared, requirement
from ._cohort import cohort, preflight_step


@pytest.fixture(scope="session")
def workers(target, slurmflox_state) -> list[str]:
    """Slurm node names of the worker cohort: the partition's nodes cross-checked with the owner's list.

    A node in the partition that the owner does not list, a listed worker that is not registered, or one that does
    not serve (a state flag such as ``*`` not responding included) is a FAIL naming it (it is not dropped, and it is
    no SKIP). Then one short step on every worker, with a deadline: a worker whose slurmd stopped before Slurm noticed
    FAILS the pre-flight within a minute, named, instead of every check waiting for it. Per-worker checks use every
    node.
    """
    from pytest_slurmflox.declared import COMMON_KEYS, KUBERNETES_KEYS
    from pytest_slurmflox.submit import Jobs

    require(target, "slurm")
    # which nodes are the workers is itself declared: a customer's partition (and NodeSet) is never a default's
    declared(target, *COMMON_KEYS)
    if target.spec.kubernetes is not None:
        declared(target, *KUBERNETES_KEYS)
    nodes, problems, evidence = cohort(target)
    requirement(
        not problems, "the cohort is exactly the ready workers the owner lists: " + "; ".join(problems), *evidence
    )
    jobs = Jobs(
        login=target.login,
        slurm=target.slurm,
        run_id=slurmflox_state.run_id,
        label="preflight",
        partition=target.spec.partition,
    )
    try:
        silent, step = preflight_step(jobs, nodes)
    finally:
        jobs.cleanup()
    requirement(not silent, "every worker of the cohort answers a step: " + "; ".join(silent), step.result)
    return nodes


@pytest.fixture(scope="session", autouse=True)
def _cohort_preflight(workers: list[str]) -> None:
    """The cohort pre-flight (#16): every check depends on the cohort check of :func:`workers`, run once per process
    before the first check. A drained, unready, unregistered or foreign worker (or a login/controller that does not
    answer) FAILS the first check's setup naming the cause, and pytest re-raises the same cached failure for every
    later check at once: each is reported blocked with that reason instead of waiting for its own job timeout."""


@pytest.fixture(scope="session", autouse=True)
def _early_jobs(request, _cohort_preflight, target, slurmflox_state) -> None:
    """Jobs checks need long before they run (pytest_slurmflox/early.py): submitted once per run as soon as the
    pre-flight passed, so a time limit's minute runs beside the other checks."""
    from pytest_slurmflox.early import early_jobs, submit_early
    from pytest_slurmflox.submit import Jobs

    run_id = slurmflox_state.run_id

    def jobs_for(label: str) -> Jobs:
        return Jobs(login=target.login, slurm=target.slurm, run_id=run_id, label=label, partition=target.spec.partition)

    submit_early(early_jobs(request.session.items), run_id, jobs_for)


@pytest.fixture(scope="session", autouse=True)
def _declared_login_answers(target) -> None:
    """The login endpoint (and Slurm behind it) is declared by every target file: when it does not answer, every
    check FAILS with the error instead of SKIPping as if the target had no Slurm."""
    require(target, "slurm")
