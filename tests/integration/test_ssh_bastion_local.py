"""Integration (issue 38, "Must show"): through an OpenSSH bastion (ProxyJump in an ssh_config) with the key only in
an agent, T5 PASSes.

One private local cluster (brought up alone, no checks); in front of its login endpoint (127.0.0.1:<login port>)
a real sshd of this test's own as the bastion (tests/sshd.py: ``AllowTcpForwarding yes``, ``LogLevel DEBUG1`` so
each forward it makes is in its log), and an ssh-agent of this test's own holding a fresh key (the bastion's) and a
copy of the cluster's login key, deleted once added. The target is the deployment's own target file with its login
rewritten as a site writes it: ``{host: login, ssh_config: ...}``, no key; the ssh_config says ``Host login`` /
``ProxyJump bastion`` and names each hop's known_hosts. The T5 run is a child pytest given that target and
``SSH_AUTH_SOCK``: its checks can only have reached the login through the bastion and the agent.
"""

from __future__ import annotations

import os
import re
import shutil
import time

import pytest
import yaml
from acceptance_helpers import deployed, group_verdicts, run_pytest
from sshd import keygen, running_agent, running_sshd

from pytest_slurmflox.base.sshconnect import KeyUnusable
from pytest_slurmflox.harness.connection import login_runner
from pytest_slurmflox.model.target import load_target

pytestmark = pytest.mark.integration


def _site_target(home, workdir, bastion_port: int):
    """The deployment's target with its login reached as a site reaches it."""
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    login = doc["login"]
    site = home / "site"
    config = site / "ssh_config"
    config.write_text(
        f"Host login\n  HostName {login['host']}\n  Port {login['port']}\n  User {login['user']}\n"
        f"  ProxyJump bastion\n  UserKnownHostsFile {login['known_hosts']}\n"
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion_port}\n  User root\n"
        f"  UserKnownHostsFile {site / 'bastion_known'}\n"
    )
    doc["login"] = {"host": "login", "ssh_config": str(config)}
    doc["admin"] = {"user": "root"}  # the admin login shares the login's route (and the agent's key)
    target = home / "site-target.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


@pytest.fixture(scope="module")
def through_bastion(tmp_path_factory):
    with deployed(tmp_path_factory, "sshbastion") as (home, workdir, _common, first):
        assert first.rc == 0, first.output[-4000:]
        site = home / "site"
        site.mkdir()
        fresh = keygen(site / "bastion_key")
        login_key = site / "login_key"
        shutil.copyfile(workdir / "id_cluster", login_key)
        login_key.chmod(0o600)
        with (
            running_agent(site / "agent") as agent,
            running_sshd(
                site / "bastion", (site / "bastion_key.pub").read_text(), "AllowTcpForwarding yes\nLogLevel DEBUG1\n"
            ) as bastion,
            pytest.MonkeyPatch.context() as env,
        ):
            for key in (fresh, login_key):
                agent.add(key)
                key.unlink()  # the keys exist only in the agent from here on
            (site / "bastion_known").write_text(bastion.known_hosts_line())
            target = _site_target(home, workdir, bastion.port)
            env.setenv("SSH_AUTH_SOCK", str(agent.sock))  # the child run inherits it (acceptance_helpers.clean_env)
            t0 = time.monotonic()
            run = run_pytest(home, f"--slurmflox-target={target}", "--slurmflox-groups=T5", timeout=600)
            print(f"[bastion] T5 through the bastion: {time.monotonic() - t0:.1f}s, exit {run.rc}")
            print(run.output[-5000:])
            yield home, target, bastion, agent, run


def test_the_site_target_names_no_key_and_jumps_through_the_bastion(through_bastion):
    _, target, bastion, agent, _ = through_bastion
    spec = load_target(target)
    assert spec.login.key is None and spec.admin is not None and spec.admin.key is None
    assert [(j.host, j.port) for j in spec.login.jumps] == [("127.0.0.1", bastion.port)]
    assert len(agent.keys()) == 2 and not list((target.parent / "site").glob("*_key"))
    # without the agent the same target cannot log in, and says why
    saved = os.environ.pop("SSH_AUTH_SOCK", None)
    try:
        with pytest.raises(KeyUnusable, match="SSH_AUTH_SOCK is not set"):
            login_runner(spec.login, None).run("true")
    finally:
        if saved is not None:
            os.environ["SSH_AUTH_SOCK"] = saved


def test_t5_passes_through_the_bastion_with_the_key_only_in_the_agent(through_bastion):
    _, target, bastion, _, run = through_bastion
    login_port = load_target(target).login.port
    passed = run.in_module("test_t05_interactive")
    assert run.rc == 0 and run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]
    assert len(passed) == 3 and run.outcomes("skipped") == [], (passed, run.cases)
    assert group_verdicts(run.output).get("T5") == "PASS", run.output[-4000:]  # the run's own group table
    # the checks' SSH connections were made by the bastion (OpenSSH serverloop.c: server_request_direct_tcpip)
    forwards = re.findall(r"server_request_direct_tcpip: .*target \S+ port (\d+)", bastion.log.read_text())
    assert forwards and set(forwards) == {str(login_port)}, bastion.log.read_text()[-3000:]
    print(f"[bastion] {len(forwards)} connections forwarded to the login port {login_port}")
