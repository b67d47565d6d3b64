"""T2: generation-pinned realization inside every worker.

Requirement: each worker realized exactly the pinned environment reference (owner/name:generation), the realized
path is the same on every worker of the cohort and exists there, and the worker's owner reports the same pin.
"""

from __future__ import annotations

import re

import pytest

from ._support import read_profiles, require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T2]


def test_every_worker_realized_the_pinned_generation(submit, workers, expect):
    profiles, res = read_profiles(submit, workers)
    requirement(set(profiles) == set(workers), "every worker answers with its task profile", res)
    for node, files in profiles.items():
        env = files.get("environment", [])
        requirement(env == [expect.environment], f"{node} realized {expect.environment}", res)
        requirement(
            re.fullmatch(r".+/.+:[1-9][0-9]*", env[0]) is not None,
            f"{node}'s environment reference carries a generation",
            res,
        )


def test_realized_path_is_consistent_across_the_cohort(submit, workers):
    profiles, res = read_profiles(submit, workers)
    paths = {node: tuple(files.get("realized-path", [])) for node, files in profiles.items()}
    requirement(
        len(set(paths.values())) == 1 and all(len(p) == 1 for p in paths.values()),
        "one realized path across the whole cohort",
        res,
    )
    path = next(iter(paths.values()))[0]
    check = submit.srun(
        f"-N{len(workers)} --ntasks-per-node=1 -w {','.join(workers)}",
        f"bash -c 'test -d {path} && test -x {path}/bin'",
    )
    requirement(check.ok, f"realized path {path} exists on every worker", check)


def test_worker_owner_reports_the_pin(target, expect):
    require(target, "worker-pool")
    workers = target.pool.workers()
    requirement(bool(workers), "the pool lists workers", str(workers))
    for w in workers:
        requirement(w.environment == expect.environment, f"worker {w.name} annotated with {expect.environment}", str(w))


def test_pod_annotation_pins_the_generation(target, expect):
    require(target, "kubernetes")
    nodeset = target.kube.nodeset(target.spec.kubernetes.nodeset)
    annotations = nodeset["spec"]["template"]["metadata"].get("annotations", {})
    requirement(
        annotations.get("flox.dev/environment") == expect.environment,
        "the NodeSet pod template pins the environment with its generation",
        str(annotations),
    )
