"""The report machinery end to end, in a real pytest subprocess with small fake acceptance checks.

The checks are fake on purpose (they are the input to the report code, which is what is tested here); the
commands they run are real local commands recorded through the session's evidence log, exactly as suites do.
A fake target file points at freshly generated secrets (an OpenSSH key, a munge key, a kubeconfig with a token and
client key) so redaction and the secret scan are exercised against real secret material.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from pytest_slurmflox.model import targetschema
from pytest_slurmflox.model.groups import CAPABILITY_GROUPS, REQUIRED_GROUPS
from pytest_slurmflox.model.secrets import scan_for_secrets, secret_needles
from pytest_slurmflox.reporting.artifacts import ReportPaths
from pytest_slurmflox.reporting.signoff import NOT_SIGNED_OFF, SIGNED_OFF
from pytest_slurmflox.reporting.validation import SCHEMA_ID, junit_document, validate_evidence, validate_junit

FAKE_CHECKS = r'''
import json
import os
import pytest
from pytest_slurmflox.base.run import LocalRunner

pytestmark = pytest.mark.acceptance


def sh(state, command):
    return LocalRunner(observer=state.evidence).run(command)


@pytest.mark.T3
def test_pass_with_long_output(slurmflox_state, request):
    sh(slurmflox_state, "echo begin; seq 1 3000; echo end-of-long-output").check()
    from pytest_slurmflox.judges.baselines import Sample
    from pytest_slurmflox.model.evidence import METRICS
    latency = float(os.environ.get("SFX_LATENCY", "31.5"))
    values = [Sample("mpi_latency", "w1->w2", latency).as_dict(), Sample("memory_triad", "w2", 4000.0).as_dict()]
    request.node.user_properties.append((METRICS, json.dumps(values)))
    from pytest_slurmflox.model.evidence import JUDGED
    request.node.user_properties.append((JUDGED, json.dumps(["configured: OverTimeLimit=8", "declared: 8"])))


@pytest.mark.T4
def test_fail_with_evidence(slurmflox_state):
    r = sh(slurmflox_state, "echo about-to-fail; echo oops >&2; exit 3")
    assert r.ok, r.describe()


@pytest.mark.T5
def test_skip_with_reason(slurmflox_state):
    sh(slurmflox_state, "echo probing")
    pytest.skip("missing capability kubernetes: the fake target has none")


@pytest.mark.T6
def test_leaky(slurmflox_state):
    """Tries every way a secret could reach an artifact: evidence, captured output, the failure message."""
    munge, key, kube = os.environ["SFX_MUNGE"], os.environ["SFX_KEY"], os.environ["SFX_KUBE"]
    r = sh(slurmflox_state, f"base64 -w0 {munge}; echo; cat {key}; cat {kube}")
    print(open(key).read())
    print(open(kube).read())
    assert False, r.stdout


@pytest.mark.T7
def test_plants_a_secret_in_the_reports(slurmflox_state):
    plant = os.environ.get("SFX_PLANT")
    if plant:
        data = base64.b64encode(open(os.environ["SFX_MUNGE"], "rb").read())
        with open(plant, "wb") as handle:
            handle.write(data)
'''.replace("import os\n", "import base64\nimport os\n", 1)


@pytest.fixture
def site(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Secrets, a work dir holding a munge key, and a target file that names the key and kubeconfig."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    key = secrets / "id_site"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kube = secrets / "kubeconfig"
    kube.write_text(
        "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
        f"    token: {base64.b32encode(os.urandom(20)).decode().lower()}\n"
        f"    client-key-data: {base64.b64encode(os.urandom(96)).decode()}\n"
    )
    workdir = tmp_path / "operator"
    workdir.mkdir()
    munge = workdir / "munge.key"
    munge.write_bytes(os.urandom(1024))
    target = tmp_path / "target.yaml"
    target.write_text(
        "version: 1\nname: fake-site\nsubstrate: existing\n"
        f"login: {{host: 127.0.0.1, port: 22, user: alice, key: {key}}}\n"
        f"kubernetes: {{kubeconfig: {kube}, namespace: slurm, nodeset: compute}}\n"
        f"expect: {{image: 'repo/worker:1@sha256:{'ab' * 32}'}}\n"
    )
    monkeypatch.setenv("SLURMFLOX_WORKDIR", str(workdir))
    monkeypatch.setenv("SFX_MUNGE", str(munge))
    monkeypatch.setenv("SFX_KEY", str(key))
    monkeypatch.setenv("SFX_KUBE", str(kube))
    monkeypatch.delenv("SFX_PLANT", raising=False)
    pytester.makepyfile(test_fake=FAKE_CHECKS)
    return {"target": target, "secrets": [munge, key, kube], "reports": tmp_path / "reports"}


def run(pytester: pytest.Pytester, site: dict, run_id: str, *args: str, subprocess: bool = False):
    """One acceptance run; in-process unless asked (the plugin keeps no module state, so that is faithful)."""
    runner = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
    result = runner(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        f"--slurmflox-target={site['target']}",
        f"--slurmflox-reports={site['reports']}",
        f"--slurmflox-run-id={run_id}",
        *args,
        str(pytester.path),  # the fake checks: without a path a target means the installed suites
    )
    paths = ReportPaths(site["reports"] / run_id)
    evidence = json.loads(paths.evidence.read_text()) if paths.evidence.exists() else None
    return result, paths, evidence


def _checks(evidence: dict) -> dict[str, dict]:
    return {c["nodeid"].rsplit("::", 1)[-1]: c for c in evidence["checks"]}


def test_a_saved_baseline_and_a_comparison_with_an_earlier_run(pytester, site, monkeypatch):
    """--slurmflox-save-baseline writes the run's figures as an expect.performance block the schema accepts (never
    over a file that exists); --slurmflox-compare prints a line per metric with both values and the ratio, FAIL
    where it regressed, in the terminal and the HTML report; an earlier run that is not there stops the run."""
    saved = site["reports"].parent / "baseline.yaml"
    result, paths, _ = run(pytester, site, "r-base", f"--slurmflox-save-baseline={saved}")
    result.stdout.fnmatch_lines([f"slurmflox: save-baseline: 2 metric(s) written to {saved} as expect.performance"])
    block = yaml.safe_load(saved.read_text())["expect"]["performance"]
    assert block["mpi_latency"] == {"reference": 31.5, "unit": "us", "upper": 63.0}
    doc = yaml.safe_load(site["target"].read_text())
    doc["expect"]["performance"] = block
    assert targetschema.problems(doc) == []
    result, _, _ = run(pytester, site, "r-base2", f"--slurmflox-save-baseline={saved}")
    result.stdout.fnmatch_lines([f"slurmflox: save-baseline: {saved} exists and is left as it is"])
    monkeypatch.setenv("SFX_LATENCY", "94.5")
    result, later, _ = run(pytester, site, "r-later", f"--slurmflox-compare={paths.root}")
    result.stdout.fnmatch_lines([
        "slurmflox: TB compare mpi_latency: before 31.5 us, now 94.5 us, ratio 3.00 (FAIL, regressed beyond x2 of *",
        "slurmflox: TB compare memory_triad: before 4000 MB/s, now 4000 MB/s, ratio 1.00 (within x0.5 of before)",
    ])  # fmt: skip
    assert "mpi_latency: before 31.5 us, now 94.5 us, ratio 3.00 (FAIL" in later.html.read_text()
    assert "mpi_latency: before 31.5 us, now 94.5 us, ratio 3.00 (FAIL" in later.evidence.read_text()
    missing = site["reports"].parent / "no-such-run.json"
    result = pytester.runpytest_inprocess(f"--slurmflox-target={site['target']}", f"--slurmflox-compare={missing}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert f"--slurmflox-compare: {missing}: " in said and "(nothing was run)" in said, said


def test_a_regression_is_a_tb_fail_in_the_verdict_and_the_evidence_and_no_baseline_is_saved(
    pytester, site, monkeypatch
):
    """Only passing checks selected: against a healthy earlier run the run exits 0 with the comparison a PASS of TB;
    with the latency tripled it exits non-zero, NOT SIGNED OFF under --slurmflox-signoff naming the regression,
    evidence.json (valid) holds the FAIL with both values, and --slurmflox-save-baseline writes nothing, in one line."""
    only = ("-k", "test_pass_with_long_output")
    _, earlier, _ = run(pytester, site, "r-healthy", *only)
    result, _, evidence = run(pytester, site, "r-same", *only, f"--slurmflox-compare={earlier.root}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    compared = next(c for c in evidence["checks"] if c["group"] == "TB")
    assert compared["verdict"] == "PASS" and {r["metric"] for r in compared["comparison"]} == {
        "mpi_latency",
        "memory_triad",
    }
    monkeypatch.setenv("SFX_LATENCY", "94.5")
    saved = site["reports"].parent / "degraded-baseline.yaml"
    args = (f"--slurmflox-compare={earlier.root}", f"--slurmflox-save-baseline={saved}", "--slurmflox-signoff")
    result, paths, evidence = run(pytester, site, "r-slow", *only, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    assert validate_evidence(paths.evidence) == []
    compared = next(c for c in evidence["checks"] if c["group"] == "TB")
    assert compared["verdict"] == "FAIL" and "mpi_latency: before 31.5 us, now 94.5 us" in compared["failure"]
    assert [r["metric"] for r in compared["comparison"] if r["regressed"]] == ["mpi_latency"]
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF
    assert any("regressed against the earlier run" in r for r in evidence["run"]["verdict_reasons"]), evidence["run"]
    assert not saved.exists()
    said = [line for line in result.stdout.lines if "save-baseline" in line]
    why = "TB did not PASS in this run (test_against_the_earlier_run FAIL)"
    assert said == [f"slurmflox: save-baseline: {saved} not written: {why}"], said


def test_artifacts_exist_and_validate(pytester, site):
    result, paths, evidence = run(pytester, site, "r-all")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for artifact in (paths.html, paths.junit, paths.evidence):
        assert artifact.is_file() and artifact.stat().st_size > 0, artifact
    assert validate_evidence(paths.evidence) == []
    assert validate_junit(paths.junit) == []
    assert evidence["schema"] == SCHEMA_ID and evidence["run"]["id"] == "r-all"
    checks = _checks(evidence)
    assert checks["test_pass_with_long_output"]["verdict"] == "PASS"
    # measured values (group TB) ride in a property of every phase's report and are kept once, schema-valid
    metrics = checks["test_pass_with_long_output"]["metrics"]
    assert [(m["metric"], m["subject"], m["unit"]) for m in metrics] == [
        ("mpi_latency", "w1->w2", "us"),
        ("memory_triad", "w2", "MB/s"),
    ]
    assert "metrics" not in checks["test_fail_with_evidence"]
    # what a check compared rides the same way: a PASS shows both values it was held to
    assert checks["test_pass_with_long_output"]["judged"] == ["configured: OverTimeLimit=8", "declared: 8"]
    assert "judged" not in checks["test_fail_with_evidence"]
    assert checks["test_fail_with_evidence"]["verdict"] == "FAIL"
    assert checks["test_skip_with_reason"]["verdict"] == "SKIP"
    assert "fake target has none" in checks["test_skip_with_reason"]["skip_reason"]
    assert checks["test_pass_with_long_output"]["requirement_id"].startswith("T3:")
    # evidence: command, where, as whom, exit status, output, duration
    (failing,) = checks["test_fail_with_evidence"]["evidence"]
    assert failing["exit_status"] == 3 and failing["stdout"] == "about-to-fail\n" and failing["stderr"] == "oops\n"
    assert failing["user"] and failing["where"] and failing["duration"] >= 0
    (long,) = checks["test_pass_with_long_output"]["evidence"]
    full = paths.root / long["stdout_file"]
    assert full.is_file() and full.read_text().endswith("end-of-long-output\n")
    # the environment rows known from the target file
    env = evidence["run"]["target"]
    assert env["Substrate"] == "existing" and env["Worker image digest"] == "sha256:" + "ab" * 32
    assert "fake-site" in env["Target"] and "Slurm version" in env
    # JUnit carries group and evidence per test case, and the verdict for the suite
    doc = junit_document(paths.junit)
    suite = doc["children"][0]
    suite_props = {p["attrib"]["name"]: p["attrib"]["value"] for p in suite["children"][0]["children"]}
    assert suite_props["slurmflox_verdict"] == NOT_SIGNED_OFF
    case = next(c for c in suite["children"] if c["attrib"].get("name") == "test_fail_with_evidence")
    props = {p["attrib"]["name"]: p["attrib"]["value"] for p in case["children"][0]["children"]}
    assert props["slurmflox_group"] == "T4" and json.loads(props["slurmflox_evidence"])[0]["exit_status"] == 3
    # HTML: summary on top of the results, evidence per test, long output linked
    page = paths.html.read_text()
    assert page.index('id="slurmflox-signoff"') < page.index('id="results-table"')
    assert "slurmflox-evidence" in page and long["stdout_file"] in page
    # terminal: the summary at the end
    out = result.stdout.str()
    assert "slurmflox sign-off summary" in out and f"verdict for run r-all: {NOT_SIGNED_OFF}" in out


EVERY_GROUP = "import pytest\n\npytestmark = pytest.mark.acceptance\n\n" + "".join(
    f"@pytest.mark.{group}\ndef test_every_group_{group.lower()}():\n    pass\n\n"
    for group in REQUIRED_GROUPS
    if group != "TW"
)


def test_signoff_passes_only_when_every_required_group_passed(pytester, site):
    pytester.makepyfile(test_every=EVERY_GROUP)
    (pytester.path / "test_fake.py").unlink()  # deselected, its checks would block (test_signoff_whole_group.py)
    ok, paths, evidence = run(pytester, site, "r-ok", "--slurmflox-signoff")
    assert ok.ret == pytest.ExitCode.OK, ok.stdout.str()
    assert evidence["run"]["verdict"] == SIGNED_OFF
    # TD, TA and TR check services this target file does not declare (directory, accounting, rest): they run,
    # but are not required; TF never applies to a customer's Kubernetes target (profile kubernetes, #26)
    not_required = {"TW", "TF", *CAPABILITY_GROUPS}
    assert evidence["run"]["profile"]["name"] == "kubernetes"
    assert evidence["run"]["verdict_line"].startswith("SIGNED OFF (profile kubernetes; not applicable: ")
    assert evidence["run"]["required_groups"] == [g for g in REQUIRED_GROUPS if g not in not_required]
    assert not any(g["required"] for g in evidence["groups"] if g["group"] in CAPABILITY_GROUPS)
    assert validate_evidence(paths.evidence) == []


def test_a_declared_service_group_is_required():
    """#13: a target that declares a directory needs TD to PASS; one that does not, does not."""
    from pytest_slurmflox.model.target import parse_target
    from pytest_slurmflox.reporting.signoff import required_for

    doc = {"login": {"host": "h", "user": "u", "key": "/k"}}
    assert "TD" not in required_for(parse_target(doc))
    doc["directory"] = {"uri": "ldap://ldap.example/", "base": "dc=example", "user": "u", "groups": ["hpc"]}
    assert "TD" in required_for(parse_target(doc))
    assert "TA" not in required_for(parse_target(doc))
    doc["accounting"] = {"account": "hpc"}
    assert "TA" in required_for(parse_target(doc))
    assert "TD" in required_for(None)  # an unreadable target signs nothing off without it


def test_a_required_group_left_out_by_k_is_not_run_and_blocks_signoff(pytester, site):
    """#11 item 5: the verdict covers every required group; one deselected by -k is NOT RUN, naming why."""
    pytester.makepyfile(test_every=EVERY_GROUP)
    res, paths, evidence = run(pytester, site, "r-k", "--slurmflox-signoff", "-k", "every_group and not t9")
    assert res.ret != pytest.ExitCode.OK
    groups = {g["group"]: g for g in evidence["groups"]}
    assert groups["T9"]["verdict"] == "NOT RUN" and groups["T9"]["required"]
    assert "deselected by this run's selection" in groups["T9"]["reasons"][0]
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF
    assert any(r.startswith("required group T9 is NOT RUN") for r in evidence["run"]["verdict_reasons"])
    assert validate_evidence(paths.evidence) == []


def test_signoff_fails_on_a_skip_even_when_nothing_failed(pytester, site):
    res, paths, evidence = run(pytester, site, "r-skip", "--slurmflox-signoff", "-k", "pass_with or skip_with")
    out = res.stdout.str()
    assert "1 passed, 1 skipped" in out
    assert res.ret != pytest.ExitCode.OK
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF and evidence["run"]["exit_status"] != 0
    groups = {g["group"]: g for g in evidence["groups"]}
    assert groups["T5"]["verdict"] == "SKIP" and groups["T3"]["verdict"] == "PASS"
    assert any("T5" in r for r in evidence["run"]["verdict_reasons"])
    assert validate_evidence(paths.evidence) == []


def test_without_signoff_a_skip_keeps_exit_zero_but_is_not_a_pass(pytester, site):
    res, _, evidence = run(pytester, site, "r-noso", "-k", "pass_with or skip_with")
    assert res.ret == pytest.ExitCode.OK
    assert evidence["run"]["verdict"] == NOT_SIGNED_OFF and not evidence["run"]["signoff_requested"]


def test_named_group_that_never_ran_blocks_signoff(pytester, site):
    res, _, evidence = run(pytester, site, "r-named", "--slurmflox-signoff", "--slurmflox-groups=T3,T8")
    assert res.ret != pytest.ExitCode.OK
    groups = {g["group"]: g for g in evidence["groups"]}
    assert groups["T8"]["verdict"] == "NOT RUN" and groups["T8"]["required"]


def test_no_secret_reaches_any_artifact(pytester, site):
    """The secret scan of every artifact of a run: clean, although a check tried to leak everything."""
    res, paths, evidence = run(pytester, site, "r-secrets", "-k", "leaky or pass_with")
    assert _checks(evidence)["test_leaky"]["verdict"] == "FAIL"
    assert "secret scan clean" in res.stdout.str()
    artifacts = paths.artifacts()
    assert {paths.html, paths.junit, paths.evidence} <= set(artifacts)
    needles = secret_needles(site["secrets"])
    assert len(needles) > 10
    assert scan_for_secrets(artifacts, needles) == []
    assert "[REDACTED]" in paths.evidence.read_text() and "[REDACTED]" in paths.html.read_text()
    # ... and the same scan fails when a secret is planted into an artifact afterwards
    munge = site["secrets"][0].read_bytes()
    planted = paths.logs / "planted.txt"
    planted.parent.mkdir(exist_ok=True)
    planted.write_bytes(b"log line " + base64.b64encode(munge) + b"\n")
    leaks = scan_for_secrets(paths.artifacts(), needles)
    assert [(leak.path, leak.label) for leak in leaks] == [(planted, "content of munge.key (base64)")]


def test_a_secret_planted_during_a_run_fails_the_run(pytester, site, monkeypatch):
    paths = ReportPaths(site["reports"] / "r-plant")
    monkeypatch.setenv("SFX_PLANT", str(paths.root / "planted.txt"))
    res, _, evidence = run(pytester, site, "r-plant", "-k", "plants_a_secret")
    out = res.stdout.str()
    assert _checks(evidence)["test_plants_a_secret_in_the_reports"]["verdict"] == "PASS"  # the check passed ...
    assert "SECRET LEAK" in out and "planted.txt" in out and "munge.key" in out
    assert res.ret != pytest.ExitCode.OK  # ... but the run fails on the leak


@pytest.mark.parametrize("edge", [b" ", b"\n", b"\t"], ids=["leading space", "leading newline", "leading tab"])
def test_a_secret_planted_after_an_earlier_in_process_run_is_found(pytester, site, monkeypatch, edge):
    """The sequence that failed in CI (#18): an in-process run first, then a run that plants the base64 of a munge
    key. The key is made to begin with a whitespace byte, the shape the scan used to miss (about 1 key in 20)."""
    munge = site["secrets"][0]
    munge.write_bytes(edge + os.urandom(1023))
    first, _, _ = run(pytester, site, "r-before", "-k", "pass_with")
    assert first.ret == pytest.ExitCode.OK and "secret scan clean" in first.stdout.str()
    paths = ReportPaths(site["reports"] / "r-plant-after")
    monkeypatch.setenv("SFX_PLANT", str(paths.root / "planted.txt"))
    res, _, evidence = run(pytester, site, "r-plant-after", "-k", "plants_a_secret")
    out = res.stdout.str()
    assert _checks(evidence)["test_plants_a_secret_in_the_reports"]["verdict"] == "PASS"
    assert "SECRET LEAK" in out and "planted.txt" in out and "content of munge.key (base64)" in out
    assert "secret scan clean" not in out and res.ret != pytest.ExitCode.OK


def _all_required_but(left_out: str) -> str:
    return ",".join(g for g in REQUIRED_GROUPS if g not in (left_out, "TW"))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_selections_own_reason_reaches_the_verdict(pytester, site, workers):
    """#28: a group left out by --slurmflox-groups is NOT RUN naming that option (the reason Selection computed),
    also under xdist, where the workers deselect and hand their record to the controller; the exit status is the
    unsigned sign-off's."""
    pytester.makepyfile(test_every=EVERY_GROUP)
    groups = f"--slurmflox-groups={_all_required_but('T9')}"
    res, _, evidence = run(
        pytester,
        site,
        f"r-groups-{len(workers)}",
        "--slurmflox-signoff",
        groups,
        "-k",
        "every_group",
        *workers,
        subprocess=bool(workers),
    )
    assert res.ret == pytest.ExitCode.TESTS_FAILED and evidence["run"]["exit_status"] == 1
    by_group = {g["group"]: g for g in evidence["groups"]}
    assert by_group["T9"]["verdict"] == "NOT RUN"
    assert by_group["T9"]["reasons"] == ["NOT RUN: group not in --slurmflox-groups: test_every_group_t9"]


def test_reports_are_built_from_xdist_worker_reports(pytester, site):
    res, paths, evidence = run(pytester, site, "r-xdist", "-n", "2", "-k", "not leaky and not plants", subprocess=True)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    checks = _checks(evidence)
    assert {c["group"] for c in checks.values()} == {"T3", "T4", "T5"}
    assert checks["test_fail_with_evidence"]["evidence"][0]["exit_status"] == 3
    assert validate_evidence(paths.evidence) == [] and validate_junit(paths.junit) == []
    assert sorted(p.name for p in site["reports"].iterdir()) == ["r-xdist"]  # workers write nothing of their own


def test_no_reports_for_project_test_runs(pytester, tmp_path):
    pytester.makepyfile(test_plain="def test_x():\n    assert True\n")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--slurmflox-reports={tmp_path / 'rep'}")
    assert res.ret == 0 and not (tmp_path / "rep").exists()


SITE_CHECKS = """
import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.site]


@pytest.mark.dependency(depends=["T4"])
def test_after_a_failed_group():
    pass


@pytest.mark.dependency(depends=["T3"])
def test_after_a_passed_group():
    pass


@pytest.mark.dependency(depends=["T9"])
def test_after_a_group_not_in_the_run():
    pass
"""


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_site_check_depending_on_a_group_that_did_not_pass_is_not_run_naming_it(pytester, site, xdist):
    pytester.makepyfile(test_site=SITE_CHECKS)
    extra = ("-n", "2") if xdist else ("-p", "no:xdist")
    _, paths, evidence = run(pytester, site, f"r-deps-{int(xdist)}", *extra)
    assert validate_evidence(paths.evidence) == []  # the site group and a NOT RUN check's reason are schema-valid
    checks = _checks(evidence)
    after_fail = checks["test_after_a_failed_group"]
    assert after_fail["verdict"] == "NOT RUN" and after_fail["group"] == "site", after_fail
    assert "depends on T4: test_fail_with_evidence failed" in after_fail["skip_reason"], after_fail
    assert checks["test_after_a_passed_group"]["verdict"] == "PASS"
    assert "depends on T9, which is not in this run" in checks["test_after_a_group_not_in_the_run"]["skip_reason"]
    site_group = next(g for g in evidence["groups"] if g["group"] == "site")
    assert site_group["verdict"] != "PASS"  # NOT RUN is not PASS
