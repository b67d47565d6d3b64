"""endpoint.py: a target's login resolved through the site's ssh_config as ``ssh`` resolves it.

Real files (an ssh_config, key files that exist or not) parsed by ``paramiko.SSHConfig``; no connection is opened
here (tests/unit/test_ssh_route.py connects through a real bastion).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.model.endpoint import Endpoint
from pytest_slurmflox.model.target import TargetError, parse_target, target_document


def _files(tmp_path: Path) -> dict[str, Path]:
    names = ("login_key", "bastion_key", "login_known", "bastion_known")
    files = {name: tmp_path / name for name in names}
    for path in files.values():
        path.write_text("x\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host login\n  HostName 10.1.2.3\n  Port 2222\n  User alice\n"
        f"  IdentityFile {tmp_path / 'missing'}\n  IdentityFile {files['login_key']}\n"
        f"  UserKnownHostsFile {files['login_known']}\n  ProxyJump bastion,carol@inner:2200\n"
        "Host bastion\n  HostName 192.0.2.1\n  User bob\n"
        f"  IdentityFile {files['bastion_key']}\n  UserKnownHostsFile {files['bastion_known']}\n"
        "Host inner\n  HostName 192.0.2.2\n  Port 9\n  User nobody\n"
        "Host loop1\n  ProxyJump loop2\nHost loop2\n  ProxyJump loop1\n"
    )
    return {**files, "config": config}


def _spec(tmp_path: Path, **login: object):
    return parse_target({"version": 1, "login": login}, path=tmp_path / "target.yaml")


def test_every_key_comes_from_ssh_config_and_each_jump_is_resolved_there(tmp_path):
    f = _files(tmp_path)
    login = _spec(tmp_path, host="login", ssh_config=str(f["config"])).login
    assert (login.host, login.port, login.user) == ("10.1.2.3", 2222, "alice")
    assert (login.key, login.known_hosts, login.name) == (f["login_key"], f["login_known"], "login")
    bastion, inner = login.jumps
    # a hop's own ssh_config entry; its known_hosts its own, else the login's
    assert bastion == Endpoint("192.0.2.1", 22, "bob", f["bastion_key"], f["bastion_known"])
    # the hop's user and port as written win over its entry's
    assert inner == Endpoint("192.0.2.2", 2200, "carol", None, f["login_known"])


def test_values_in_the_target_file_win_over_ssh_config(tmp_path):
    f = _files(tmp_path)
    other_key, other_known = tmp_path / "other_key", tmp_path / "other_known"
    login = _spec(
        tmp_path,
        host="login",
        ssh_config=str(f["config"]),
        port=22,
        user="dave",
        key=str(other_key),
        known_hosts=str(other_known),
        proxy_jump="inner",
    ).login
    assert (login.host, login.port, login.user, login.key, login.known_hosts) == (
        "10.1.2.3",
        22,
        "dave",
        other_key,
        other_known,
    )
    assert login.jumps == (Endpoint("192.0.2.2", 9, "nobody", None, other_known),)
    assert _spec(tmp_path, host="login", ssh_config=str(f["config"]), proxy_jump="none").login.jumps == ()


def test_the_default_is_the_users_ssh_config_and_none_reads_none(tmp_path, monkeypatch):
    f = _files(tmp_path)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(f["config"].read_text())
    monkeypatch.setenv("HOME", str(home))
    assert _spec(tmp_path, host="login").login.port == 2222  # ~/.ssh/config when present
    plain = _spec(tmp_path, host="login", user="x", ssh_config="none").login
    assert (plain.host, plain.port, plain.key, plain.jumps, plain.ssh_config) == ("login", 22, None, (), None)
    (home / ".ssh" / "config").unlink()
    assert _spec(tmp_path, host="login", user="x").login.ssh_config is None


def test_a_resolved_target_is_written_back_to_resolve_the_same(tmp_path):
    f = _files(tmp_path)
    doc = {
        "version": 1,
        "login": {"host": "login", "ssh_config": str(f["config"])},
        "admin": {"user": "root"},
    }
    spec = parse_target(doc, path=tmp_path / "target.yaml")
    assert spec.admin == Endpoint(**{**spec.login.__dict__, "user": "root"})  # the admin shares the login's route
    again = parse_target(target_document(spec), path=tmp_path / "target.yaml")
    assert again.login == spec.login and again.admin == spec.admin
    written = target_document(spec)["login"]
    assert written["host"] == "login" and written["ssh_config"] == str(f["config"])
    # a target without ssh_config is written with "none", so a re-read never picks up the user's ~/.ssh/config
    plain = parse_target({"version": 1, "login": {"host": "h", "user": "u", "ssh_config": "none"}})
    assert target_document(plain)["login"]["ssh_config"] == "none"


@pytest.mark.parametrize(
    ("login", "message"),
    [
        ({"host": "login", "ssh_config": "nope"}, r"^login\.ssh_config: .*nope does not exist$"),
        ({"host": "bastion2", "ssh_config": "CONFIG"}, r"^login\.user is required \(or a User for bastion2 in "),
        ({"host": "login", "ssh_config": "CONFIG", "proxy_jump": "a@b@c"}, r"^login\.proxy_jump: 'a@b@c' is not"),
        ({"host": "login", "ssh_config": "CONFIG", "proxy_jump": "b:99999"}, r"^login\.proxy_jump \(b\): port"),
        ({"host": "x", "user": "u", "ssh_config": "CONFIG", "proxy_jump": "loop1"}, r"a ProxyJump loop at loop"),
        ({"user": "u"}, r"^login\.host is required$"),
    ],
)
def test_a_bad_endpoint_is_one_line_naming_the_key(tmp_path, login, message):
    f = _files(tmp_path)
    login = {k: str(f["config"]) if v == "CONFIG" else v for k, v in login.items()}
    with pytest.raises(TargetError, match=message) as refused:
        _spec(tmp_path, **login)
    assert "\n" not in str(refused.value)
