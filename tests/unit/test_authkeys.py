"""Where a cluster keeps its secrets (pytest_slurmflox/judges/authkeys.py): the parser of ``scontrol show config``, the
places it names, and the probe T10 runs on each worker, executed here by bash as an unprivileged user (the probe is
shell text; running it is the only honest test of it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pytest_slurmflox.judges.authkeys import (
    MUNGE_DEFAULT_KEY,
    key_places,
    key_problems,
    munged_key_file,
    parse_show_config,
    probe_script,
    resolve,
    uses_munge,
)
from pytest_slurmflox.judges.slurmenv import SlurmFacts

DATA = Path(__file__).resolve().parents[1] / "data"


def test_parse_keeps_the_main_block_and_empties_null():
    text = (
        "Configuration data as of 2026-12-02T12:00:00\n"
        "AuthAltParameters       = jwt_key=/run/k.key\n"
        "AuthInfo                = (null)\n"
        "Epilog[0]               = /etc/slurm/epilog.d/*.sh\n"
        "SlurmdSpoolDir          = /var/spool/slurmd.%n\n"
        "\nCgroup Support Configuration:\nAuthInfo                = later\n"
    )
    config = parse_show_config(text)
    assert config["AuthAltParameters"] == "jwt_key=/run/k.key"
    assert config["AuthInfo"] == ""  # (null), and the later section does not override the main block
    assert config["Epilog[0]"] == "/etc/slurm/epilog.d/*.sh"
    assert config["SlurmdSpoolDir"] == "/var/spool/slurmd.%n"


def test_places_follow_the_configuration():
    config = {
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": "socket=/run/munge/munge.socket.2,ttl=60,keyfile=/srv/keys/site.key",
        "AuthAltParameters": "disable_token_creation,jwt_key=/srv/jwt/%n.key",
        "JobCredentialPrivateKey": "/etc/slurm/cred.priv",
        "SlurmdSpoolDir": "/var/spool/%h/slurmd",
        "SLURM_CONF": "/opt/slurm/etc/slurm.conf",
    }
    places = {p.template: p for p in key_places(config)}
    assert "/srv/jwt/%n.key" in places and "/srv/keys/site.key" in places and "/etc/slurm/cred.priv" in places
    assert "/run/munge/munge.socket.2" not in places  # a socket, not a secret
    assert "/var/spool/%h/slurmd/cred_state*" in places
    assert "/opt/slurm/etc/slurm.key" not in places  # munge cluster: no auth/slurm key
    assert uses_munge(config)
    slurm = key_places({**config, "AuthType": "auth/slurm", "CredType": "cred/slurm"})
    named = {p.template: p.auth for p in slurm}
    assert named["/opt/slurm/etc/slurm.key"] is True and "/var/spool/%h/slurmd/conf-cache/slurm.key" in named
    assert "/etc/munge/munge.key" in named  # the known places are probed whatever the configuration says


def test_munged_key_and_resolution():
    assert munged_key_file(["/usr/sbin/munged", "--foreground"]) == MUNGE_DEFAULT_KEY
    assert munged_key_file(["munged", "--key-file=/srv/m.key"]) == "/srv/m.key"
    assert munged_key_file(["munged", "--key-file", "/srv/m2.key", "-F"]) == "/srv/m2.key"
    assert resolve("/var/spool/%h/%n", "worker2", "pod-2") == "/var/spool/pod-2/worker2"


@pytest.fixture
def tree():
    # not under tmp_path: pytest's base directory is 0700, which the unprivileged probe could not even enter
    tmp_path = Path(tempfile.mkdtemp(prefix="sfx-authkeys-", dir="/tmp"))
    os.chmod(tmp_path, 0o755)
    (tmp_path / "worker2").mkdir(mode=0o755)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    (closed / "k").write_text("secret")
    spool = tmp_path / "spool-host"
    spool.mkdir(mode=0o755)
    (spool / "cred_state").write_text("state")
    (spool / "cred_state").chmod(0o600)
    yield tmp_path
    shutil.rmtree(tmp_path)


def _probe(places, munge: bool, node: str) -> list[str]:
    script = probe_script(places, munge)
    # as nobody: what a task of an unprivileged user would see (this host's root reads everything)
    out = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script],
        env={"PATH": os.environ["PATH"], "SLURMD_NODENAME": node},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the probe as another user")
def test_the_probe_names_a_readable_key_at_a_configured_path(tree):
    config = {
        "AuthAltParameters": f"jwt_key={tree}/%n/jwt.key",
        "AuthInfo": f"keyfile={tree}/closed/k",
        "SlurmdSpoolDir": f"{tree}/spool-host",
    }
    places = key_places(config)
    healthy = _probe(places, False, "worker2")
    assert key_problems("worker2", healthy, places, False) == []
    assert any(line.startswith(f"unreachable|{tree}/closed/k|") for line in healthy), healthy
    (tree / "worker2" / "jwt.key").write_text("key")  # readable by everyone, at a path only the config names
    broken = _probe(places, False, "worker2")
    assert key_problems("worker2", broken, places, False) == [
        f"a task can read {tree}/worker2/jwt.key (AuthAltParameters jwt_key)"
    ]
    assert key_problems("worker1", _probe(places, False, "worker1"), places, False) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the probe as another user")
def test_a_probe_that_skipped_a_place_or_did_not_finish_is_a_problem(tree):
    places = key_places({"AuthAltParameters": f"jwt_key={tree}/%n/jwt.key"})
    lines = _probe(places, True, "worker2")
    assert key_problems("worker2", lines, places, True) == []
    assert any(line == f"probe|munge|{MUNGE_DEFAULT_KEY}" for line in lines)  # no munged here: the default key
    skipped = [line for line in lines if not line.startswith(f"probe|{tree}/%n/jwt.key|")]
    assert key_problems("worker2", skipped, places, True) == [
        f"AuthAltParameters jwt_key '{tree}/%n/jwt.key' was not probed at '{tree}/worker2/jwt.key'"
    ]
    # the probe resolved %n for another node than the one it reports for: not a pass
    assert key_problems("worker3", lines, places, True)[0].startswith("AuthAltParameters jwt_key")
    assert key_problems("worker2", lines[:-1], places, True) == ["the probe did not finish"]


def test_real_slurm_24_11_text_from_the_local_substrate():
    """``scontrol show config`` at the login endpoint of a three-worker local cluster (Debian trixie, Slurm 24.11.5,
    auth/slurm with cred/munge and auth/jwt as the alternative; captured by
    tests/integration/test_keys_accounts_env_mutations_local.py)."""
    text = (DATA / "scontrol-show-config-24.11-local.txt").read_text()
    config = parse_show_config(text)
    assert config["SLURM_VERSION"] == "24.11.5" and config["AuthType"] == "auth/slurm"
    assert config["AuthInfo"] == "use_client_ids,socket=/run/munge/munge.socket.2"
    assert config["PMIxEnv"] == ""  # a plugin section after the main block, (null) read as empty
    places = {p.template: p.why for p in key_places(config)}
    assert places["/run/slurmflox/jwt_hs256.key"] == "AuthAltParameters jwt_key"
    assert places["/etc/slurm/slurm.key"] == "known location"  # beside SLURM_CONF too: probed once
    assert places["/var/lib/slurm/slurmd/conf-cache/slurm.key"].startswith("auth/slurm slurm.key")
    assert places["/var/lib/slurm/slurmd/cred_state*"] == "SlurmdSpoolDir credential state"
    assert "/run/munge/munge.socket.2" not in places and uses_munge(config)  # cred/munge: munged's key per worker


def test_real_slurm_22_05_text_from_a_bookworm_local_cluster():
    """``scontrol show config`` at the login endpoint of a bookworm local cluster (Debian's Slurm 22.05.8: auth/munge
    and cred/munge, auth/jwt as the alternative, munged started as ``munged --foreground --num-threads=2``; captured
    by hand from ``--slurmflox-up=local --slurmflox-local-suite=bookworm``, its T10 secrets check PASSED there)."""
    text = (DATA / "scontrol-show-config-22.05-bookworm-local.txt").read_text()
    config = parse_show_config(text)
    assert config["SLURM_VERSION"] == "22.05.8"
    assert (config["AuthType"], config["CredType"]) == ("auth/munge", "cred/munge") and uses_munge(config)
    assert config["AuthInfo"] == "" and config["JobCredentialPrivateKey"] == ""  # (null): no path to probe
    assert config["SlurmctldHost[0]"] == "ctl(10.77.0.2)"  # an indexed key, kept whole
    assert config["AllowedRAMSpace"] == "100.0%"  # the cgroup section after the main block is read too
    assert "Slurmctld(primary) at ctl is UP" not in "".join(config)  # the status line is no key
    places = {p.template: p.why for p in key_places(config)}
    assert places == {
        "/etc/munge/munge.key": "known location",
        "/etc/slurm/slurm.key": "known location",
        "/etc/slurm/slurm.jwks": "known location",
        "/run/slurmflox/jwt_hs256.key": "AuthAltParameters jwt_key",
        "/var/lib/slurm/slurmd/cred_state*": "SlurmdSpoolDir credential state",
    }  # no auth/slurm key beside SLURM_CONF on a munge cluster
    assert munged_key_file(["/usr/sbin/munged", "--foreground", "--num-threads=2"]) == MUNGE_DEFAULT_KEY


def test_both_versions_print_every_key_the_parser_needs_in_the_same_shape():
    """The 22.05 and 24.11 texts side by side: the keys T10 and TP read are there in both, one ``Key = value`` per
    line, so nothing version-specific is needed to read them."""
    needed = ("AuthType", "CredType", "AuthInfo", "AuthAltParameters", "SlurmdSpoolDir", "SLURM_CONF", "TmpFS")
    for name in ("scontrol-show-config-22.05-bookworm-local.txt", "scontrol-show-config-24.11-local.txt"):
        config = parse_show_config((DATA / name).read_text())
        assert all(key in config for key in needed), (name, [k for k in needed if k not in config])
        assert config["SLURM_CONF"] == "/etc/slurm/slurm.conf" and config["TmpFS"] == "/tmp", name
        facts = SlurmFacts.parse((DATA / name).read_text())  # TP's reading of the same text (slurmenv.py)
        assert (facts.slurm_conf, facts.tmpfs, facts.spool) == (
            "/etc/slurm/slurm.conf",
            "/tmp",
            config["SlurmdSpoolDir"],
        )
