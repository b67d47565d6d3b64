"""Integration (#13): directory identity on a real local substrate, and proof that group TD can fail.

One private cluster for the module (``pytest --slurmflox-up=local -m "TD or TI"`` in a subprocess): slapd on the
controller holds the test user and its groups, the login node resolves them through nslcd, no node has a local
account. Then: TD PASSes; the destructive TDC (an edit of the directory reaches the next job) PASSes; a worker that
gains the directory user in its /etc/passwd makes TD FAIL naming that worker, and TD PASSes again once it is gone;
the bind secret is in no report artifact.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from acceptance_helpers import clean_env, cluster_of, deployed, local_substrate, run_pytest

pytestmark = pytest.mark.integration

TD_CHECKS = (
    "test_the_directory_holds_the_declared_user_and_groups",
    "test_a_directory_user_logs_in_with_a_key_and_its_tasks_carry_the_directory_identity",
    "test_no_worker_holds_the_directory_user_or_its_groups",
)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "directory", "-m", "TD or TI") as recorded:
        yield recorded


def _ok(run) -> None:
    assert run.cases and run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]


def test_td_passes_on_the_local_substrate(deployment):
    _, workdir, _, run = deployment
    print(run.output[-4000:])
    _ok(run)
    passed = run.outcomes("passed")
    for check in TD_CHECKS:
        assert f"test_td_directory::{check}" in passed, (check, passed)
    assert any(p.startswith("test_ti_identity::") for p in passed), passed
    # the cold-start cost of the directory, as measured inside the nodes (README: "Directory identity")
    for node, what in (("ctl", "slapd answered"), ("login", "nslcd resolved")):
        console = (workdir / "local" / "nodes" / node / "console.log").read_text()
        lines = [line for line in console.splitlines() if what in line]
        assert lines, console[-2000:]
        print(f"{node}: {lines[-1]}")
    target = (workdir / "target.yaml").read_text()
    assert "directory:" in target and "ldap://ctl/" in target and "bind_password_file" in target, target


def test_no_local_account_for_the_directory_user_anywhere(deployment):
    _, workdir, _, _ = deployment
    sub = cluster_of(workdir)
    user = sub.settings.test_user
    for node in ("ctl", "login", "worker1", "worker2"):
        res = sub.node_runner(node).run(f"grep -c '^{user}:' /etc/passwd /etc/shadow /etc/group || true")
        assert res.ok and all(line.endswith(":0") for line in res.stdout.split()), (node, res.describe())
    login = sub.node_runner("login").run(f"getent passwd {user}; grep -E '^(passwd|group):' /etc/nsswitch.conf")
    assert login.ok and f"{user}:" in login.stdout and "files ldap" in login.stdout, login.describe()


def test_status_shows_the_directory(deployment):
    home, _, common, _ = deployment
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--slurmflox-status", *common],
        cwd=home,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout
    assert "slapd" in out and "nslcd" in out, out[-3000:]
    assert [line for line in out.splitlines() if "slapd" in line and " up " in line], out[-3000:]


def _next_job(sub, job: str, gid: int, present: bool):
    """The user's next job output, polled until ``gid`` is (not) in it: sackd keeps a user's groups for
    GroupUpdateTime (5 s on the local substrate)."""
    deadline = time.monotonic() + 30
    while True:
        res = sub.cluster.node_runner("login", sub.cluster.settings.test_user).run(job, timeout=120)
        if (str(gid) in res.stdout.split()) == present or time.monotonic() > deadline:
            return res
        time.sleep(1)


def test_a_directory_users_groups_follow_a_directory_change(deployment):
    """The substrate's primitive edits the directory; the next job sees it (TDC does the same through the suite)."""
    home, workdir, common, _ = deployment
    from pytest_slurmflox.model.directory import membership_ldif
    from pytest_slurmflox.substrates.local import directory

    sub = local_substrate(workdir)
    s = sub.cluster.settings
    group_dn = f"cn={s.test_supp_group},ou=groups,{directory.BASE_DN}"
    job = "srun -N1 -n1 -w worker1 id -G; srun -N1 -n1 -w worker1 id -Gn"
    before = _next_job(sub, job, s.test_supp_gid, present=True)
    assert before.ok and str(s.test_supp_gid) in before.stdout.split() and s.test_supp_group in before.stdout
    removed = sub.pool().modify_directory(membership_ldif(group_dn, s.test_user, add=False))
    assert removed.ok, removed.describe()
    try:
        after = _next_job(sub, job, s.test_supp_gid, present=False)
        assert after.ok, after.describe()
        assert str(s.test_supp_gid) not in after.stdout.split() and s.test_supp_group not in after.stdout, after
        assert str(s.test_gid) in after.stdout.split(), after.describe()
    finally:
        assert sub.pool().modify_directory(membership_ldif(group_dn, s.test_user, add=True)).ok
    back = _next_job(sub, job, s.test_supp_gid, present=True)
    assert back.ok and str(s.test_supp_gid) in back.stdout.split(), back.describe()
    # and the opt-in acceptance group that does it through the target (destructive: named explicitly)
    run = run_pytest(home, "-m", "TDC", *common, timeout=600)
    _ok(run)
    assert any("test_a_directory_group_change_reaches_the_next_job" in p for p in run.outcomes("passed")), run.output


def test_the_directory_user_in_a_worker_passwd_fails_td(deployment):
    home, workdir, common, _ = deployment
    sub = cluster_of(workdir)
    s = sub.settings
    entry = f"{s.test_user}:x:{s.test_uid}:{s.test_gid}::/home/{s.test_user}:/bin/bash"
    worker = sub.node_runner("worker1")
    assert worker.run(f"cp /etc/passwd /tmp/.sfx-passwd && echo '{entry}' >> /etc/passwd").ok
    try:
        run = run_pytest(home, "-m", "TD", *common, timeout=600)
    finally:
        assert worker.run("cp /tmp/.sfx-passwd /etc/passwd").ok
    failed = run.outcomes("failure")
    assert any("test_no_worker_holds_the_directory_user_or_its_groups" in f for f in failed), run.output[-4000:]
    message = run.messages()
    # the worker's resolver, asked source by source, names the local source that answered (#26)
    assert f"worker1: the local files source answers passwd {s.test_user}: {entry}" in message, message[-3000:]
    assert "worker2: the local" not in message, message[-3000:]
    again = run_pytest(home, "-m", "TD", *common, timeout=600)
    _ok(again)
    assert len([p for p in again.outcomes("passed") if "test_td_directory" in p]) == len(TD_CHECKS), again.output


def test_no_bind_secret_in_any_report_artifact(deployment):
    home, workdir, _, _ = deployment
    from pytest_slurmflox.model.secrets import scan_for_secrets, secret_files, secret_needles
    from pytest_slurmflox.model.workdir import Workdir

    secret = workdir / "local" / "ldap" / "bind.key"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert secret in secret_files(Workdir(workdir)), "the secret scan knows the bind secret"
    artifacts = [p for p in (home / "reports").rglob("*") if p.is_file()]
    assert artifacts
    leaks = scan_for_secrets(artifacts, secret_needles([secret]))
    assert leaks == [], leaks
    raw = secret.read_bytes()
    assert not any(raw in p.read_bytes() for p in artifacts)
    # on the login node the secret and nslcd's config are root's alone (0600 on /run), never the user's
    sub = cluster_of(workdir)
    denied = sub.node_runner("login", sub.settings.test_user).run(
        "cat /run/slurmflox/ldap-bind.secret /run/slurmflox/nslcd.conf /etc/nslcd.conf"
    )
    assert not denied.ok and raw.decode() not in denied.stdout, denied.describe()
    modes = sub.node_runner("login").run("stat -Lc %a:%U /run/slurmflox/ldap-bind.secret /etc/nslcd.conf")
    assert modes.ok and modes.stdout.split() == ["600:root", "600:root"], modes.describe()


def _target_variant(workdir: Path, home: Path, name: str, directory) -> Path:
    """The deployment's target file with its ``directory`` replaced (None: not declared at all)."""
    import yaml

    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["name"] = name
    if directory is None:
        doc.pop("directory", None)
    else:
        doc["directory"] = directory
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_declared_directory_that_does_not_answer_fails_td(deployment):
    import yaml

    home, workdir, common, _ = deployment
    declared = yaml.safe_load((workdir / "target.yaml").read_text())["directory"]
    target = _target_variant(workdir, home, "dead-directory", {**declared, "uri": "ldap://ctl:3899/"})
    run = run_pytest(home, f"--slurmflox-target={target}", "-m", "TD", *common, timeout=600)
    failed = [name for name in run.outcomes("failure") if "test_td_directory" in name]
    assert len(failed) == len(TD_CHECKS) and not run.outcomes("skipped"), run.output[-4000:]
    message = run.messages()
    assert "declared capability directory answers" in message and "ldap://ctl:3899/" in message, message[-3000:]


def test_an_undeclared_directory_skips_td_naming_it_and_is_not_required(deployment):
    import json

    home, workdir, common, _ = deployment
    target = _target_variant(workdir, home, "no-directory", None)
    run = run_pytest(home, f"--slurmflox-target={target}", "-m", "TD", *common, timeout=600)
    skipped = {n: m for n, (o, m) in run.cases.items() if o == "skipped" and "test_td_directory" in n}
    assert len(skipped) == len(TD_CHECKS) and not run.outcomes("failure"), run.output[-4000:]
    assert all("missing capability directory" in m for m in skipped.values()), skipped
    evidence = sorted((home / "reports").glob("*/evidence.json"), key=lambda p: p.stat().st_mtime)[-1]
    groups = {g["group"]: g for g in json.loads(evidence.read_text())["groups"]}
    # undeclared, TD does not apply to this target (profile local without a directory, #26): never PASS, not required
    assert groups["TD"]["verdict"] == "NOT APPLICABLE" and groups["TD"]["required"] is False, groups["TD"]
