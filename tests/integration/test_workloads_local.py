"""Integration: a workload corpus with one passing and one failing script, run as group TW against a real local
cluster, yields one PASS and one FAIL, each with the script's own output as evidence."""

from __future__ import annotations

import json

import pytest

from pytest_slurmflox.reporting.artifacts import ReportPaths
from pytest_slurmflox.reporting.validation import validate_evidence, validate_junit

pytestmark = pytest.mark.integration

PASSING = """#!/bin/bash
#SBATCH --ntasks=1
echo "workload-pass on $(hostname) as $(id -un)"
"""
PASSING_SIDECAR = "output_pattern: '^workload-pass on worker[0-9]+ as '\nnodes: 1\ntime_bound: 120\n"
FAILING = """#!/bin/bash
#SBATCH --ntasks=1
echo "workload-fail: about to exit 7"
exit 7
"""


def test_one_pass_one_fail_with_output_as_evidence(tmp_path_factory):
    """``pytest --slurmflox-up=local`` provisions a cluster in a temp work dir and runs the corpus in one go;
    ``--slurmflox-destroy`` removes it again."""
    from test_report_local import _free_port, pytest_run, require_local_substrate

    require_local_substrate()
    corpus = tmp_path_factory.mktemp("corpus")
    (corpus / "passes.sh").write_text(PASSING)
    (corpus / "passes.sh.yaml").write_text(PASSING_SIDECAR)
    (corpus / "fails.sh").write_text(FAILING)
    cwd = tmp_path_factory.mktemp("run")
    workdir = tmp_path_factory.mktemp("workloads-local")
    try:
        proc = pytest_run(
            "--slurmflox-up=local",
            f"--slurmflox-workdir={workdir}",
            f"--slurmflox-login-ssh-port={_free_port()}",
            "--pyargs",
            "pytest_slurmflox.suites",
            "--slurmflox-groups=TW",
            f"--slurmflox-workloads={corpus}",
            "--slurmflox-signoff",
            f"--slurmflox-reports={cwd / 'reports'}",
            "--slurmflox-run-id=wl",
            cwd=cwd,
        )
    finally:
        destroyed = pytest_run("--slurmflox-destroy", f"--slurmflox-workdir={workdir}", cwd=cwd, timeout=600)
    assert destroyed.returncode == 0 and not (workdir / "target.yaml").exists(), destroyed.stdout[-2000:]
    paths = ReportPaths(cwd / "reports" / "wl")
    assert paths.evidence.is_file(), proc.stdout[-3000:]
    assert validate_evidence(paths.evidence) == [] and validate_junit(paths.junit) == []
    doc = json.loads(paths.evidence.read_text())
    assert doc["run"]["target"]["Substrate"] == "local"
    checks = {c["nodeid"].rsplit("::", 1)[-1]: c for c in doc["checks"]}
    assert sorted(checks) == ["test_workload[fails.sh]", "test_workload[passes.sh]"]
    passed, failed = checks["test_workload[passes.sh]"], checks["test_workload[fails.sh]"]
    assert passed["verdict"] == "PASS" and passed["group"] == "TW", passed.get("failure")
    assert failed["verdict"] == "FAIL" and failed["group"] == "TW"
    assert "exits with 0" in failed["failure"] and "ExitCode 7:0" in failed["failure"]

    def outputs(check: dict) -> str:
        return "\n".join(r["stdout"] for r in check["evidence"] if r["command"].startswith("cat "))

    assert "workload-pass on worker" in outputs(passed)
    assert "workload-fail: about to exit 7" in outputs(failed)
    assert all(r["user"] == doc["run"]["target"]["Login endpoint"].split("@")[0] for r in failed["evidence"])
    # TW is required (a corpus was given) and failed: no sign-off, non-zero exit
    tw = next(g for g in doc["groups"] if g["group"] == "TW")
    assert tw["required"] and tw["verdict"] == "FAIL"
    assert tw["counts"] == {"PASS": 1, "FAIL": 1, "SKIP": 0, "NOT APPLICABLE": 0}
    assert doc["run"]["verdict"] == "NOT SIGNED OFF" and proc.returncode == 1
