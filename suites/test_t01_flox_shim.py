"""T1: the Flox shim really executed on the slurmd CRI sandbox.

Requirement: every worker pod runs under RuntimeClass ``flox`` and its slurmd container was prepared by the shim
(the pinned environment is active in slurmd's own process), rather than starting from the plain image.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.checks import worker_template_problems

from ._support import require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T1, pytest.mark.needs_kube, pytest.mark.needs_flox]


def _worker_pods(target):
    require(target, "kubernetes")
    require(target, "flox-shim")
    pods = [p for p in target.kube.pods() if any(c.get("name") == "slurmd" for c in p["spec"]["containers"])]
    requirement(bool(pods), "the target runs slurmd worker pods", f"no slurmd pods in {target.spec.kubernetes}")
    return pods


def test_worker_pods_run_under_runtimeclass_flox(target, expect):
    for pod in _worker_pods(target):
        problems = worker_template_problems(
            pod,
            environment=expect.environment,
            revision=expect.revision,
            image=expect.image,
            activate_mode=expect.settings.worker_flox_activate_mode,
        )
        requirement(not problems, f"worker pod {pod['metadata']['name']} carries the runtime contract", *problems)


def test_slurmd_process_runs_inside_the_pinned_environment(target, expect):
    for pod in _worker_pods(target):
        name = pod["metadata"]["name"]
        res = target.kube.exec(
            name,
            "slurmd",
            'for p in /proc/[0-9]*; do if [ "$(cat $p/comm 2>/dev/null)" = slurmd ]; then '
            "tr '\\0' '\\n' < $p/environ | grep '^FLOX_ENV=' && exit 0; fi; done; exit 1",
        )
        requirement(
            res.ok and res.stdout.startswith("FLOX_ENV=/"),
            f"slurmd in {name} runs with the shim's FLOX_ENV (not the plain image)",
            res,
        )
