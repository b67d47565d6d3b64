"""Integration (issue 26): a healthy local cluster signs off, and the same cluster with one mutation does not.

One private 3-worker deployment, brought up the way a user signs one off (``--slurmflox-up=local -m acceptance
--slurmflox-signoff``). That run must exit 0 with ``SIGNED OFF (profile local; not applicable: ...)`` naming what a
cluster without Kubernetes cannot show, as NOT APPLICABLE in evidence.json and JUnit, never as PASS. Then worker2's
TaskProlog (not the first worker) also exports a loader path: the same full sign-off must end NOT SIGNED OFF and
non-zero because of that worker, and nothing else. And a sign-off asked with one check of a required group
deselected (``-k "not mpi_ranks"``) is NOT SIGNED OFF naming that check (#40).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from acceptance_helpers import (
    LOCAL_MISSING_CAPABILITIES,
    deployed,
    group_verdicts,
    mutated,
    run_checks,
    run_pytest,
    task_prolog_exporting,
)

from pytest_slurmflox.reporting.validation import validate_evidence, validate_junit

pytestmark = pytest.mark.integration

SIGNOFF = ("-m", "acceptance", "--slurmflox-signoff")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "signoff", "--slurmflox-compute-replicas=3", *SIGNOFF) as recorded:
        yield recorded


def _artifacts(output: str) -> Path:
    found = re.search(r"slurmflox: artifacts in (\S+): ", output)
    assert found, output[-3000:]
    return Path(found.group(1))


def test_healthy_local_cluster_is_signed_off_naming_what_does_not_apply(deployment):
    home, _, _, run = deployment
    print(run.output[-5000:])
    line = re.search(r"^verdict for run \S+: (.*) \(sign-off requested", run.output, re.M)
    assert line and line.group(1).startswith("SIGNED OFF (profile local; not applicable: T1, "), run.output[-5000:]
    assert "T4: 1 check" in line.group(1) and "T10: 1 check" in line.group(1), line.group(1)
    assert run.rc == 0, run.output[-5000:]
    verdicts = group_verdicts(run.output)
    assert verdicts["T1"] == "NOT APPLICABLE" and all(v == "PASS" for g, v in verdicts.items() if g != "T1"), verdicts
    artifacts = _artifacts(run.output)
    evidence = json.loads((artifacts / "evidence.json").read_text())
    junit = min(home.glob("junit-*.xml"))  # run_pytest's --junitxml: the first is the sign-off run's
    assert validate_evidence(artifacts / "evidence.json") == [] and validate_junit(junit) == []
    assert 'name="slurmflox_profile" value="local"' in junit.read_text()
    assert evidence["run"]["verdict"] == "SIGNED OFF" and evidence["run"]["profile"]["name"] == "local"
    assert evidence["run"]["verdict_line"] == line.group(1)
    na = [c for c in evidence["checks"] if c["verdict"] == "NOT APPLICABLE"]
    needs = tuple(f"missing capability {cap}" for cap in LOCAL_MISSING_CAPABILITIES)
    assert na and all(any(n in c["skip_reason"] for n in needs) for c in na), na
    # nothing was skipped as such: every SKIP a local cluster has needs what it lacks, and those are not applicable
    assert [c["nodeid"] for c in evidence["checks"] if c["verdict"] in ("SKIP", "FAIL", "NOT RUN")] == []
    # JUnit: the same checks as skipped cases whose message says not applicable
    skipped = [m for o, m in run.cases.values() if o == "skipped"]
    assert len(skipped) == len(na) and all(m.startswith("not applicable (profile local: ") for m in skipped), skipped


def test_one_broken_worker_keeps_the_same_cluster_not_signed_off(deployment):
    breaks = task_prolog_exporting("export LD_LIBRARY_PATH=/opt/sfx-loader")
    run = mutated(deployment, {"worker2": breaks}, *SIGNOFF)
    print(run.output[-5000:])
    assert run.rc != 0, run.output[-5000:]
    assert re.search(r"^verdict for run \S+: NOT SIGNED OFF \(profile local; ", run.output, re.M), run.output[-5000:]
    evidence = json.loads((_artifacts(run.output) / "evidence.json").read_text())
    reasons = evidence["run"]["verdict_reasons"]
    assert any(r.startswith("required group TP is FAIL") for r in reasons), reasons
    # the mutation is the reason, and the only one: nothing skipped or did not run, only FAILs naming worker2
    assert all(" is FAIL: " in r or " FAILED: " in r for r in reasons), reasons
    assert "LD_LIBRARY_PATH='/opt/sfx-loader'" in run.messages() and "worker2" in run.messages(), run.output[-5000:]


def test_declared_admin_that_does_not_work_fails_t10_and_td(deployment, tmp_path):
    """#26: the same cluster described with an admin login that cannot log in. T10's key-presence part and TD's
    directory queries need the declared admin: they FAIL naming it (before: T10 returned early, a PASS, and TD
    quietly asked from the login endpoint instead)."""
    home, workdir, _, _ = deployment
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["admin"] = {**doc["admin"], "user": "sfxnoadmin"}
    broken = tmp_path / "target.yaml"
    broken.write_text(yaml.safe_dump(doc))
    run = run_pytest(home, f"--slurmflox-target={broken}", "-m", "T10 or TD", timeout=600)
    failed = run.outcomes("failure") + run.outcomes("error")
    assert "test_t10_isolation::test_tasks_cannot_read_node_secrets" in failed, run.output[-3000:]
    assert any(f.startswith("test_td_directory::") for f in failed), run.output[-3000:]
    assert "declared capability admin answers" in run.messages() + run.messages("error"), run.output[-3000:]


def test_a_deselected_check_of_a_required_group_is_named_and_signs_nothing_off(deployment):
    """#40 item 3 with the real suites under the plugin's default xdist workers: ``-k "not mpi_ranks"`` leaves T6
    its plugin check; T6 is NOT RUN naming the checks it did not run (the start and the talking check), never PASS on
    the one that did."""
    run = run_checks(deployment, "-m", "T6", "--slurmflox-signoff", "-k", "not mpi_ranks")
    assert run.rc != 0, run.output[-3000:]
    assert [c.rsplit("::", 1)[-1] for c in run.outcomes("passed")] == ["test_the_declared_mpi_plugin_is_offered"], (
        run.output[-3000:]
    )
    evidence = json.loads((_artifacts(run.output) / "evidence.json").read_text())
    t6 = next(g for g in evidence["groups"] if g["group"] == "T6")
    assert t6["verdict"] == "NOT RUN" and t6["counts"]["PASS"] == 1, t6
    left_out = sorted(c["nodeid"].rsplit("::", 1)[-1] for c in t6["left_out"])
    assert left_out == ["test_mpi_ranks_on_every_worker", "test_mpi_ranks_talk_between_every_pair_of_workers"], t6
    reasons = [r for r in evidence["run"]["verdict_reasons"] if r.startswith("required group T6 is NOT RUN")]
    assert reasons and all(name in reasons[0] for name in left_out), evidence["run"]["verdict_reasons"]
    assert validate_evidence(_artifacts(run.output) / "evidence.json") == []
