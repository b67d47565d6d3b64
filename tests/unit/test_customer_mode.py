"""Customer mode: destructive groups are refused against an existing cluster, unknown SSH host keys are refused.

The host-key tests talk to a real OpenSSH sshd started here on 127.0.0.1 (a free port, a freshly generated host
key, root only); they SKIP naming what is missing when there is no sshd binary or no root.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sshd import keygen, running_sshd

from pytest_slurmflox.base.run import HostKeyRefused, SSHRunner


def _target(tmp_path: Path) -> Path:
    key = tmp_path / "id_customer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    target = tmp_path / "target.yaml"
    target.write_text(
        f"version: 1\nname: customer\nsubstrate: existing\nlogin: {{host: 127.0.0.1, user: x, key: {key}}}\n"
    )
    return target


DESTRUCTIVE_CHECK = """
import pytest

@pytest.mark.acceptance
@pytest.mark.T11R
@pytest.mark.destructive
def test_rerun():
    pass

@pytest.mark.acceptance
@pytest.mark.T3
def test_safe():
    pass
"""


@pytest.mark.parametrize("how", [("--slurmflox-groups=T3,T11R",), ("-m", "acceptance and T11R")])
def test_destructive_group_is_refused_against_an_existing_cluster(pytester, tmp_path, how):
    pytester.makepyfile(test_d=DESTRUCTIVE_CHECK)
    target = _target(tmp_path)
    refused = pytester.runpytest_inprocess(f"--slurmflox-target={target}", "-p", "no:cacheprovider", *how, "test_d.py")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    err = refused.stderr.str() + refused.stdout.str()
    assert "T11R" in err and "--slurmflox-destructive" in err
    assert "passed" not in refused.stdout.str()  # nothing ran
    allowed = pytester.runpytest_inprocess(
        f"--slurmflox-target={target}", "-p", "no:cacheprovider", "--slurmflox-destructive", *how, "test_d.py"
    )
    assert allowed.ret == pytest.ExitCode.OK
    allowed.assert_outcomes(passed=2 if how[0].startswith("--slurmflox-groups") else 1)


def test_destructive_group_is_not_run_unless_named(pytester, tmp_path):
    pytester.makepyfile(test_d=DESTRUCTIVE_CHECK)
    res = pytester.runpytest_inprocess(f"--slurmflox-target={_target(tmp_path)}", "-p", "no:cacheprovider", "test_d.py")
    res.assert_outcomes(passed=1, deselected=1)


# ------------------------------------------------------------------------------------------------ real sshd
@pytest.fixture
def sshd(tmp_path):
    """A real sshd on 127.0.0.1:<free port> that lets root in with a generated client key (tests/sshd.py)."""
    client_key = keygen(tmp_path / "client")
    with running_sshd(tmp_path / "sshd", (tmp_path / "client.pub").read_text()) as server:
        yield {"port": server.port, "client_key": client_key, "host_pub": server.host_pub, "dir": server.dir}


def _runner(sshd: dict, known_hosts: Path | None) -> SSHRunner:
    return SSHRunner(
        host="127.0.0.1",
        port=sshd["port"],
        user="root",
        key_file=sshd["client_key"],
        known_hosts=known_hosts,
        connect_timeout=10,
    )


def test_unknown_host_key_is_refused(sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    for known in (empty, None):
        runner = _runner(sshd, known)
        with pytest.raises(HostKeyRefused, match="not pinned"):
            runner.run("id -u")
        runner.close()
    assert not empty.read_text(), "a refused host key must never be added to known_hosts"


def test_a_different_pinned_key_is_refused(sshd, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fields = (tmp_path / "other.pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd['port']} {fields[0]} {fields[1]}\n")
    runner = _runner(sshd, known)
    with pytest.raises(HostKeyRefused):
        runner.run("id -u")
    runner.close()


def test_the_pinned_host_key_is_accepted(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd['port']} {sshd['host_pub']}\n")
    runner = _runner(sshd, known)
    try:
        result = runner.run("id -u")
    finally:
        runner.close()
    assert result.ok and result.stdout.strip() == "0", result.describe()
