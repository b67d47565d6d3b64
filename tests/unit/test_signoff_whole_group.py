"""A sign-off needs every check of every required group (issue 40 item 3), in a real pytest run of fake checks.

The fake checks stand for a healthy cluster (every check passes); what is tested is the verdict over them when
some were not run: deselected by ``-k``, ``--deselect``, ``-m`` or ``--lf``, left out by the node ids named, in a
serial run and under pytest-xdist (where the workers collect and deselect and the controller decides). The
narrowing the project does itself stays honest: a destructive group not asked for, and a group this kind of target
never has (TF on a customer's Kubernetes cluster), block nothing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_slurmflox.model.groups import REQUIRED_GROUPS
from pytest_slurmflox.reporting.artifacts import ReportPaths
from pytest_slurmflox.reporting.outcome import BY_PYTEST, NOT_NAMED
from pytest_slurmflox.reporting.signoff import NOT_SIGNED_OFF, SIGNED_OFF
from pytest_slurmflox.reporting.validation import validate_evidence

#: One passing check per required group, a second one in T6 (the check -k leaves out), a destructive group's check
#: and a marked one (``slow``, for ``-m``); TW exists only with a workload corpus.
HEALTHY = (
    "import os\nimport pytest\n\npytestmark = pytest.mark.acceptance\n\n"
    + "".join(
        f"@pytest.mark.{group}\ndef test_healthy_{group.lower()}():\n    pass\n\n"
        for group in REQUIRED_GROUPS
        if group != "TW"
    )
    + "@pytest.mark.T6\ndef test_mpi_ranks():\n    assert not os.environ.get('SFX_BREAK')\n\n"
    + "@pytest.mark.T8\n@pytest.mark.slow\ndef test_slow_memory():\n    pass\n\n"
    + "@pytest.mark.T11R\ndef test_rerun_is_idempotent():\n    pass\n"
)


@pytest.fixture
def site(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A customer's Kubernetes target (profile kubernetes: TF is not applicable) and the healthy checks."""
    key = tmp_path / "id_site"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\nkind: Config\n")
    target = tmp_path / "target.yaml"
    target.write_text(
        "version: 1\nname: healthy-site\nsubstrate: existing\n"
        f"login: {{host: 127.0.0.1, port: 22, user: alice, key: {key}}}\n"
        f"kubernetes: {{kubeconfig: {kube}, namespace: slurm, nodeset: compute}}\n"
        f"expect: {{image: 'repo/worker:1@sha256:{'ab' * 32}'}}\n"
    )
    (tmp_path / "operator").mkdir()
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(tmp_path / "operator"))
    monkeypatch.delenv("SFX_BREAK", raising=False)
    pytester.makepyfile(test_healthy=HEALTHY)
    pytester.makeini("[pytest]\nmarkers =\n    slow: a slow check\n")
    return {"target": target, "reports": tmp_path / "reports"}


def signoff(pytester: pytest.Pytester, site: dict, run_id: str, *args: str, xdist: bool = False):
    """One sign-off run (a subprocess under xdist); (result, evidence.json, report paths)."""
    runner = pytester.runpytest_subprocess if xdist else pytester.runpytest_inprocess
    result = runner(
        "-p",
        "no:hypothesispytest",
        "-p",
        "no:randomly",
        f"--slurmflox-target={site['target']}",
        f"--slurmflox-reports={site['reports']}",
        f"--slurmflox-run-id={run_id}",
        "--slurmflox-signoff",
        *(("-n", "2") if xdist else ()),
        *args,
        # a target file alone means the installed suites: these fake checks are named (unless node ids are)
        *(() if _names_node_ids(args) else ("test_healthy.py",)),
    )
    paths = ReportPaths(site["reports"] / run_id)
    evidence = json.loads(paths.evidence.read_text()) if paths.evidence.exists() else {}
    return result, evidence, paths


def _names_node_ids(args: tuple[str, ...]) -> bool:
    """Whether ``args`` name node ids to run (a ``--deselect`` value is not one)."""
    return any("::" in a and (i == 0 or args[i - 1] != "--deselect") for i, a in enumerate(args))


def _group(evidence: dict, name: str) -> dict:
    return next(g for g in evidence["groups"] if g["group"] == name)


def test_the_whole_healthy_set_signs_off(pytester, site):
    """The baseline: nothing of a required group left out (the destructive group not asked for, as always)."""
    res, evidence, paths = signoff(pytester, site, "wg-whole")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    assert evidence["run"]["verdict"] == SIGNED_OFF
    assert _group(evidence, "T6")["left_out"] == [] and _group(evidence, "T6")["counts"]["PASS"] == 2
    assert validate_evidence(paths.evidence) == []


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_check_left_out_by_k_blocks_the_signoff_naming_it(pytester, site, xdist):
    res, evidence, paths = signoff(pytester, site, f"wg-k-{int(xdist)}", "-k", "not mpi_ranks", xdist=xdist)
    assert res.ret == pytest.ExitCode.TESTS_FAILED, res.stdout.str()
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF
    t6 = _group(evidence, "T6")
    assert t6["verdict"] == "NOT RUN" and t6["counts"]["PASS"] == 1
    assert t6["left_out"] == [{"nodeid": "test_healthy.py::test_mpi_ranks", "reason": BY_PYTEST}]
    why = f"required group T6 is NOT RUN: {BY_PYTEST}: test_mpi_ranks"
    assert evidence["run"]["verdict_reasons"] == [why]
    # the terminal summary and the HTML report name it too
    out = res.stdout.str()
    assert f"  - {why}" in out and f"verdict for run wg-k-{int(xdist)}: {NOT_SIGNED_OFF}" in out
    assert "test_mpi_ranks" in paths.html.read_text().split('id="results-table"')[0]
    assert validate_evidence(paths.evidence) == []


def test_deselect_and_m_block_the_same_way(pytester, site):
    res, evidence, _ = signoff(pytester, site, "wg-deselect", "--deselect", "test_healthy.py::test_mpi_ranks")
    assert res.ret == pytest.ExitCode.TESTS_FAILED and evidence["run"]["verdict"] == NOT_SIGNED_OFF
    assert [c["nodeid"] for c in _group(evidence, "T6")["left_out"]] == ["test_healthy.py::test_mpi_ranks"]
    res, evidence, _ = signoff(pytester, site, "wg-m", "-m", "acceptance and not slow")
    assert res.ret == pytest.ExitCode.TESTS_FAILED and evidence["run"]["verdict"] == NOT_SIGNED_OFF
    t8 = _group(evidence, "T8")
    assert t8["verdict"] == "NOT RUN" and [c["nodeid"] for c in t8["left_out"]] == ["test_healthy.py::test_slow_memory"]
    why = f"required group T8 is NOT RUN: {BY_PYTEST}: test_slow_memory"
    assert evidence["run"]["verdict_reasons"] == [why]


def test_lf_after_a_failure_runs_one_check_and_signs_nothing_off(pytester, site, monkeypatch):
    """``--lf`` (pytest's cache on): the rerun of the one check that failed passes, but the group's other check and
    every other group were not run again: no sign-off from a rerun of the failures."""
    monkeypatch.setenv("SFX_BREAK", "1")
    first, evidence, _ = signoff(pytester, site, "wg-lf-1")
    assert first.ret == pytest.ExitCode.TESTS_FAILED and evidence["run"]["verdict"] == NOT_SIGNED_OFF
    monkeypatch.delenv("SFX_BREAK")
    res, evidence, paths = signoff(pytester, site, "wg-lf-2", "--lf")
    assert "1 passed" in res.stdout.str()
    assert res.ret == pytest.ExitCode.TESTS_FAILED and evidence["run"]["verdict"] == NOT_SIGNED_OFF
    t6 = _group(evidence, "T6")
    assert t6["verdict"] == "NOT RUN" and t6["counts"]["PASS"] == 1
    assert t6["left_out"] == [{"nodeid": "test_healthy.py::test_healthy_t6", "reason": BY_PYTEST}]
    assert _group(evidence, "T3")["verdict"] == "NOT RUN"
    assert validate_evidence(paths.evidence) == []


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_node_ids_named_leave_the_rest_of_the_group_out(pytester, site, xdist):
    """``path::check`` collects one check of its module: the others are named as left out, not forgotten."""
    named = [f"test_healthy.py::test_healthy_{g.lower()}" for g in REQUIRED_GROUPS if g != "TW"]
    res, evidence, _ = signoff(pytester, site, f"wg-named-{int(xdist)}", *named, xdist=xdist)
    assert res.ret == pytest.ExitCode.TESTS_FAILED, res.stdout.str()
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF
    assert _group(evidence, "T6")["left_out"] == [{"nodeid": "test_healthy.py::test_mpi_ranks", "reason": NOT_NAMED}]
    assert [c["nodeid"] for c in _group(evidence, "T8")["left_out"]] == ["test_healthy.py::test_slow_memory"]
    assert {r.split(":")[0] for r in evidence["run"]["verdict_reasons"]} == {
        "required group T6 is NOT RUN",
        "required group T8 is NOT RUN",
    }


def test_what_the_project_narrows_itself_blocks_nothing(pytester, site):
    """A destructive group not asked for is no required group; a group the kind of target never has (TF on a
    customer's Kubernetes cluster) neither: leaving their checks out keeps the sign-off."""
    res, evidence, _ = signoff(pytester, site, "wg-own", "-k", "not healthy_tf")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    assert evidence["run"]["verdict"] == SIGNED_OFF
    assert _group(evidence, "TF")["verdict"] == "NOT APPLICABLE" and not _group(evidence, "TF")["required"]
    assert "T11R" not in {g["group"] for g in evidence["groups"]}


def test_the_groups_asked_for_stay_the_required_set(pytester, site):
    """``--slurmflox-groups`` narrows what runs, not what a sign-off needs: the groups not asked for are NOT RUN
    naming that option and each of their checks; the groups asked for are judged whole."""
    res, evidence, _ = signoff(pytester, site, "wg-groups", "--slurmflox-groups=T3,T6", "-k", "not mpi_ranks")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    assert _group(evidence, "T3")["verdict"] == "PASS"
    assert _group(evidence, "T6")["left_out"] == [{"nodeid": "test_healthy.py::test_mpi_ranks", "reason": BY_PYTEST}]
    t9 = _group(evidence, "T9")
    assert t9["reasons"] == ["NOT RUN: group not in --slurmflox-groups: test_healthy_t9"]


def test_the_verdict_names_a_dozen_checks_and_a_failure_stays_a_failure():
    """The pure verdict: a group that ran only part of itself is NOT RUN naming (at most a dozen of) the checks left
    out, all of them in ``left_out``; a group that FAILed stays FAIL whatever else it left out."""
    from pytest_slurmflox.reporting.signoff import FAIL, Check, decide

    checks = [Check("m.py::ok", "T6"), Check("m.py::bad", "T7", verdict=FAIL, reason="boom")]
    left = {f"m.py::t6_{i}": ("T6", BY_PYTEST) for i in range(14)} | {"m.py::t7": ("T7", BY_PYTEST)}
    verdict = decide(checks, requested=True, required_groups=("T6", "T7"), left_out=left)
    t6, t7 = (next(g for g in verdict.groups if g.group == name) for name in ("T6", "T7"))
    assert t6.verdict == "NOT RUN" and len(t6.left_out) == 14
    names = ", ".join(f"t6_{i}" for i in range(12))
    assert t6.reasons == (f"NOT RUN: {BY_PYTEST}: {names} and 2 more",)
    assert t7.verdict == FAIL and t7.left_out == (("m.py::t7", BY_PYTEST),)
    assert verdict.verdict == NOT_SIGNED_OFF and len(verdict.reasons) == 2
