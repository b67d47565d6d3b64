"""An observation several checks judge is made once in a run, and each check shows it as evidence
(suites/_shared.py)."""

from __future__ import annotations

import json

import pytest
from pytest_slurmflox.suites._marks import Marked
from pytest_slurmflox.suites._shared import decode, encode, results

from pytest_slurmflox.base.run import Result


def test_results_survive_the_record_as_themselves():
    step = Marked("srun ...", "login", "u", 0, "n|w1|x\n", "", 1.5, started=12.0, nonce="n")
    plain = Result("sinfo", "login", "u", 1, "", "no", 0.1, started=13.0)
    value = {"step": step, "steps": [plain, {"inner": step}], "base": "b", "ok": True, "missing": ["w2"]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == {"step": step, "steps": [plain, {"inner": step}], "base": "b", "ok": True, "missing": ["w2"]}
    assert type(back["step"]) is Marked and back["step"].nonce == "n"
    assert type(back["steps"][0]) is Result
    assert list(results(back)) == [step, plain, step]


CHECKS = """
import json
import pytest
from pathlib import Path
from pytest_slurmflox.base.run import Result
from pytest_slurmflox.suites._shared import observe_once

pytestmark = pytest.mark.acceptance

def observe():
    with open("observed.log", "a") as log:
        log.write("observed\\n")
    return {"step": Result("echo seen", "login", "u", 0, "seen", "", 0.5, started=100.0), "n": 1}

@pytest.mark.parametrize("i", range(3))
def test_judge(request, i):
    value = observe_once(request, "thing", observe)
    assert value["step"].stdout == "seen" and value["n"] == 1
"""


def _evidence_of(junit: str) -> list[list[dict]]:
    import xml.etree.ElementTree as ET

    cases = ET.parse(junit).getroot().iter("testcase")
    return [
        json.loads(p.get("value"))
        for case in cases
        for p in case.iter("property")
        if p.get("name") == "slurmflox_evidence"
    ]


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_three_checks_one_observation_each_shows_it(pytester: pytest.Pytester, args):
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest("-m", "acceptance", "-p", "no:randomly", "--junitxml=j.xml", *args)
    result.assert_outcomes(passed=3)
    assert (pytester.path / "observed.log").read_text().splitlines() == ["observed"]
    evidence = _evidence_of(str(pytester.path / "j.xml"))
    # the check that observed has no runner recording here (the fake step ran no command); the two readers show it
    assert sorted(len(e) for e in evidence) == [0, 1, 1]
    assert all(e[0]["command"] == "echo seen" and e[0]["started"] == 100.0 for e in evidence if e)


def test_a_run_that_may_change_the_cohort_observes_for_each_check(pytester: pytest.Pytester):
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest("-m", "acceptance", "-p", "no:randomly", "--slurmflox-destructive")
    result.assert_outcomes(passed=3)
    assert (pytester.path / "observed.log").read_text().splitlines() == ["observed"] * 3
