"""The Kubernetes-side acceptance checks, run on objects rendered from the real Slinky chart.

A correct rendering passes them; a rendering without the RuntimeClass, the toleration or the environment annotation
fails them. This is what proves the T1/T2/T10 checks can fail, without a Kubernetes API on this machine.
"""

from __future__ import annotations

import copy

import pytest

from pytest_slurmflox.judges.kubechecks import (
    cohort_problems,
    nodeset_pod,
    nodeset_problems,
    placement_problems,
    worker_template_problems,
)
from pytest_slurmflox.model.revision import runtime_revision
from pytest_slurmflox.model.settings import resolve

pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: cannot render the Slinky chart")
from pytest_slurmflox.substrates.qemu.render import chart as rc
from pytest_slurmflox.substrates.qemu.render import values as rv

CHARTS_ROOT = rc.default_charts_root()
CHARTS = rc.find_slurm_charts(CHARTS_ROOT) if CHARTS_ROOT.is_dir() else {}
if not CHARTS:
    pytest.skip(f"no Slinky slurm chart below {CHARTS_ROOT} (set {rc.CHARTS_ENV})", allow_module_level=True)


@pytest.fixture(scope="module", params=sorted(CHARTS))
def rendered(request):
    settings = resolve(
        cli={"WORKER_FLOX_ENV": "myorg/hpc", "WORKER_FLOX_GENERATION": "17", "TEST_IDENTITY": "0"}
    ).settings
    values = rv.render_slurm_values(settings, chart_version=request.param)
    objects = rc.render_chart(CHARTS[request.param], values)
    nodesets = [o for o in objects if o["kind"] == "NodeSet"]
    assert len(nodesets) == 1
    return settings, nodesets[0]


def _expected(settings):
    return {
        "environment": settings.worker_flox_ref,
        "revision": runtime_revision(settings),
        "image": settings.worker_image,
        "activate_mode": settings.worker_flox_activate_mode,
    }


def test_correct_rendering_passes(rendered):
    settings, nodeset = rendered
    assert nodeset_problems(nodeset, **_expected(settings)) == []


def test_missing_runtimeclass_fails(rendered):
    settings, nodeset = rendered
    broken = copy.deepcopy(nodeset)
    del broken["spec"]["template"]["spec"]["runtimeClassName"]
    problems = worker_template_problems(broken["spec"]["template"], **_expected(settings))
    assert any("runtimeClassName" in p for p in problems)


def test_missing_toleration_fails(rendered):
    _, nodeset = rendered
    broken = copy.deepcopy(nodeset)
    broken["spec"]["template"]["spec"]["tolerations"] = []
    assert any("toleration" in p for p in placement_problems(broken["spec"]["template"]))


def test_missing_environment_annotation_fails(rendered):
    settings, nodeset = rendered
    broken = copy.deepcopy(nodeset)
    del broken["spec"]["template"]["metadata"]["annotations"]["flox.dev/environment"]
    assert any("flox.dev/environment" in p for p in nodeset_problems(broken, **_expected(settings)))


def test_other_generation_fails(rendered):
    settings, nodeset = rendered
    expected = {**_expected(settings), "environment": "myorg/hpc:18"}
    assert any("flox.dev/environment" in p for p in nodeset_problems(nodeset, **expected))


def test_plain_upstream_pods_name_each_reference_addition_once(rendered):
    """Pods of a NodeSet rendered with plain upstream values plus the Flox RuntimeClass and annotation: what the
    reference design adds (the revision annotation, the task-profile init container) is named once, as missing,
    with where it comes from; what they do carry is not reported."""
    settings, nodeset = rendered
    pods = []
    for i in range(3):
        pod = copy.deepcopy(nodeset_pod(nodeset))
        del pod["metadata"]["annotations"]["slinky.local/runtime-revision"]
        pod["spec"]["initContainers"] = []
        pod["metadata"]["name"] = f"slurm-worker-compute-{i}"
        pod["spec"]["nodeName"] = f"n{i}"
        pods.append(pod)
    problems = cohort_problems(pods, lambda p: worker_template_problems(p, **_expected(settings)))
    assert len(problems) == 2, problems
    assert all(
        p.startswith("every worker pod (3): ") and "is missing: the reference design adds it" in p for p in problems
    )
    assert any("slinky.local/runtime-revision" in p and "metadata.annotations" in p for p in problems)
    assert any("flox-task-profile-init" in p and "podSpec.initContainers" in p for p in problems)
    pods[1]["metadata"]["annotations"]["flox.dev/environment"] = "myorg/hpc:18"  # one worker at another generation
    problems = cohort_problems(pods, lambda p: worker_template_problems(p, **_expected(settings)))
    assert "pod slurm-worker-compute-1 on node n1: annotation flox.dev/environment is 'myorg/hpc:18'" in problems[-1]


def test_an_absent_activate_mode_is_floxs_default_run_and_another_declared_mode_fails(rendered):
    """Plain upstream values carry only Flox's environment annotation: with no ``flox.dev/activate-mode`` Flox
    activates in run mode (flox.dev docs, imageless-kubernetes/config), so a declared ``run`` is met and only a
    declared ``dev`` is a problem; a written mode other than the declared one still fails."""
    settings, nodeset = rendered
    template = copy.deepcopy(nodeset_pod(nodeset))
    del template["metadata"]["annotations"]["flox.dev/activate-mode"]
    assert worker_template_problems(template, **{**_expected(settings), "activate_mode": "run"}) == []
    dev = worker_template_problems(template, **{**_expected(settings), "activate_mode": "dev"})
    assert dev == ["annotation flox.dev/activate-mode is None, not 'dev'"], dev
    template["metadata"]["annotations"]["flox.dev/activate-mode"] = "dev"
    run = worker_template_problems(template, **{**_expected(settings), "activate_mode": "run"})
    assert run == ["annotation flox.dev/activate-mode is 'dev', not 'run'"], run
