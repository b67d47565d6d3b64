"""session.py as pytest drives it (pytester, in process): where a run finds its target when none is named (the
deployment recorded in the work dir), what the header says when that file cannot be read, which checks are not
even collected, and what travels with each selected check's report.

Provisioning (``--slurmflox-up``) is not run here: bringing a cluster up belongs to the integration files.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

CHECKS = """
import pytest

def test_plain():
    pass

@pytest.mark.acceptance
@pytest.mark.T3
def test_t3():
    pass

@pytest.mark.acceptance
@pytest.mark.TW
def test_tw():
    pass
"""


def _record(workdir: Path, target: Path | None, substrate: str = "local") -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    record = {"substrate": substrate, "target": str(target) if target else None, "up_at": 0}
    (workdir / "deployment.json").write_text(json.dumps(record))


def test_a_bare_run_takes_the_target_recorded_in_the_work_dir(pytester: pytest.Pytester):
    pytester.makepyfile("def test_x(): pass")
    key = pytester.path / "id"
    key.write_text("not read by the header\n")
    target = pytester.path / "deployed.yaml"
    target.write_text(f"version: 1\nname: rec\nsubstrate: local\nlogin: {{host: 127.0.0.1, user: u, key: {key}}}\n")
    workdir = pytester.path / "wd"
    _record(workdir, target)
    result = pytester.runpytest(f"--slurmflox-workdir={workdir}")
    result.stdout.fnmatch_lines(
        [f"slurmflox: target {target} (recorded in {workdir}/deployment.json), substrate local"]
    )
    assert result.ret == pytest.ExitCode.OK


def test_an_unreadable_target_is_named_in_the_header_and_the_run_goes_on(pytester: pytest.Pytester):
    pytester.makepyfile("def test_x(): pass")
    target = pytester.path / "broken.yaml"
    target.write_text("version: 1\nname: broken\n")  # no login
    workdir = pytester.path / "wd"
    _record(workdir, target)
    result = pytester.runpytest(f"--slurmflox-workdir={workdir}")
    result.stdout.fnmatch_lines(["slurmflox: target file unreadable: *login*"])
    assert result.ret == pytest.ExitCode.OK


def test_a_failed_up_recorded_without_a_target_leaves_the_run_without_one(pytester: pytest.Pytester):
    """``up`` records the deployment before it starts (deploy.py); until it wrote a target there is none to test."""
    pytester.makepyfile("def test_x(): pass")
    workdir = pytester.path / "wd"
    _record(workdir, None)
    result = pytester.runpytest(f"--slurmflox-workdir={workdir}")
    result.stdout.fnmatch_lines(["slurmflox: no target; runtime revision of current settings *"])
    assert "slurmflox: target " not in result.stdout.str()


def test_a_workload_check_is_not_collected_without_workloads(pytester: pytest.Pytester):
    pytester.makepyfile(CHECKS)
    result = pytester.runpytest("-m", "acceptance")
    result.stdout.fnmatch_lines(["collected 2 items / 1 deselected / 1 selected"])  # test_tw does not exist here
    result.assert_outcomes(passed=1, deselected=1)


def test_the_acceptance_selection_is_summed_up_once_with_its_reason(pytester: pytest.Pytester):
    pytester.makepyfile(CHECKS)
    result = pytester.runpytest()
    lines = [line for line in result.stdout.lines if "deselected:" in line and line.startswith("slurmflox:")]
    assert lines == [
        "slurmflox: 1 acceptance check(s) deselected: acceptance not requested "
        "(use -m acceptance, --slurmflox-groups or a target)"
    ]
    result.assert_outcomes(passed=1, deselected=1)


def test_each_selected_check_carries_its_group_in_the_junit_report(pytester: pytest.Pytester):
    pytester.makepyfile(CHECKS)
    junit = pytester.path / "junit.xml"
    pytester.runpytest("-m", "acceptance", f"--junitxml={junit}").assert_outcomes(passed=1, deselected=1)
    cases = ET.parse(junit).getroot().iter("testcase")
    groups = {
        case.get("name"): [p.get("value") for p in case.iter("property") if p.get("name") == "slurmflox_group"]
        for case in cases
    }
    assert groups == {"test_t3": ["T3"]}
