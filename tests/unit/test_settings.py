"""Settings: defaults, the one precedence, empty-has-meaning keys, and refusal of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_slurmflox.model.settings import (
    DEFAULT_WORKER_IMAGE,
    KEYS,
    KEYS_BY_NAME,
    WORKER_KEYS,
    SettingsError,
    resolve,
)
from pytest_slurmflox.model.workdir import WorkerRevisionFile

REFERENCE_DEFAULTS = {
    "NODES": 3,
    "VCPUS": 8,
    "MEM": 8192,
    "DISK_SIZE": "40G",
    "SHARED_HOME": True,
    "SSH_PORT_BASE": 2240,
    "K8S_API_PORT": 6444,
    "POD_CIDR": "10.244.0.0/16",
    "SVC_CIDR": "10.96.0.0/12",
    "COMPUTE_REPLICAS": 2,
    "WORKER_FLOX_ENV": "flox/echoip",
    "WORKER_FLOX_GENERATION": 2,
    "WORKER_FLOX_ACTIVATE_MODE": "run",
    "WORKER_FLOX_SKIP_CONTAINERS": ("logfile",),
    "WORKER_ENV_EXPORTS": (),
    "WORKER_PATH_PRECEDENCE": "prepend",
    "WORKER_CPUS": 6,
    "WORKER_MEM_MB": 6144,
    "WORKER_HOME_PATH": "/home",
    "WORKER_IMAGE": DEFAULT_WORKER_IMAGE,
    "LOGIN": True,
    "LOGIN_NODEPORT": 32222,
    "LOGIN_SSH_PORT": 2222,
    "TEST_IDENTITY": True,
    "TEST_USER": "slurmtest",
    "TEST_UID": 4001,
    "TEST_GID": 4001,
    "TEST_SUPP_GROUP": "sharedgrp",
    "TEST_SUPP_GID": 4002,
    "KUBERNETES_VERSION": "1.36.3",
    "FLANNEL_VERSION": "v0.28.9",
    # the design's 1.15.0 / 1.2.2 are not released upstream (flox/flox v1.14.1, SlinkyProject/slurm-operator
    # v1.2.1 are the newest tags): the defaults are the versions that exist (docs/reference-stack.md)
    "FLOX_VERSION": "1.14.1",
    "SLINKY_VERSION": "1.2.1",
    "CERT_MANAGER_VERSION": "v1.19.2",
    "LOCAL_PATH_VERSION": "v0.0.31",
    "EXPECTED_SLURM": "26.05.4",
}


def test_reference_defaults_are_kept():
    s = resolve().settings
    for key, value in REFERENCE_DEFAULTS.items():
        assert getattr(s, key.lower()) == value, key
    assert s.workdir == Path("operator")
    assert s.worker_flox_ref == "flox/echoip:2"


def test_worker_keys_are_exactly_the_persisted_reference_keys():
    assert set(WORKER_KEYS) == {
        "WORKER_FLOX_ENV",
        "WORKER_FLOX_GENERATION",
        "WORKER_FLOX_ACTIVATE_MODE",
        "WORKER_FLOX_SKIP_CONTAINERS",
        "WORKER_ENV_EXPORTS",
        "WORKER_PATH_PRECEDENCE",
        "WORKER_CPUS",
        "WORKER_MEM_MB",
        "WORKER_IMAGE",
        "WORKER_HOME_PATH",
    }


def test_precedence_cli_env_persisted_config_default():
    key = "WORKER_FLOX_GENERATION"
    layers = {"cli": "5", "env": "4", "persisted": "3", "config": "2"}
    for drop in ["", "cli", "env", "persisted", "config"]:
        if drop:
            layers.pop(drop)
        r = resolve(
            cli={key: layers.get("cli")},
            env={f"SLURMFLOX_{key}": layers["env"]} if "env" in layers else {},
            persisted={key: layers["persisted"]} if "persisted" in layers else {},
            config={key: layers.get("config")},
        )
        expected_source = next(iter(layers), "default")
        assert r.sources[key] == expected_source
        assert r.settings.worker_flox_generation == int(layers.get(expected_source, "2"))


def test_persisted_layer_only_holds_worker_keys():
    with pytest.raises(SettingsError, match="NODES"):
        resolve(persisted={"NODES": "4"})


def test_config_file_sits_below_persisted_for_worker_keys_but_above_default_for_others():
    r = resolve(persisted={"WORKER_CPUS": "3"}, config={"WORKER_CPUS": "5", "NODES": "4"})
    assert r.settings.worker_cpus == 3 and r.sources["WORKER_CPUS"] == "persisted"
    assert r.settings.nodes == 4 and r.sources["NODES"] == "config"


@pytest.mark.parametrize("key", ["WORKER_ENV_EXPORTS", "WORKER_HOME_PATH", "WORKER_FLOX_SKIP_CONTAINERS"])
def test_explicit_empty_is_kept_where_it_has_meaning(key):
    r = resolve(
        env={f"SLURMFLOX_{key}": ""},
        persisted={key: "SOMETHING" if key == "WORKER_ENV_EXPORTS" else "/x"}
        if key != "WORKER_FLOX_SKIP_CONTAINERS"
        else {key: "logfile"},
    )
    assert getattr(r.settings, key.lower()) in ("", ())
    assert r.explicit_worker[key] == ""


def test_empty_is_not_given_where_it_has_no_meaning():
    r = resolve(env={"SLURMFLOX_WORKER_FLOX_GENERATION": ""})
    assert r.settings.worker_flox_generation == 2 and r.sources["WORKER_FLOX_GENERATION"] == "default"


def test_only_cli_and_env_values_are_explicit():
    r = resolve(
        cli={"WORKER_CPUS": "4"},
        env={"SLURMFLOX_WORKER_MEM_MB": "2048", "SLURMFLOX_NODES": "4"},
        persisted={"WORKER_FLOX_GENERATION": "7"},
        config={"WORKER_IMAGE": DEFAULT_WORKER_IMAGE},
    )
    assert r.explicit_worker == {"WORKER_CPUS": "4", "WORKER_MEM_MB": "2048"}


def test_the_environment_is_read_only_under_our_own_names():
    """A login node's or a CI job's environment is not ours: bare WORKDIR, NODES, MEM, LOGIN, TEST_USER (and every
    other bare key) are never read; SLURMFLOX_<KEY> is (issue 38)."""
    bare = {"WORKDIR": "/usr/lib", "NODES": "all", "MEM": "lots", "LOGIN": "login01", "TEST_USER": "Root"}
    bare |= {spec.key: "not-ours" for spec in KEYS if spec.key not in bare}
    r = resolve(env=bare)
    assert r.explicit == {} and set(r.sources.values()) == {"default"}
    assert r.settings == resolve().settings
    ours = resolve(env={"SLURMFLOX_WORKDIR": "/srv/wd", "SLURMFLOX_NODES": "4", "NODES": "all"})
    assert ours.settings.workdir == Path("/srv/wd") and ours.settings.nodes == 4 and ours.sources["NODES"] == "env"


def test_local_substrate_defaults_sit_at_the_default_level():
    r = resolve(substrate="local")
    assert r.settings.worker_flox_ref == "local/demo:1"
    assert r.sources["WORKER_FLOX_ENV"] == "default:local"
    gatk = resolve(substrate="local", env={"SLURMFLOX_WORKER_FLOX_ENV": "local/gatk"})
    assert gatk.settings.worker_flox_env == "local/gatk"


# -- refusals ------------------------------------------------------------------------------------------
BAD = {
    "WORKER_IMAGE": [
        "ghcr.io/slinkyproject/slurmd:26.05",
        "slurmd@sha256:" + "a" * 64,
        "repo:tag@sha256:abc",
        "Repo:tag@sha256:" + "a" * 64,
        "repo:tag@sha512:" + "a" * 64,
    ],
    "WORKER_FLOX_SKIP_CONTAINERS": ["slurmd", "logfile,flox-task-profile-init", "Bad_Name"],
    "WORKER_ENV_EXPORTS": ["1ABC", "A-B", "PATH", "A=B", "$(id)"],
    "WORKER_PATH_PRECEDENCE": ["first", "PREPEND"],
    "WORKER_FLOX_ACTIVATE_MODE": ["build"],
    "WORKER_FLOX_ENV": ["echoip", "flox/", "/x", "a/b/c"],
    "WORKER_FLOX_GENERATION": ["0", "-1", "1.5", "latest"],
    "NODES": ["0", "1", "10"],
    "WORKER_CPUS": ["0", "many"],
    "WORKER_MEM_MB": ["10"],
    "LOGIN_NODEPORT": ["80", "40000"],
    "SSH_PORT_BASE": ["22", "70000"],
    "WORKER_HOME_PATH": ["home", "/a/../b"],
    "POD_CIDR": ["10.244.0.1/16", "nonsense"],
}


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in BAD.items() for v in vs])
def test_bad_values_are_refused_naming_key_value_and_rule(key, value):
    with pytest.raises(SettingsError) as info:
        resolve(env={f"SLURMFLOX_{key}": value})
    message = str(info.value)
    assert message.startswith(f"{key}=") and repr(value) in message and "refused" in message


# property tests: generated bad values are refused, and nothing is written
_hex = st.text("0123456789abcdef", min_size=64, max_size=64)
bad_images = st.one_of(
    st.text(min_size=1, max_size=40).filter(lambda s: "@sha256:" not in s),
    st.builds(lambda d: f"repo@sha256:{d}", _hex),  # no tag
    st.builds(lambda d, n: f"repo:tag@sha256:{d[:n]}", _hex, st.integers(0, 63)),  # short digest
    st.builds(lambda d: f"repo:tag@sha256:{d.upper()}G", _hex),
)
bad_names = st.text(min_size=1, max_size=12).filter(
    lambda s: (
        not any(c.isspace() or c == "," for c in s)
        and (not s.replace("_", "a").isalnum() or s[0].isdigit() or not s.isascii())
    )
)
bad_ints = st.one_of(st.integers(max_value=0).map(str), st.text(max_size=6).filter(lambda s: not s.isdigit()))


def _refused_and_nothing_written(tmp: Path, key: str, value: str) -> None:
    store = WorkerRevisionFile(tmp / "worker-revision.env")
    store.write({"WORKER_FLOX_GENERATION": "18"})
    before = store.path.read_bytes()
    try:
        r = resolve(env={f"SLURMFLOX_{key}": value}, persisted=store.read())
    except SettingsError as exc:
        assert key in str(exc)
    else:  # pragma: no cover - the property is that this never happens
        store.record(r.explicit_worker)
        pytest.fail(f"{key}={value!r} was accepted")
    assert store.path.read_bytes() == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=bad_images)
def test_property_bad_images_refused(tmp_path, value):
    _refused_and_nothing_written(tmp_path, "WORKER_IMAGE", value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=bad_names.map(lambda n: "GOOD," + n))
def test_property_bad_export_names_refused(tmp_path, value):
    _refused_and_nothing_written(tmp_path, "WORKER_ENV_EXPORTS", value)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.sampled_from(["slurmd", "flox-task-profile-init"]),
    other=st.lists(st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), max_size=3),
)
def test_property_protected_containers_never_skip(tmp_path, value, other):
    _refused_and_nothing_written(tmp_path, "WORKER_FLOX_SKIP_CONTAINERS", ",".join([*other, value]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["WORKER_FLOX_GENERATION", "WORKER_CPUS", "WORKER_MEM_MB", "NODES", "LOGIN_SSH_PORT"]),
    value=bad_ints,
)
def test_property_bad_numbers_refused(tmp_path, key, value):
    if value.strip() == "":
        return  # empty means "not given" for numeric keys: covered by test_empty_is_not_given...
    _refused_and_nothing_written(tmp_path, key, value)


def test_every_key_has_flag_env_and_ini_spelling():
    for spec in KEYS:
        assert spec.flag == "--slurmflox-" + spec.key.lower().replace("_", "-")
        assert spec.env == "SLURMFLOX_" + spec.key
        assert spec.ini == "slurmflox_" + spec.key.lower()
    assert KEYS_BY_NAME["WORKER_IMAGE"].worker


# ------------------------------------------------------------------------------------------------ target file
def test_the_target_serializer_round_trips(tmp_path):
    """One serializer: what a substrate writes is what parse_target reads back, settings included."""
    import dataclasses

    from pytest_slurmflox.model.revision import runtime_revision
    from pytest_slurmflox.model.target import (
        Endpoint,
        Expectations,
        Identity,
        KubeSpec,
        TargetSpec,
        load_target,
        write_target,
    )

    deployed = resolve(
        cli={"WORKDIR": str(tmp_path), "WORKER_FLOX_GENERATION": "18", "LOGIN_SSH_PORT": "2299"}
    ).settings
    login = Endpoint("127.0.0.1", 2299, "slurmtest", tmp_path / "id_cluster", tmp_path / "known_hosts")
    spec = TargetSpec(
        path=tmp_path / "target.yaml",
        name="site",
        substrate="qemu",
        workdir=tmp_path,
        login=login,
        admin=dataclasses.replace(login, user="root"),
        kubernetes=KubeSpec(tmp_path / "kubeconfig", None, "slurm", "slurm-worker-compute"),
        partition="all",
        identity=Identity("slurmtest", 4001, 4001, "sharedgrp", 4002),
        expect=Expectations(deployed, runtime_revision(deployed), deployed.worker_image, 2),
        slurm_version="26.05.4",
        deployed=deployed,
    )
    doc = write_target(spec, tmp_path / "target.yaml")
    back = load_target(tmp_path / "target.yaml")
    # expect carries the worker runtime only (other keys take their defaults); everything else comes back equal
    assert dataclasses.replace(back, raw={}, expect=spec.expect) == dataclasses.replace(spec, raw={})
    got, want = back.expect, spec.expect
    assert (got.revision, got.image, got.replicas) == (want.revision, want.image, want.replicas)
    assert all(getattr(got.settings, k.lower()) == getattr(want.settings, k.lower()) for k in WORKER_KEYS)
    assert back.expect.settings.worker_flox_generation == 18 and back.deployed == deployed
    assert doc["admin"] == {"user": "root"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("WORKER_FLOX_ENV", "echoip"), ("WORKER_FLOX_ENV", "flox/echoip:3"), ("WORKER_FLOX_GENERATION", "0")],
)
def test_an_unpinned_reference_is_refused_so_every_target_pins_one(key, value):
    """Issue 26: why T2 has no check that the reference is pinned: no target file gets past these validators with
    anything but owner/name:generation (the check removed from T2 could never fail)."""
    from pytest_slurmflox.judges.expectations import is_pinned_reference

    assert is_pinned_reference(resolve(env={}).settings.worker_flox_ref)
    with pytest.raises(SettingsError, match=key):
        resolve(env={f"SLURMFLOX_{key}": value})
