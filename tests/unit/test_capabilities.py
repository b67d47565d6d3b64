"""Service capabilities in target files (#13): parsing, the one serializer, and the local substrate's renderers."""

from __future__ import annotations

import pytest

from pytest_slurmflox.model.secrets import Redactor, scan_for_secrets, secret_needles
from pytest_slurmflox.model.target import TargetError, parse_target, target_document
from pytest_slurmflox.substrates.local import accounting, slurmconf

LOGIN = {"host": "login.example", "user": "alice", "key": "/k"}
SERVICES = {
    "accounting": {"account": "hpc", "limited_account": {"name": "hpc-one", "max_jobs": 1}, "unassociated_user": "x"},
    "rest": {"url": "https://rest.example:6820/", "token_command": "scontrol token lifespan=60"},
}


def test_declared_services_round_trip_through_the_one_serializer():
    spec = parse_target({"login": LOGIN, **SERVICES})
    assert spec.accounting.account == "hpc" and spec.accounting.limited_max_jobs == 1
    assert spec.rest.url == "https://rest.example:6820" and spec.rest.version is None
    again = parse_target(target_document(spec))
    assert (again.accounting, again.rest) == (spec.accounting, spec.rest)


def test_undeclared_services_are_none_and_not_written():
    spec = parse_target({"login": LOGIN})
    assert spec.accounting is None and spec.rest is None
    doc = target_document(spec)
    assert "accounting" not in doc and "rest" not in doc


@pytest.mark.parametrize(
    ("doc", "field"),
    [({"accounting": {"limited_account": {"name": "a"}}}, "accounting.account"), ({"rest": {"x": 1}}, "rest.url")],
)
def test_a_malformed_service_names_its_field(doc, field):
    with pytest.raises(TargetError, match=field.replace(".", r"\.")):
        parse_target({"login": LOGIN, **doc})


def test_slurm_conf_accounting_and_jwt_lines():
    text = slurmconf.render_slurm_conf(slurmconf.ClusterConf("c", "ctl", "10.0.0.2"))
    for line in (
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageEnforce=associations,limits",
        "JobAcctGatherType=jobacct_gather/linux",
        "AuthAltTypes=auth/jwt",
    ):
        assert line in text.splitlines()
    off = slurmconf.render_slurm_conf(slurmconf.ClusterConf("c", "ctl", "10.0.0.2", accounting_host=None))
    assert "AccountingStorageType=accounting_storage/none" in off.splitlines()


def test_accounting_secrets_are_0600_reused_and_caught_by_the_scan(tmp_path):
    files = accounting.AccountingFiles(tmp_path / "local" / "accounting")
    files.ensure()
    password, key = files.password.read_bytes(), files.jwt_key.read_bytes()
    files.ensure()
    assert (files.password.read_bytes(), files.jwt_key.read_bytes()) == (password, key)  # never rotated
    assert files.password.stat().st_mode & 0o777 == 0o600 and files.jwt_key.stat().st_mode & 0o777 == 0o600
    conf = accounting.render_slurmdbd_conf(password.decode())
    assert f"StoragePass={password.decode()}" in conf.splitlines()
    artifact = tmp_path / "report.html"
    artifact.write_text(f"<pre>{conf}</pre>")
    leaks = scan_for_secrets([artifact], secret_needles([files.password, files.jwt_key]))
    assert [leak.label for leak in leaks] == ["content of db_password.key"]
    assert "SLURM_JWT=[REDACTED]" in Redactor()("SLURM_JWT=eyJhbGciOiJIUzI1NiJ9.e30.sig")


def test_slurmdbd_conf_uses_the_clusters_rpc_authentication():
    # bookworm's 22.05 has no auth/slurm: slurmdbd must speak the cluster's auth/munge (else it refuses slurmctld)
    munge = accounting.render_slurmdbd_conf("pw", "munge").splitlines()
    assert "AuthType=auth/munge" in munge and not any(line.startswith("AuthInfo=") for line in munge)
    slurm = accounting.render_slurmdbd_conf("pw", "slurm").splitlines()
    assert "AuthType=auth/slurm" in slurm and "AuthInfo=use_client_ids" in slurm
    assert "AuthAltTypes=auth/jwt" in munge and "AuthAltTypes=auth/jwt" in slurm
    with pytest.raises(ValueError):
        accounting.render_slurmdbd_conf("pw", "none")
