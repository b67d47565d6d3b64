"""T11: runtime-revision consistency.

Requirement: every worker of the cohort runs the runtime revision the declared settings deploy: its task profile
says so, its owner (pod annotation, or the local substrate's worker record) says so, and the owner's desired
revision is that one.

Where the expectation comes from: the revision is recomputed from the target file's ``expect.settings`` and
``expect.image`` with our own revision code (expectations.expected_revision -> revision.py), never taken from a
worker. A revision the target file states explicitly must agree with that computation.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.judges.expectations import expected_revision
from pytest_slurmflox.model.declared import REPLICAS, REVISION, REVISION_INPUTS

from ._capability import EveryWorker, declared, requirement
from ._profile import profiles_once

pytestmark = [pytest.mark.acceptance, pytest.mark.T11]


@pytest.fixture(scope="module")
def revision(expect) -> str:
    return expected_revision(expect.settings, expect.image)


def test_declared_revision_is_the_one_the_settings_compute(expect, revision, target):
    """A revision written by hand in a customer's target file must be the one its settings compute. A target a
    substrate wrote holds the revision that substrate computed from the very same settings: comparing them would
    compare a value with itself, so there the check is not applicable (profiles local and qemu)."""
    if target.spec.declared is None:
        pytest.skip(
            "missing capability declared-revision: this target's revision was computed from its own settings by "
            "the substrate that wrote it (nothing independent to compare)"
        )
    declared(target, REVISION, *REVISION_INPUTS)
    requirement(
        expect.revision == revision,
        "the target file's revision is the one its settings and image compute",
        f"declared {expect.revision}, computed {revision}",
    )


@pytest.mark.per_worker
def test_every_task_profile_reports_the_expected_revision(request, cohort_hosts, workers, revision, target):
    declared(target, *REVISION_INPUTS)
    profiles, res = profiles_once(request, target, cohort_hosts)  # the reading T3 judges too
    every = EveryWorker(f"every task profile reports the expected revision, on each of the {len(workers)} workers")
    for node in workers:
        got = profiles.get(node, {}).get("revision")
        every.holds(node, got == [revision], f"{node}'s profile reports {revision} (it reports {got})")
    every.settle(res)


def test_every_worker_record_carries_the_expected_revision(target, expect, workers, revision, slurmflox_state):
    require(target, "worker-pool")
    declared(target, *REVISION_INPUTS, REPLICAS)
    pool = target.pool
    requirement(
        pool.desired_revision() == revision,
        "the owner's desired revision is the computed one",
        f"desired {pool.desired_revision()}, computed {revision}",
    )
    infos = {w.name: w for w in pool.workers()}
    held = slurmflox_state.held  # quarantined workers the target still counts: NOT RUN in the verdict, not missing
    requirement(
        len(workers) + len(held) == expect.replicas,
        f"{expect.replicas} workers in the cohort (declared)",
        f"{workers}, quarantined {sorted(held)}",
    )
    every = EveryWorker(f"every worker record carries the expected revision, on each of the {len(workers)} workers")
    for node in workers:
        w = infos.get(node)
        every.holds(node, w is not None and w.revision == revision, f"worker {node} was created with {revision} ({w})")
    every.settle(f"the owner's records: {sorted(infos)}")
