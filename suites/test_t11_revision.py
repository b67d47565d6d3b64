"""T11: runtime-revision consistency.

Requirement: every worker of the cohort runs the expected runtime revision: its task profile says so, and its owner
(pod annotation, or the local substrate's worker record) says so too; the owner's desired revision is that one.
"""

from __future__ import annotations

import pytest

from ._support import read_profiles, require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T11]


def test_every_task_profile_reports_the_expected_revision(submit, workers, expect):
    profiles, res = read_profiles(submit, workers)
    revisions = {node: files.get("revision") for node, files in profiles.items()}
    requirement(
        set(revisions) == set(workers) and all(r == [expect.revision] for r in revisions.values()),
        f"every worker's profile reports {expect.revision}",
        res,
    )


def test_every_worker_record_carries_the_expected_revision(target, expect):
    require(target, "worker-pool")
    pool = target.pool
    requirement(
        pool.desired_revision() == expect.revision,
        "the owner's desired revision is the expected one",
        f"desired {pool.desired_revision()}, expected {expect.revision}",
    )
    workers = pool.workers()
    requirement(
        len([w for w in workers if w.ready]) == expect.replicas, f"{expect.replicas} ready workers", str(workers)
    )
    wrong = [w for w in workers if w.revision != expect.revision]
    requirement(not wrong, "every worker was created with the expected revision", *map(str, wrong))
