"""T11: runtime-revision consistency.

Requirement: every worker of the cohort runs the runtime revision the declared settings deploy: its task profile
says so, its owner (pod annotation, or the local substrate's worker record) says so with the pinned environment
(the generation), and the owner's desired revision is that one.

Where the expectation comes from: the revision is recomputed from the target file's ``expect.settings`` and
``expect.image`` with our own revision code (expectations.expected_revision -> revision.py), never taken from a
worker. A revision the target file states explicitly must agree with that computation.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.judges.expectations import expected_revision
from pytest_slurmflox.judges.kubechecks import missing_addition
from pytest_slurmflox.model.declared import REPLICAS, REVISION, REVISION_INPUTS
from pytest_slurmflox.model.labels import ANNOTATION_ENVIRONMENT, ANNOTATION_REVISION

from ._capability import EveryWorker, declared, declared_nodeset, requirement
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


def test_every_task_profile_reports_the_expected_revision(request, cohort_hosts, workers, revision, target):
    declared(target, *REVISION_INPUTS)
    profiles, res = profiles_once(request, target, cohort_hosts)  # the reading T3 judges too
    every = EveryWorker(f"every task profile reports the expected revision, on each of the {len(workers)} workers")
    for node in workers:
        got = profiles.get(node, {}).get("revision")
        every.holds(got == [revision], f"{node}'s profile reports {revision} (it reports {got})")
    every.settle(res)


def test_every_worker_record_carries_the_expected_revision(target, expect, workers, revision):
    """The owner's records, each judged once: its desired revision, and each worker's revision and pinned
    environment (on Kubernetes the pod's ``slinky.local/runtime-revision`` and ``flox.dev/environment``
    annotations, as the operator copied them from the NodeSet's template onto the pod: slurm-operator v1.2.1
    ``internal/builder/workerbuilder/worker_app.go`` ``BuildWorkerPodTemplate``). The revision annotation is the
    reference design's addition: where the owner or every worker lacks it, that is named once as missing, with
    where it comes from, never as a wrong value."""
    require(target, "worker-pool")
    declared(target, *REVISION_INPUTS, REPLICAS)
    if target.spec.kubernetes is not None:
        declared_nodeset(target)  # a NodeSet that is not there is named as such, not as a missing annotation
    pool = target.pool
    desired = pool.desired_revision()
    owner = f"the owner ({target.spec.kubernetes.nodeset})" if target.spec.kubernetes else "the owner"
    infos = {w.name: w for w in pool.workers()}
    requirement(len(workers) == expect.replicas, f"{expect.replicas} workers in the cohort (declared)", str(workers))
    unrecorded = [n for n in workers if infos.get(n) is not None and infos[n].revision is None]
    nowhere = bool(unrecorded) and len(unrecorded) == len(workers)  # named once, not once per worker
    absent = missing_addition(f"annotation {ANNOTATION_REVISION}", ANNOTATION_REVISION)
    if desired is None:
        problems = [(f"{owner} and every worker ({len(workers)}): " if nowhere else f"{owner}: ") + absent]
    else:
        problems = [] if desired == revision else [f"{owner} desires {desired}, computed {revision}"]
        problems += [f"every worker ({len(workers)}): {absent}"] if nowhere else []
    every = EveryWorker(
        f"every worker record carries the expected revision and environment, on each of the {len(workers)} workers"
    )
    every.unmet_parts.extend(problems)
    for node in workers:
        w = infos.get(node)
        if not every.holds(w is not None, f"the owner has no record of worker {node}"):
            continue
        every.holds(
            w.revision == revision or nowhere,
            f"worker {node} was created with {revision} (its record: {w.revision})",
        )
        every.holds(
            w.environment == expect.environment,
            f"worker {node} runs {expect.environment} ({ANNOTATION_ENVIRONMENT}: {w.environment})",
        )
    every.settle(f"the owner's records: {sorted(infos)}")
