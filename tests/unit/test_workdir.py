"""Deployment state: persisted worker settings, atomic 0600 writes, strip-secrets."""

from __future__ import annotations

import stat

from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir, WorkerRevisionFile, write_secret


def _up(store: WorkerRevisionFile, keys: dict[str, str]):
    """What `up` does with settings: resolve with the persisted layer, then record the explicit worker keys
    (``keys`` as the environment gives them, ``SLURMFLOX_<KEY>``)."""
    resolved = resolve(env={f"SLURMFLOX_{k}": v for k, v in keys.items()}, persisted=store.read())
    store.record(resolved.explicit_worker)
    return resolved.settings


def test_bare_rerun_keeps_an_explicit_generation_and_an_explicit_value_replaces_it(tmp_path):
    store = WorkerRevisionFile(tmp_path / "worker-revision.env")
    assert _up(store, {"WORKER_FLOX_GENERATION": "18"}).worker_flox_generation == 18
    assert _up(store, {}).worker_flox_generation == 18  # bare rerun: persisted
    assert _up(store, {"WORKER_FLOX_GENERATION": "19"}).worker_flox_generation == 19  # explicit wins ...
    assert _up(store, {}).worker_flox_generation == 19  # ... and is recorded
    assert store.read() == {"WORKER_FLOX_GENERATION": "19"}


def test_defaults_are_not_materialized_and_empty_values_survive(tmp_path):
    store = WorkerRevisionFile(tmp_path / "worker-revision.env")
    _up(store, {"NODES": "4"})
    assert not store.path.exists()
    _up(store, {"WORKER_HOME_PATH": "", "WORKER_ENV_EXPORTS": "A,B"})
    assert store.read() == {"WORKER_HOME_PATH": "", "WORKER_ENV_EXPORTS": "A,B"}
    assert _up(store, {}).worker_home_path == ""


def test_persisted_file_is_private_and_shell_quoted(tmp_path):
    store = WorkerRevisionFile(tmp_path / "worker-revision.env")
    store.write({"WORKER_ENV_EXPORTS": "A,B", "WORKER_HOME_PATH": ""})
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    text = store.path.read_text()
    assert "WORKER_HOME_PATH=''" in text and "WORKER_ENV_EXPORTS=A,B" in text
    assert not list(tmp_path.glob(".worker-revision.env.*"))  # no temp file left behind


def test_secret_files_are_0600_from_creation(tmp_path):
    path = tmp_path / "k8s" / "kubeconfig"
    write_secret(path, "secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "secret"


def test_strip_secrets_removes_every_listed_path_and_is_repeatable(tmp_path):
    wd = Workdir(tmp_path)
    for path in (
        wd.ssh_key,
        wd.ssh_pubkey,
        wd.munge_key,
        wd.kubeconfig,
        wd.local / "conf" / "slurm.key",
        wd.local / "login" / "ssh_host_ed25519_key",
    ):
        write_secret(path, "x")
    (wd.seed / "node1").mkdir(parents=True)
    (wd.nodes / "node1.qcow2").parent.mkdir(parents=True)
    (wd.nodes / "node1.qcow2").write_text("disk")
    WorkerRevisionFile(wd.worker_revision_env).write({"WORKER_CPUS": "4"})
    removed = wd.strip_secrets()
    assert {wd.ssh_key, wd.munge_key, wd.kubeconfig, wd.seed, wd.nodes} <= set(removed)
    for path in wd.secret_paths():
        assert not path.exists()
    assert wd.worker_revision_env.exists()  # not a secret: the deployed runtime survives
    assert wd.strip_secrets() == []
