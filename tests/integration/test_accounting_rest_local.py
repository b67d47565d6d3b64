"""Accounting (TA) and REST (TR) on a private local deployment (#13): the groups pass, the services behave as the
issue requires when driven directly (not through the suites), and the mutations turn the groups into FAILs.

Direct checks read the cluster over SSH (the project's SSHRunner) and slurmrestd over httpx; their expectations
come from the environment this test sends and from what the other submission path shows, never from the suites.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest
import yaml
from acceptance_helpers import cluster_of, deployed, run_pytest
from pytest_slurmflox.suites._slurm_reasons import ASSOCIATION_REFUSAL, association_refused

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.judges.expectations import slurm_sets
from pytest_slurmflox.model.secrets import scan_for_secrets, secret_needles
from pytest_slurmflox.model.target import load_target

pytestmark = pytest.mark.integration

#: The task's own environment, one NUL-free line per variable (values here have no newlines)
ENV_PROBE = "#!/bin/bash\n/usr/bin/env -0 < /dev/null | /usr/bin/tr '\\0\\n' '\\n ' > \"$SFX_OUT\"\n"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "acctrest", "-m", "TA or TR", timeout=900) as recorded:
        yield recorded


@pytest.fixture(scope="module")
def cluster(deployment):
    _, workdir, _, _ = deployment
    spec = load_target(workdir / "target.yaml")
    login = SSHRunner(spec.login.host, spec.login.port, spec.login.user, spec.login.key, spec.login.known_hosts)
    admin = SSHRunner(spec.login.host, spec.login.port, "root", spec.login.key, spec.login.known_hosts)
    token = re.search(r"SLURM_JWT=(\S+)", login.run("scontrol token lifespan=900").stdout)
    assert token, "scontrol token gave no token"
    yield spec, login, admin, token.group(1)
    login.close()
    admin.close()


def _version(spec, user: str, token: str) -> str:
    paths = httpx.get(spec.rest.url + "/openapi/v3", headers=_auth(user, token), timeout=30).json()["paths"]
    return max((m.group(1) for p in paths if (m := re.fullmatch(r"/slurm/(v0\.0\.\d+)/job/submit", p))), key=len)


def _auth(user: str, token: str) -> dict[str, str]:
    return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}


def test_ta_and_tr_pass_and_no_report_holds_the_db_password_or_jwt_key(deployment):
    home, workdir, _, run = deployment
    print(run.output[-4000:])
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]
    passed = run.outcomes("passed")
    for module in ("test_ta_accounting", "test_tr_rest"):
        assert sum(p.startswith(module + "::") for p in passed) >= 3, (module, passed)
    assert "secret scan clean" in run.output
    secrets = [workdir / "local" / "accounting" / "db_password.key", workdir / "local" / "accounting" / "jwt_hs256.key"]
    assert all(p.is_file() and p.stat().st_mode & 0o777 == 0o600 for p in secrets)
    artifacts = [p for p in (home / "reports").rglob("*") if p.is_file()]
    assert artifacts
    assert scan_for_secrets(artifacts, secret_needles(secrets)) == []


def test_rest_job_and_sbatch_job_see_the_same_task_environment(cluster):
    """The same script with the same submitted environment, once through sbatch and once through REST, on the same
    worker: the task environments are identical apart from the variables Slurm itself sets (expectations.slurm_sets:
    sbatch adds some, e.g. OMPI_MCA_plm_slurm_args, that a REST submission does not)."""
    spec, login, _, token = cluster
    user = spec.login.user
    outdir = login.run("mkdir -p ~/sfx-acctrest && cd ~/sfx-acctrest && rm -f *.env && pwd").check().stdout.strip()
    worker = "worker1"
    env = {"PATH": "/usr/bin:/bin", "HOME": f"/home/{user}", "SFX_SUBMIT_SIDE": "both"}
    login.run(f"cat > {outdir}/probe.sh", input=ENV_PROBE).check()
    assigns = " ".join(f"{k}={v}" for k, v in env.items())
    sbatch = login.run(
        f"cd {outdir} && env -i {assigns} SFX_OUT={outdir}/sbatch.env "
        f"/usr/bin/sbatch --parsable -w {worker} -o /dev/null {outdir}/probe.sh"
    )
    assert sbatch.ok, sbatch.describe()
    job = {
        "name": "sfx-acctrest",
        "partition": spec.partition,
        "script": ENV_PROBE,
        "required_nodes": [worker],
        "current_working_directory": outdir,
        "standard_output": "/dev/null",
        "environment": [f"{k}={v}" for k, v in {**env, "SFX_OUT": f"{outdir}/rest.env"}.items()],
    }
    version = _version(spec, user, token)
    res = httpx.post(f"{spec.rest.url}/slurm/{version}/job/submit", json={"job": job}, headers=_auth(user, token))
    assert res.status_code == 200 and res.json().get("job_id"), res.text
    deadline = time.monotonic() + 90
    while not login.run(f"test -s {outdir}/sbatch.env && test -s {outdir}/rest.env").ok:
        assert time.monotonic() < deadline, "the two jobs did not both write their environment"
        time.sleep(0.5)
    got = {}
    for kind in ("sbatch", "rest"):
        text = login.run(f"cat {outdir}/{kind}.env").check().stdout
        pairs = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        got[kind] = {k: v for k, v in pairs.items() if not slurm_sets(k) and k != "SFX_OUT"}
    assert got["rest"] == got["sbatch"], {
        k: (got["rest"].get(k), got["sbatch"].get(k))
        for k in set(got["rest"]) | set(got["sbatch"])
        if got["rest"].get(k) != got["sbatch"].get(k)
    }
    # and the worker really added its runtime: the Flox PATH entries come first, before what was submitted
    assert got["rest"]["PATH"] != env["PATH"] and got["rest"]["PATH"].endswith(env["PATH"]), got["rest"]["PATH"]


def test_unassociated_user_is_refused(cluster):
    spec, login, admin, _ = cluster
    stranger = spec.accounting.unassociated_user
    res = admin.run(f"runuser -u {stranger} -- sbatch --parsable -o /dev/null --wrap /bin/true")
    assert not res.ok and not res.stdout.strip(), res.describe()
    assert association_refused(res), res.describe()  # refused for its association, not for anything else
    ok = login.run("sbatch --parsable -o /dev/null --wrap /bin/true")
    assert ok.ok, ok.describe()  # the same submission by the associated user is accepted


def test_a_typod_partition_is_not_an_association_refusal(cluster):
    """#26: TA judges a refusal by Slurm's reason. The user without an association, sent to a typo'd partition, is
    refused too, but for the partition (ESLURM_INVALID_PARTITION_NAME's text): not what TA's judge accepts."""
    spec, _, admin, _ = cluster
    submit = f"runuser -u {spec.accounting.unassociated_user} -- sbatch --parsable -o /dev/null --wrap /bin/true -p "
    typo = admin.run(submit + spec.partition + "x")
    assert not typo.ok and "Invalid partition name specified" in typo.stderr, typo.describe()
    assert not association_refused(typo), typo.describe()
    right = admin.run(submit + spec.partition)
    assert association_refused(right) and ASSOCIATION_REFUSAL in right.stderr, right.describe()


def test_mutation_typod_unassociated_user_fails_ta(deployment, tmp_path):
    """#26: a target naming a user the login node does not have (a typo): runuser fails, which a non-zero-exit judge
    took for Slurm's refusal; TA now FAILS, asking for Slurm's reason."""
    home, workdir, _, _ = deployment
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["accounting"]["unassociated_user"] = doc["accounting"]["unassociated_user"] + "typo"
    mutated = tmp_path / "target.yaml"
    mutated.write_text(yaml.safe_dump(doc))
    run = run_pytest(home, f"--slurmflox-target={mutated}", "-m", "TA", "-k", "without_association", timeout=600)
    assert run.outcomes("failure") == ["test_ta_accounting::test_user_without_association_is_refused_at_submission"]
    assert ASSOCIATION_REFUSAL in run.messages() and "does not exist" in run.messages(), run.output[-3000:]


def test_bad_token_is_refused(cluster):
    spec, _, _, token = cluster
    user = spec.login.user
    version = _version(spec, user, token)
    url = f"{spec.rest.url}/slurm/{version}/jobs"
    assert httpx.get(url, headers=_auth(user, token), timeout=30).status_code == 200
    head, _, sig = token.rpartition(".")
    forged = head + "." + ("A" if sig[:1] != "A" else "B") + sig[1:]
    for headers in (_auth(user, forged), {"X-SLURM-USER-NAME": user}):
        res = httpx.get(url, headers=headers, timeout=30)
        assert res.status_code >= 400, (headers.keys(), res.status_code, res.text[:300])


def test_undeclared_services_skip_naming_the_capability(deployment, tmp_path):
    """The same cluster described without ``accounting`` and ``rest``: TA and TR SKIP, naming what is missing."""
    home, workdir, _, _ = deployment
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    del doc["accounting"], doc["rest"]
    bare = tmp_path / "target.yaml"
    bare.write_text(yaml.safe_dump(doc))
    run = run_pytest(home, f"--slurmflox-target={bare}", "-m", "TA or TR", timeout=600)
    skipped = {k: m for k, (o, m) in run.cases.items() if o == "skipped"}
    assert len(skipped) == len(run.cases) >= 8, run.output[-3000:]
    for name, message in skipped.items():
        capability = "accounting" if "test_ta_" in name else "rest"
        assert f"missing capability {capability}" in message, (name, message)


def test_tar_accounting_survives_restarts_when_asked_for(deployment):
    home, _, common, _ = deployment
    run = run_pytest(home, "--slurmflox-groups=TAR", *common, timeout=600)
    passed = [p for p in run.outcomes("passed") if p.startswith("test_tar_accounting_restart::")]
    assert passed and run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-3000:]


def test_mutation_broken_token_fails_tr(deployment, tmp_path):
    home, workdir, _, _ = deployment
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["rest"]["token_command"] = "echo SLURM_JWT=eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.broken"
    mutated = tmp_path / "target.yaml"
    mutated.write_text(yaml.safe_dump(doc))
    run = run_pytest(home, f"--slurmflox-target={mutated}", "-m", "TR", timeout=600)
    failed = run.outcomes("failure") + run.outcomes("error")  # a fixture's FAIL arrives as a JUnit error
    assert "test_tr_rest::test_rest_job_has_the_sbatch_task_environment" in failed, run.output[-3000:]
    assert not run.outcomes("skipped"), run.output[-3000:]


def test_mutation_stopped_slurmdbd_fails_ta_not_skip(deployment):
    home, workdir, common, _ = deployment
    db = cluster_of(workdir).node_runner("db")
    stop = db.run("kill -TERM $(cat /run/slurmdbd/slurmdbd.pid)")
    assert stop.ok, stop.describe()
    try:
        run = run_pytest(home, "-m", "TA", *common, timeout=600)
        failed = run.outcomes("failure") + run.outcomes("error")
        assert any("test_ta_accounting::" in f for f in failed), run.output[-3000:]
        assert not run.outcomes("skipped") and not run.outcomes("passed"), run.output[-3000:]
        assert "slurmdbd" in "\n".join(m for _, m in run.cases.values()), run.output[-3000:]
    finally:
        again = run_pytest(home, "--slurmflox-up=local", "-m", "TA", *common, timeout=600)
        assert again.outcomes("failure") == [] and again.outcomes("passed"), again.output[-3000:]
