"""The ``directory`` capability (#13) without a cluster: the target file field, the LDIF reader, the commands."""

from __future__ import annotations

import base64

import pytest

from pytest_slurmflox.base.run import LocalRunner
from pytest_slurmflox.model.directory import Directory, escape_filter, ldapsearch, membership_ldif, parse_ldif
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.target import TargetError, parse_target, target_document
from pytest_slurmflox.substrates.local import directory as local_directory

LOGIN = {"host": "h", "user": "alice", "key": "/k"}


def test_a_declared_directory_round_trips_through_the_target_file():
    doc = {
        "login": LOGIN,
        "directory": {
            "uri": "ldap://ldap.example/",
            "base": "dc=example",
            "user": "alice",
            "groups": ["hpc"],
            "bind_dn": "cn=reader,dc=example",
            "bind_password_file": "/etc/ldap/reader.secret",
        },
    }
    spec = parse_target(doc)
    assert spec.directory == Directory(
        "ldap://ldap.example/", "dc=example", "alice", ("hpc",), "cn=reader,dc=example", "/etc/ldap/reader.secret"
    )
    assert spec.declares("directory") and not parse_target({"login": LOGIN}).declares("directory")
    assert parse_target(target_document(spec)).directory == spec.directory


@pytest.mark.parametrize(
    ("directory", "field"),
    [
        ({"base": "dc=x", "user": "a"}, "directory.uri"),
        ({"uri": "ldap://x/", "base": "dc=x", "user": "a", "groups": "hpc"}, "directory.groups"),
        ({"uri": "ldap://x/", "base": "dc=x", "user": "a", "bind_dn": "cn=r"}, "bind_password_file"),
        ("ldap://x/", "directory: .ldap://x/. is text, expected a mapping"),
    ],
)
def test_a_malformed_directory_names_the_field(directory, field):
    with pytest.raises(TargetError, match=field):
        parse_target({"login": LOGIN, "directory": directory})


def test_ldif_reader_handles_base64_values_and_several_entries():
    text = (
        "dn: cn=hpc,ou=groups,dc=x\ncn: hpc\ngidNumber: 2000\n\n"
        f"dn:: {base64.b64encode('cn=grüne,ou=groups,dc=x'.encode()).decode()}\ncn: grüne\ngidNumber: 2001\n"
    )
    entries = parse_ldif(text)
    assert [e["cn"][0] for e in entries] == ["hpc", "grüne"]
    assert entries[1]["dn"] == ["cn=grüne,ou=groups,dc=x"] and entries[1]["gidnumber"] == ["2001"]


def test_ldapsearch_binds_with_the_secret_file_never_the_secret():
    d = Directory("ldap://x/", "dc=x", "alice", (), "cn=r,dc=x", "/etc/s")
    cmd = ldapsearch(d, f"(uid={escape_filter('a*(b)')})", "uid")
    assert "-y /etc/s" in cmd and "-D cn=r,dc=x" in cmd and "'(uid=a\\2a\\28b\\29)'" in cmd
    anonymous = ldapsearch(Directory("ldap://x/", "dc=x", "alice"), "(uid=a)")
    assert " -D " not in anonymous and " -y " not in anonymous


def test_the_local_seed_is_valid_ldif_with_the_test_user_and_groups(tmp_path):
    settings = resolve(cli={"WORKDIR": str(tmp_path)}, substrate="local").settings
    files = local_directory.write_files(tmp_path, settings)
    assert files.secret.stat().st_mode & 0o777 == 0o600 and files.secret.name.endswith(".key")
    secret = files.secret.read_text()
    seed = (files.conf / "seed.ldif").read_text()
    assert secret not in seed and "{SSHA}" in seed
    entries = {e["dn"][0]: e for e in parse_ldif(seed)}
    user = entries[f"uid={settings.test_user},ou=people,dc=slurmflox"]
    assert user["uidnumber"] == [str(settings.test_uid)] and user["gidnumber"] == [str(settings.test_gid)]
    supp = entries[f"cn={settings.test_supp_group},ou=groups,dc=slurmflox"]
    assert supp["memberuid"] == [settings.test_user] and supp["gidnumber"] == [str(settings.test_supp_gid)]
    again = local_directory.write_files(tmp_path, settings)
    assert again.secret.read_text() == secret  # a rerun never rotates the secret


def test_the_ssha_hash_verifies_like_slapd_does():
    import hashlib

    value = local_directory.ssha("s3cret-value")
    raw = base64.b64decode(value.removeprefix("{SSHA}"))
    digest, salt = raw[:20], raw[20:]
    assert hashlib.sha1(b"s3cret-value" + salt).digest() == digest


def test_membership_edit_is_one_memberuid_change():
    ldif = membership_ldif("cn=hpc,ou=groups,dc=x", "alice", add=False)
    assert ldif.splitlines() == [
        "dn: cn=hpc,ou=groups,dc=x",
        "changetype: modify",
        "delete: memberUid",
        "memberUid: alice",
    ]
    assert "add: memberUid" in membership_ldif("cn=hpc,ou=groups,dc=x", "alice", add=True)


def test_an_unreachable_directory_is_reported_with_the_reason():
    from pytest_slurmflox.model.directory import probe

    why = probe(LocalRunner(), Directory("ldap://127.0.0.1:9/", "dc=x", "alice"))
    assert why is not None and "ldapsearch" in why


def test_workers_resolve_through_the_directory_from_slurm_26_05_by_the_image_version(tmp_path):
    """26.05.5 (sid's image record) held an sbatch --export=NONE job "user env retrieval failed requeued held" where
    root on the worker could not resolve the user; 24.11 and 22.05 ran it: only 26.05's workers get the directory."""
    settings = resolve(cli={"WORKDIR": str(tmp_path)}, substrate="local").settings
    files = local_directory.DirectoryFiles(tmp_path / "ldap")
    assert local_directory.worker_boot(files, settings, "24.11.5-4+deb13u1") == {}
    assert local_directory.worker_boot(files, settings, "22.05.8-4+deb12u3") == {}
    boot = local_directory.worker_boot(files, settings, "26.05.5-1")
    assert boot["WORKER_NSS"] == "slurm files ldap"  # nss_slurm first: a task's names still come from its step
    assert boot["LDAP_BIND_SECRET"] == str(files.secret) and boot["TEST_USER"] == settings.test_user
