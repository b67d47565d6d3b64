"""T3: task-profile initialization is complete and right on every worker.

Requirement: each worker's profile has the expected schema and its completion marker, and every fact in it is the
one the deployment should have: the pinned environment, the image, the runtime revision, the activation mode and
PATH policy, the realized path, the environment's own PATH entries in their order, and exactly the allow-listed
variables with the values the environment defines.

Where the expectations come from (the profile is the thing under test, never its own reference):

- schema: our code (settings.TASK_PROFILE_SCHEMA);
- environment, image, activation mode, PATH policy, allow-list: the target file's ``expect`` section;
- revision: recomputed from the target's settings and image with our own revision code (expectations.py);
- realized path, PATH entries and exported values: the runtime provider's record of the realized generation
  (expectations.Runtime, read through the worker pool on the host), or on an existing cluster the target file's
  declared ``runtime`` (pytest_slurmflox/model/declaredruntime.py), which also names where the profile is
  (``runtime.profile_dir``) and the TaskProlog slurm.conf must name (``runtime.task_prolog``);
- fail-closed: the bad profiles are written here (suites/_failclosed.py) and the refusal is the TaskProlog
  contract's (exit non-zero, ``print slurmflox: task profile invalid: ...``, nothing exported), never the worker's;
  which TaskProlog runs is the declared ``runtime.task_prolog``, else the one each worker's slurm.conf names, and
  whether one must be named is the kind of target's (reporting/profiles.py: required but on profile existing).
"""

from __future__ import annotations

import re

import pytest

from pytest_slurmflox.judges.expectations import expected_exports, expected_revision
from pytest_slurmflox.model.declared import EXPORTS, MODE, REVISION_INPUTS
from pytest_slurmflox.model.settings import TASK_PROFILE_SCHEMA
from pytest_slurmflox.reporting.profiles import profile_of

from . import _failclosed
from ._capability import EveryWorker, declared, requirement
from ._cohort import across
from ._profile import profiles_once
from ._records import runtimes

pytestmark = [pytest.mark.acceptance, pytest.mark.T3]


@pytest.fixture
def profiles(request, target, cohort_hosts):
    """Every worker's profile as its task reads it: one reading in the run, judged by each check here and by T11's
    revision check (suites/_shared.py)."""
    return profiles_once(request, target, cohort_hosts)


@pytest.mark.per_worker
def test_profile_is_complete_on_every_worker(profiles, workers):
    found, res = profiles
    every = EveryWorker(f"the task profile is complete on each of the {len(workers)} workers")
    for node in workers:
        files = found.get(node)
        if not every.holds(node, files is not None, f"{node}: a task can read its profile"):
            continue
        every.holds(node, "__missing__" not in files, f"{node}: all profile files present")
        every.holds(node, files.get("schema") == [TASK_PROFILE_SCHEMA], f"{node}: schema {TASK_PROFILE_SCHEMA}")
        every.holds(node, len(files.get("revision", [])) == 1, f"{node}: completion marker (revision) written")
    every.settle(res)


@pytest.mark.per_worker
def test_profile_matches_the_declared_deployment(profiles, workers, expect, target):
    declared(target, *REVISION_INPUTS)
    found, res = profiles
    s = expect.settings
    revision = expected_revision(s, expect.image)
    declared_runtime = target.spec.runtime
    if declared_runtime is not None:  # the TaskProlog in force: slurm.conf's, as the controller reports it
        conf = target.login.run("scontrol show config")
        named = re.search(r"^TaskProlog\s*=\s*(\S*)", conf.stdout, re.M)
        got = named.group(1) if named else None
        requirement(
            got == declared_runtime.task_prolog,
            f"the TaskProlog in force is the declared runtime.task_prolog {declared_runtime.task_prolog} "
            f"(scontrol show config names {got})",
            conf,
        )
    every = EveryWorker(f"the task profile is the declared deployment's on each of the {len(workers)} workers")
    for node in workers:
        files = found.get(node, {})
        every.holds(node, files.get("environment") == [expect.environment], f"{node}: environment {expect.environment}")
        every.holds(node, files.get("revision") == [revision], f"{node}: revision {revision} (computed)")
        every.holds(node, files.get("image") == [expect.image], f"{node}: image {expect.image}")
        every.holds(node, files.get("activate-mode") == [s.worker_flox_activate_mode], f"{node}: activation mode")
        every.holds(node, files.get("path-precedence") == [s.worker_path_precedence], f"{node}: PATH policy")
    every.settle(res)


@pytest.mark.per_worker
def test_profile_path_is_the_environments_own_entries_in_order(profiles, target, workers, expect):
    found, res = profiles
    records = runtimes(target, workers, expect.settings.worker_flox_activate_mode)
    declared(target, MODE)
    every = EveryWorker(f"the task profile's paths are the environment's on each of the {len(records)} workers")
    for node, rt in records.items():
        files = found.get(node, {})
        every.holds(node, files.get("realized-path") == [rt.realized_path], f"{node}: realized path is the provider's "
                    f"{rt.realized_path}")  # fmt: skip
        every.holds(node, files.get("path") == list(rt.path), f"{node}: PATH entries are exactly the environment's, in "
                    f"order: {list(rt.path)}")  # fmt: skip
    every.settle(res)


@pytest.mark.per_worker
def test_profile_exports_exactly_the_allow_listed_values(profiles, target, workers, expect):
    found, res = profiles
    allow = expect.settings.worker_env_exports
    records = runtimes(target, workers, expect.settings.worker_flox_activate_mode)
    declared(target, MODE, EXPORTS)
    every = EveryWorker(f"the task profile exports the allow-list on each of the {len(records)} workers")
    for node, rt in records.items():
        lines = found.get(node, {}).get("exports", [])
        got = dict(line.partition("=")[::2] for line in lines)
        want = expected_exports(allow, rt)
        every.holds(node, len(got) == len(lines), f"{node}: each export appears once")
        extra = sorted(set(got) - set(want))
        missing = sorted(set(want) - set(got))
        wrong = sorted(n for n in set(got) & set(want) if got[n] != want[n])
        every.holds(
            node,
            not extra and not missing and not wrong,
            f"{node}: exports are exactly the allow-listed {sorted(want)} with the environment's values "
            f"(extra {extra}, missing {missing}, wrong {wrong}; allow-list {list(allow)})",
        )
    every.settle(res)


@pytest.mark.per_worker
def test_task_prolog_in_force_fails_closed_on_every_worker(target, submit, workers):
    """In one step on every worker, the TaskProlog that worker's slurm.conf has in force (on a target with a
    declared runtime: ``runtime.task_prolog``, which that slurm.conf must name; on a target silent about it: the
    one slurm.conf names there) is run, read-only, against profiles it must refuse (a missing directory, no
    revision marker, a multi-line value) in the task's private temporary directory: each refusal is a non-zero
    exit, the ``print slurmflox: task profile invalid:`` line and no directive. A worker whose TaskProlog would
    start a task without a valid profile is named. Where the reference's contract applies (profiles local, qemu,
    kubernetes: reporting/profiles.py) a worker whose slurm.conf names no TaskProlog FAILs, named; only a
    customer's Slurm cluster outside Kubernetes (profile existing) where no worker names one is NOT APPLICABLE."""
    runtime = target.spec.runtime
    declared_prolog = runtime.task_prolog if runtime is not None else ""
    step = across(submit, workers, _failclosed.probe_script(declared_prolog))
    named = {node: _failclosed.named(lines) for node, lines in step.lines.items()}
    if not declared_prolog and not any(named.values()) and _failclosed.CAPABILITY in profile_of(target.spec).absent:
        pytest.skip(
            f"missing capability {_failclosed.CAPABILITY}: no worker's slurm.conf names a TaskProlog, so none is in "
            f"force to fail closed (target {target.spec.name!r} declares no runtime.task_prolog)"
        )
    problems = step.wrong(lambda node, lines: _failclosed.judge(lines, declared_prolog))
    in_force = ", ".join(f"{node}: {prolog or 'none'}" for node, prolog in sorted(named.items()))
    requirement(
        not problems,
        f"the TaskProlog in force refuses every invalid profile on each of the {len(workers)} workers "
        f"({', '.join(_failclosed.CASES.values())}): " + "; ".join(problems),
        f"the TaskProlog in force: {in_force}",
        step.result,
        workers=problems.workers,
    )
