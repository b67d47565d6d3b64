"""T3: task-profile initialization is complete and consistent on every worker.

Requirement: each worker's profile has the expected schema, its completion marker, the deployed runtime revision,
the deployed image, mode and PATH policy, at least one Flox PATH entry rooted in the realized environment, and only
allow-listed exports.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.settings import TASK_PROFILE_SCHEMA

from ._support import read_profiles, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T3]


@pytest.fixture
def profiles(submit, workers):
    return read_profiles(submit, workers)


def test_profile_is_complete_on_every_worker(profiles, workers):
    found, res = profiles
    requirement(set(found) == set(workers), "every worker's task can read its profile", res)
    for node, files in found.items():
        requirement("__missing__" not in files, f"{node}: all profile files present", res)
        requirement(files.get("schema") == [TASK_PROFILE_SCHEMA], f"{node}: schema {TASK_PROFILE_SCHEMA}", res)
        requirement(len(files.get("revision", [])) == 1, f"{node}: completion marker (revision) written", res)


def test_profile_matches_the_deployment(profiles, expect):
    found, res = profiles
    s = expect.settings
    for node, files in found.items():
        requirement(files.get("revision") == [expect.revision], f"{node}: revision {expect.revision}", res)
        requirement(files.get("image") == [expect.image], f"{node}: image {expect.image}", res)
        requirement(files.get("activate-mode") == [s.worker_flox_activate_mode], f"{node}: activation mode", res)
        requirement(files.get("path-precedence") == [s.worker_path_precedence], f"{node}: PATH policy", res)
        realized = (files.get("realized-path") or ["?"])[0]
        entries = files.get("path", [])
        requirement(
            bool(entries) and all(e == realized or e.startswith(realized + "/") for e in entries),
            f"{node}: PATH entries all rooted in the realized environment {realized}",
            res,
        )


def test_profile_exports_only_allow_listed_variables(profiles, expect):
    found, res = profiles
    allowed = set(expect.settings.worker_env_exports)
    for node, files in found.items():
        names = {line.partition("=")[0] for line in files.get("exports", [])}
        requirement(names <= allowed, f"{node}: exports {sorted(names)} within allow-list {sorted(allowed)}", res)
        requirement(all("\r" not in line for line in files.get("exports", [])), f"{node}: single-line values", res)


def test_profile_is_identical_across_the_cohort(profiles):
    found, res = profiles
    shapes = {node: {k: v for k, v in files.items()} for node, files in found.items()}
    requirement(
        len({repr(sorted(v.items())) for v in shapes.values()}) == 1,
        "every worker of the cohort carries the same profile",
        res,
    )
