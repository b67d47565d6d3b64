"""T2: generation-pinned realization inside every worker, proven by content.

Requirement: every worker of the cohort realized exactly the pinned environment (owner/name:generation declared in
the target file) and what it has at its realized path is that generation's content, byte for byte.

Where the expectations come from (never from a file the worker wrote):

- the pinned reference: the target file's ``expect.settings`` (WORKER_FLOX_ENV, WORKER_FLOX_GENERATION); that it
  is ``owner/name:generation`` is no check here: the settings validators refuse any other target file;
- the content: the runtime provider's own record of the realized generation (local: the content digest, store
  entry and reference the local runtime provider recorded on the host when it realized ``local/<name>:<gen>``,
  read through the worker pool; an existing cluster: the target file's declared ``runtime``, its realized path,
  ``content_digest`` and ``nar_hash``). A task on each worker recomputes the digest of what is really at the recorded
  realized path with the provider's own listing (runtime.DIGEST_SH) and must match;
- the cohort: what Slurm lists in the partition, cross-checked with the owner (suites/conftest.py ``workers``).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.model.declared import ENV
from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX
from pytest_slurmflox.substrates.local.runtime import DIGEST_SH

from ._capability import EveryWorker, declared, declared_nodeset, requirement
from ._cohort import cohort
from ._marks import on_each, per_node
from ._nixstore import declared_store_problems, flox_lock_check, local_store_problems
from ._records import runtimes

pytestmark = [pytest.mark.acceptance, pytest.mark.T2]


def test_cohort_is_what_slurm_lists_and_the_owner_owns(target):
    nodes, problems, evidence = cohort(target)
    requirement(bool(nodes) and not problems, "cohort: " + ("; ".join(problems) or "empty"), *evidence)


def test_every_worker_has_the_pinned_generations_content(target, submit, workers, expect):
    declared(target, *ENV)  # what is compared with comes first: undeclared is NOT RUN naming the key
    records = runtimes(target, workers, expect.settings.worker_flox_activate_mode, submit)
    for node, rt in records.items():
        requirement(
            rt.ref == expect.environment,
            f"{node}: the runtime provider realized {expect.environment} for it (it realized {rt.ref})",
            str(rt),
        )
    undigested = sorted(node for node, rt in records.items() if not rt.content_digest)
    if undigested and target.spec.runtime is not None:
        pytest.skip(
            f"{NOT_RUN_PREFIX}the target file does not declare runtime.content_digest (target {target.spec.name!r})"
        )
    if undigested:
        pytest.skip(
            "missing capability content-record: the runtime provider keeps no content digest for "
            f"{', '.join(undigested)} (the Flox shim's lock metadata is not compared yet)"
        )
    cases = " ".join(quoted("%s) d=%s;;", node, rt.realized_path) for node, rt in records.items())
    digest = quoted("%s", DIGEST_SH)
    script = f'case "$SLURMD_NODENAME" in {cases} *) d=/nonexistent;; esac; /bin/bash -c {digest} digest "$d"'
    res = on_each(submit, workers, script)
    seen = per_node(res)
    for node, rt in records.items():
        got = seen.get(node, ["<no answer>"])
        requirement(
            got == [rt.content_digest],
            f"{node}: content at {rt.realized_path} is {expect.environment}'s (provider digest "
            f"{rt.content_digest}, worker has {got[-1]})",
            res,
        )


def test_every_worker_runs_the_pinned_nix_store_path_unmodified(target, submit, workers, expect):
    """Each worker runs from exactly the store paths of the pinned generation, unmodified (suites/_nixstore.py).

    Local: the path our code computes for the pinned generation, Nix's verify-path in the substrate's store, and on
    each worker what its profile points at, what its tasks were activated from and the NAR hash of what it has
    there. Declared runtime: the NAR hash of what each worker has at the declared realized path is the declared
    ``runtime.nar_hash``. Flox target: the generation's lock, identical across the cohort, its paths verified on
    each worker."""
    local = target.why_missing("nix-store-record") is None
    declared_runtime = target.spec.runtime is not None and target.spec.flox_lock is None
    if not local and not declared_runtime and target.why_missing("kubernetes") is not None:
        pytest.skip(
            "missing capability nix-store: no computed store path (local), no declared runtime (the target file's "
            "runtime section) and no Flox shim (Kubernetes)"
        )
    declared(target, *ENV)
    if not local and not declared_runtime:
        flox_lock_check(target, submit, workers, expect)
        return
    if local:
        expected, problems, res = local_store_problems(target, submit, workers, expect.environment)
    else:
        expected, problems, res = declared_store_problems(target, submit, workers)
    requirement(
        not problems,
        f"every worker runs from {expect.environment}'s store path {expected}, unmodified: " + "; ".join(problems),
        res,
    )


def test_realized_path_is_consistent_across_the_cohort(target, workers, expect):
    records = runtimes(target, workers, expect.settings.worker_flox_activate_mode)
    paths = {node: rt.realized_path for node, rt in records.items()}
    requirement(len(set(paths.values())) == 1, "one realized path across the whole cohort", str(paths))


@pytest.mark.per_worker
def test_worker_owner_reports_the_pin(target, expect, workers):
    require(target, "worker-pool")
    declared(target, *ENV)
    infos = {w.name: w for w in target.pool.workers()}
    every = EveryWorker(f"the owner records the pin on each of the {len(workers)} workers")
    for node in workers:
        w = infos.get(node)
        every.holds(node, w is not None and w.environment == expect.environment,
                    f"worker {node} annotated with {expect.environment} ({w})")  # fmt: skip
    every.settle(f"the owner's records: {sorted(infos)}")


def test_pod_annotation_pins_the_generation(target, expect):
    require(target, "kubernetes")
    nodeset = declared_nodeset(target)
    declared(target, *ENV)
    annotations = nodeset["spec"]["template"]["metadata"].get("annotations", {})
    requirement(
        annotations.get("flox.dev/environment") == expect.environment,
        "the NodeSet pod template pins the environment with its generation",
        str(annotations),
    )
