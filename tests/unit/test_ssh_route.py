"""SSH as sites use it, against real OpenSSH: a login behind a bastion (ProxyJump in an ssh_config), the key held
only by an ssh-agent, host keys strict at every hop, and a passphrase-protected key named as such.

Two sshd of this test's own on 127.0.0.1 (tests/sshd.py): the bastion (``AllowTcpForwarding yes``, ``LogLevel
DEBUG1`` so its log shows each forward) and the login behind it; an ssh-agent started here holds a fresh key that
both authorize. The target file names no key: the runner can only have authenticated through the agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshd import Agent, Sshd, keygen, running_agent, running_sshd

from pytest_slurmflox.base.sshconnect import HostKeyRefused, KeyUnusable, RouteRefused
from pytest_slurmflox.harness.connection import connect, login_runner
from pytest_slurmflox.model.target import TargetSpec, parse_target


@dataclass(frozen=True)
class Site:
    bastion: Sshd
    login: Sshd
    agent: Agent
    config: Path
    dir: Path

    def target(self, **login: object) -> TargetSpec:
        doc = {"version": 1, "login": {"host": "login", "ssh_config": str(self.config), **login}}
        return parse_target(doc, path=self.dir / "target.yaml")


def _config(d: Path, bastion: Sshd, login: Sshd, bastion_known: Path) -> Path:
    (d / "login_known").write_text(login.known_hosts_line())
    config = d / "ssh_config"
    config.write_text(
        f"Host login\n  HostName 127.0.0.1\n  Port {login.port}\n  User root\n  ProxyJump bastion\n"
        f"  UserKnownHostsFile {d / 'login_known'}\n"
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User root\n"
        f"  UserKnownHostsFile {bastion_known}\n"
    )
    return config


@pytest.fixture
def site(tmp_path, monkeypatch):
    key = keygen(tmp_path / "agent_only")
    public = (tmp_path / "agent_only.pub").read_text()
    with (
        running_agent(tmp_path / "agent") as agent,
        running_sshd(tmp_path / "bastion", public, "AllowTcpForwarding yes\nLogLevel DEBUG1\n") as bastion,
        running_sshd(tmp_path / "login", public) as login,
    ):
        agent.add(key)
        key.unlink()  # from here on the key exists only in the agent
        (tmp_path / "bastion_known").write_text(bastion.known_hosts_line())
        monkeypatch.setenv("SSH_AUTH_SOCK", str(agent.sock))
        yield Site(bastion, login, agent, _config(tmp_path, bastion, login, tmp_path / "bastion_known"), tmp_path)


def _forwards(bastion: Sshd) -> list[str]:
    """The forwards the bastion's sshd logged (OpenSSH's serverloop.c: server_request_direct_tcpip)."""
    return re.findall(r"server_request_direct_tcpip: .*target \S+ port (\d+)", bastion.log.read_text())


def test_a_login_behind_a_bastion_runs_a_command_with_the_key_only_in_the_agent(site):
    spec = site.target()
    assert spec.login.key is None and len(site.agent.keys()) == 1
    runner = login_runner(spec.login, None)
    try:
        result = runner.run("id -u; echo $SSH_CONNECTION")
    finally:
        runner.close()
    assert result.ok and result.stdout.split()[0] == "0", result.describe()
    assert result.stdout.split()[-1] == str(site.login.port)  # the login's sshd ran it
    assert _forwards(site.bastion) == [str(site.login.port)], site.bastion.log.read_text()[-3000:]
    assert runner.where == f"login(127.0.0.1:{site.login.port} via 127.0.0.1:{site.bastion.port})"


def test_every_hop_checks_its_host_key(site, tmp_path):
    (tmp_path / "bastion_known").write_text("")  # the bastion is no longer pinned
    runner = login_runner(site.target().login, None)
    with pytest.raises(HostKeyRefused, match=rf"\[127\.0\.0\.1\]:{site.bastion.port} is not pinned"):
        runner.run("true")
    assert _forwards(site.bastion) == [] and (tmp_path / "bastion_known").read_text() == ""
    (tmp_path / "bastion_known").write_text(site.bastion.known_hosts_line())
    (tmp_path / "login_known").write_text(site.bastion.known_hosts_line().replace(str(site.bastion.port), "1"))
    with pytest.raises(HostKeyRefused, match=rf"\[127\.0\.0\.1\]:{site.login.port} is not pinned"):
        runner.run("true")
    runner.close()


def test_a_bastion_that_does_not_forward_is_named(site, tmp_path):
    public = site.bastion.dir.joinpath("authorized_keys").read_text()
    with running_sshd(tmp_path / "closed", public, "AllowTcpForwarding no\n") as closed:
        with (tmp_path / "login_known").open("a") as known:  # a hop no Host entry names: the login's known_hosts
            known.write(closed.known_hosts_line())
        runner = login_runner(site.target(proxy_jump=f"root@127.0.0.1:{closed.port}").login, None)
        with pytest.raises(RouteRefused, match=rf"jump host root@\[127\.0\.0\.1\]:{closed.port} did not forward"):
            runner.run("true")


def test_without_a_key_or_an_agent_the_login_says_so(site, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK")
    runner = login_runner(site.target().login, None)
    with pytest.raises(KeyUnusable, match=r"no key for root@\[127\.0\.0\.1\]:\d+: .*SSH_AUTH_SOCK is not set"):
        runner.run("true")


def test_a_passphrase_key_is_named_with_the_fix_in_one_line(site, tmp_path, monkeypatch):
    locked = keygen(tmp_path / "locked", passphrase="correct horse")
    spec = site.target(key=str(locked), proxy_jump="none", port=site.login.port)
    # with the agent holding a key, the agent signs (as ssh does for an IdentityFile the agent holds)
    runner = login_runner(spec.login, None)
    assert runner.run("id -u").stdout.strip() == "0"
    runner.close()
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(KeyUnusable) as refused:
        login_runner(spec.login, None).run("true")
    line = f"{locked}: the private key is protected by a passphrase; load it into ssh-agent: ssh-add {locked}"
    assert str(refused.value) == line
    target = connect(spec)  # what a run's checks are told: the same line, as why the login cannot be reached
    target.close()
    why = target.why_missing("slurm") or ""
    assert (
        why.startswith(f"login root@127.0.0.1:{site.login.port} unreachable (credentials): ") and f": {line}; " in why
    )
