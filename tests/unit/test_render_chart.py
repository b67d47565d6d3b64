"""Our values rendered through the REAL Slinky slurm charts (both versions), asserted where Kubernetes reads them.

The charts are read from the shared reference copy (or $SLURMFLOX_SLINKY_CHARTS). Rendering uses helm-python-sdk,
i.e. Helm's own template engine. The rendered custom resources are validated against the CRDs' openAPI schemas,
and every pod spec we contribute is validated against the Kubernetes API models (unknown or mistyped fields are
refused there), because the CRDs leave the pod template unchecked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_slurmflox.model.revision import runtime_revision, short_revision
from pytest_slurmflox.model.settings import TASK_PROFILE_SCHEMA, Settings, resolve
from pytest_slurmflox.substrates.qemu.render import chart as rc
from pytest_slurmflox.substrates.qemu.render import crd as rcrd
from pytest_slurmflox.substrates.qemu.render import values as rv

pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: cannot render the Slinky chart")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

CHARTS_ROOT = rc.default_charts_root()
CHARTS = rc.find_slurm_charts(CHARTS_ROOT)
CRD_DIR = CHARTS_ROOT / "config" / "crd" / "bases"
if not CHARTS:
    pytest.skip(f"no Slinky slurm chart below {CHARTS_ROOT} (set {rc.CHARTS_ENV})", allow_module_level=True)

BASE_PASSWD = "root:x:0:0:root:/root:/bin/bash\nslurm:x:401:401::/var/lib/slurm:/usr/sbin/nologin\n"
BASE_GROUP = "root:x:0:\nslurm:x:401:\n"
BASE_SHADOW = "root:*:20000:0:99999:7:::\nslurm:!:20000::::::\n"
NAMESPACE = "hpc"


@pytest.fixture(params=sorted(CHARTS), ids=lambda v: f"chart-{v}")
def chart(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, CHARTS[request.param]


def settings_for(**keys: str) -> Settings:
    return resolve(cli=keys).settings


def identity(s: Settings) -> rv.IdentityFiles:
    return rv.test_identity_files(s, BASE_PASSWD, BASE_GROUP, BASE_SHADOW)


def render(chart: tuple[str, Path], s: Settings, **kwargs: Any) -> list[dict[str, Any]]:
    version, path = chart
    if s.login and s.test_identity and "identity" not in kwargs:
        kwargs["identity"] = identity(s)
    values = rv.render_slurm_values(s, chart_version=version, **kwargs)
    return rc.render_chart(path, values, release="slurm", namespace=NAMESPACE)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [item for item in items if item.get("name") == name]
    assert len(found) == 1, f"{name} not found exactly once in {[i.get('name') for i in items]}"
    return found[0]


def crd(kind: str) -> dict[str, Any]:
    if not CRD_DIR.is_dir():
        pytest.skip(f"no CRD directory at {CRD_DIR}")
    path = CRD_DIR / f"slinky.slurm.net_{kind.lower()}s.yaml"
    return rcrd.load_crd(path)


# ------------------------------------------------------------------------------------------ NodeSet
def test_both_reference_chart_versions_are_present() -> None:
    if os.environ.get(rc.CHARTS_ENV):
        pytest.skip("a custom chart directory was given")
    assert {"1.2.1"} <= set(CHARTS) and len(CHARTS) >= 2, CHARTS


def test_compute_nodeset_workload(chart: tuple[str, Path]) -> None:
    s = settings_for(COMPUTE_REPLICAS="3", WORKER_CPUS="4", WORKER_MEM_MB="3072")
    nodeset = rc.one(render(chart, s), "NodeSet")
    assert nodeset["metadata"]["name"] == "slurm-worker-compute"
    assert nodeset["metadata"]["namespace"] == NAMESPACE
    spec = nodeset["spec"]
    assert spec["replicas"] == 3
    assert spec["controllerRef"]["name"] == "slurm"
    slurmd = spec["slurmd"]
    assert slurmd["image"] == s.worker_image, "the container image must be exactly WORKER_IMAGE"
    assert slurmd["image"].endswith("@sha256:f06ab7b1ce18b3d59c54c8c6f6b03698a28973d4d8fb30985bd0dfd673bd6dd9")
    assert slurmd["resources"] == {
        "limits": {"cpu": "4", "memory": "3072Mi"},
        "requests": {"cpu": "4", "memory": "3072Mi"},
    }
    # The Slurm NodeSet name the operator derives from the pod hostname prefix: the partition refers to it.
    assert pod_spec(nodeset)["hostname"] == f"{rv.COMPUTE_NODESET}-"


def test_compute_pods_carry_the_flox_runtime_and_revision(chart: tuple[str, Path]) -> None:
    s = settings_for(WORKER_FLOX_SKIP_CONTAINERS="logfile,metrics-helper", WORKER_FLOX_ACTIVATE_MODE="dev")
    revision = runtime_revision(s)
    nodeset = rc.one(render(chart, s), "NodeSet")
    template = nodeset["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["flox.dev/environment"] == "flox/echoip:2"
    assert annotations["flox.dev/activate-mode"] == "dev"
    assert annotations["flox.dev/skip-containers"] == "logfile,metrics-helper"
    assert annotations["slinky.local/runtime-revision"] == revision
    assert template["metadata"]["labels"]["slinky.local/runtime-revision-short"] == short_revision(revision)
    assert rv.worker_annotations(s, revision).items() <= annotations.items()
    assert pod_spec(nodeset)["runtimeClassName"] == "flox"


def test_explicit_revision_is_used_everywhere(chart: tuple[str, Path]) -> None:
    s = settings_for()
    revision = "sha256:" + "0123456789abcdef" * 4
    nodeset = rc.one(render(chart, s, revision=revision), "NodeSet")
    assert nodeset["spec"]["template"]["metadata"]["annotations"]["slinky.local/runtime-revision"] == revision
    init = by_name(pod_spec(nodeset)["initContainers"], rv.INIT_CONTAINER)
    assert by_name(init["env"], "SLURMFLOX_REVISION")["value"] == revision


def test_compute_pods_are_confined_to_native_worker_nodes(chart: tuple[str, Path]) -> None:
    spec = pod_spec(rc.one(render(chart, settings_for()), "NodeSet"))
    assert spec["nodeSelector"]["slinky.local/native-worker"] == "true"
    assert {"key": "slinky.local/native-worker", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in (
        spec["tolerations"]
    )


def test_profile_initializer_runs_before_slurmd_under_the_same_runtime(chart: tuple[str, Path]) -> None:
    s = settings_for(WORKER_ENV_EXPORTS="GATK_CONDAENV_PREFIX,MY_TOOL_HOME", WORKER_PATH_PRECEDENCE="append")
    objects = render(chart, s)
    nodeset = rc.one(objects, "NodeSet")
    spec = pod_spec(nodeset)
    init = by_name(spec["initContainers"], rv.INIT_CONTAINER)
    assert init["image"] == s.worker_image == nodeset["spec"]["slurmd"]["image"]
    skipped = nodeset["spec"]["template"]["metadata"]["annotations"]["flox.dev/skip-containers"].split(",")
    assert rv.INIT_CONTAINER not in skipped and "slurmd" not in skipped
    env = {item["name"]: item["value"] for item in init["env"]}
    assert env == {
        "SLURMFLOX_ENVIRONMENT": "flox/echoip:2",
        "SLURMFLOX_ACTIVATE_MODE": "run",
        "SLURMFLOX_IMAGE": s.worker_image,
        "SLURMFLOX_REVISION": runtime_revision(s),
        "SLURMFLOX_PATH_PRECEDENCE": "append",
        "SLURMFLOX_ENV_EXPORTS": "GATK_CONDAENV_PREFIX,MY_TOOL_HOME",
        "SLURMFLOX_PROFILE_DIR": "/run/flox-task-profile",
    }
    # The command runs the initializer script from the ConfigMap volume mounted into this container.
    script_path = init["command"][-1]
    mount = next(m for m in init["volumeMounts"] if script_path.startswith(m["mountPath"] + "/"))
    volume = by_name(spec["volumes"], mount["name"])
    key = by_name([{"name": i["path"], **i} for i in volume["configMap"]["items"]], script_path.rsplit("/", 1)[1])[
        "key"
    ]
    configmap = rc.one(objects, "ConfigMap", volume["configMap"]["name"])
    assert configmap["data"][key] == rv.provision_script("task-profile-init.sh")
    assert volume["configMap"]["defaultMode"] == 0o755
    assert init["command"][0] == "/bin/bash"


def test_profile_volume_is_pod_scoped_and_shared_with_slurmd(chart: tuple[str, Path]) -> None:
    nodeset = rc.one(render(chart, settings_for()), "NodeSet")
    spec = pod_spec(nodeset)
    init = by_name(spec["initContainers"], rv.INIT_CONTAINER)
    init_mount = next(m for m in init["volumeMounts"] if m["mountPath"] == "/run/flox-task-profile")
    assert not init_mount.get("readOnly"), "the initializer writes the profile"
    slurmd_mount = next(m for m in nodeset["spec"]["slurmd"]["volumeMounts"] if m["name"] == init_mount["name"])
    assert slurmd_mount["mountPath"] == "/run/flox-task-profile"
    assert by_name(spec["volumes"], init_mount["name"])["emptyDir"] == {}


def test_task_prolog_is_mounted_where_slurm_conf_points(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for())
    nodeset = rc.one(objects, "NodeSet")
    controller = rc.one(objects, "Controller")
    prolog_line = next(line for line in controller["spec"]["extraConf"].splitlines() if line.startswith("TaskProlog="))
    prolog_path = prolog_line.split("=", 1)[1]
    assert prolog_path == "/etc/slurm/flox-task-prolog/task-prolog.sh"
    mount = next(m for m in nodeset["spec"]["slurmd"]["volumeMounts"] if prolog_path.startswith(m["mountPath"] + "/"))
    volume = by_name(pod_spec(nodeset)["volumes"], mount["name"])
    relative = prolog_path[len(mount["mountPath"]) + 1 :]
    item = next(i for i in volume["configMap"]["items"] if i["path"] == relative)
    configmap = rc.one(objects, "ConfigMap", volume["configMap"]["name"])
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["data"][item["key"]] == rv.provision_script("task-prolog.sh")
    assert volume["configMap"]["defaultMode"] == 0o755, "Slurm executes the prolog"
    assert TASK_PROFILE_SCHEMA in configmap["data"][item["key"]]


def test_shared_home_is_mounted_at_the_same_path(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for(WORKER_HOME_PATH="/srv/home"))
    for kind, container in (("NodeSet", "slurmd"), ("LoginSet", "login"), ("Controller", "slurmctld")):
        obj = rc.one(objects, kind)
        mount = next(m for m in obj["spec"][container]["volumeMounts"] if m["mountPath"] == "/srv/home")
        volume = by_name(pod_spec(obj)["volumes"], mount["name"])
        assert volume["hostPath"] == {"path": "/srv/home", "type": "Directory"}, kind


def test_empty_home_path_gives_no_home_volume(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for(WORKER_HOME_PATH=""))
    for kind in ("NodeSet", "LoginSet", "Controller"):
        obj = rc.one(objects, kind)
        volumes = pod_spec(obj).get("volumes") or []
        assert not [v for v in volumes if "hostPath" in v], kind
    slurmd_mounts = rc.one(objects, "NodeSet")["spec"]["slurmd"]["volumeMounts"]
    assert sorted(m["mountPath"] for m in slurmd_mounts) == ["/etc/slurm/flox-task-prolog", "/run/flox-task-profile"]


# ------------------------------------------------------------------------------------------ controller
def test_controller_slurm_conf_lines(chart: tuple[str, Path]) -> None:
    controller = rc.one(render(chart, settings_for()), "Controller")
    lines = controller["spec"]["extraConf"].splitlines()
    assert "TaskProlog=/etc/slurm/flox-task-prolog/task-prolog.sh" in lines
    assert "LaunchParameters=enable_nss_slurm" in lines
    partition = [line for line in lines if line.startswith("PartitionName=")]
    # starts closed: only the Reconciler's verified "reopen" makes the cohort schedulable
    assert partition == ["PartitionName=all Nodes=compute Default=YES MaxTime=UNLIMITED State=DOWN"]


def test_mpi_conf_reaches_the_controller_whence_configless_slurmd_fetches_it(chart: tuple[str, Path]) -> None:
    """mpi.conf (every PMIx fence a ring, model/mpiconf.py) is a ConfigMap of the release that the Controller
    names in ``configFileRefs``: the operator mounts those into the controller's /etc/slurm."""
    objects = render(chart, settings_for())
    controller = rc.one(objects, "Controller")
    refs = [ref["name"] for ref in controller["spec"]["configFileRefs"]]
    files = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] in refs]
    assert len(files) == 1 and "PMIxCollFence=ring" in files[0]["data"]["mpi.conf"].splitlines(), (refs, files)


# ------------------------------------------------------------------------------------------ LoginSet
def test_loginset_exposes_ssh_on_the_nodeport_with_the_test_identity(chart: tuple[str, Path]) -> None:
    s = settings_for(LOGIN_NODEPORT="31022")
    objects = render(chart, s)
    loginset = rc.one(objects, "LoginSet")
    assert loginset["metadata"]["name"] == "slurm-login-login"
    assert loginset["spec"]["service"]["spec"]["type"] == "NodePort"
    assert loginset["spec"]["service"]["nodePort"] == 31022
    assert any(m["mountPath"] == "/home" for m in loginset["spec"]["login"]["volumeMounts"])
    expected = identity(s)
    mounts = {m["mountPath"]: m for m in loginset["spec"]["login"]["volumeMounts"]}
    secret = rc.one(objects, "Secret", rv.IDENTITY_SECRET)
    assert secret["metadata"]["namespace"] == NAMESPACE
    for name in ("passwd", "group", "shadow"):
        mount = mounts[f"/etc/{name}"]
        volume = by_name(pod_spec(loginset)["volumes"], mount["name"])
        item = next(i for i in volume["secret"]["items"] if i["path"] == mount["subPath"])
        assert volume["secret"]["secretName"] == rv.IDENTITY_SECRET
        assert secret["stringData"][item["key"]] == getattr(expected, name)
    assert "slurmtest:x:4001:4001:" in secret["stringData"]["passwd"]
    assert "sharedgrp:x:4002:slurmtest" in secret["stringData"]["group"]


def test_the_test_users_authorized_key_reaches_sshd_through_the_rendered_loginset(chart: tuple[str, Path]) -> None:
    """The operator installs only root's keys (slurm-operator v1.2.1 internal/builder/loginbuilder/login_config.go);
    the test user's key rides in the identity Secret, mounted read-only by subPath into a directory sshd is told
    about by the LoginSet's ``extraSshdConfig`` (login_config.go ``buildSshdConfig`` appends it verbatim)."""
    s = settings_for()
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv7nZ0nOQ0dJ0rQx1cT7c9m3v9d7eQe6e0b2Yb6Xb6X slurmflox-operator"
    objects = render(chart, s, test_ssh_authorized_keys=key)
    loginset = rc.one(objects, "LoginSet")
    rcrd.validate_object(loginset, crd("LoginSet"))
    lines = loginset["spec"]["extraSshdConfig"].splitlines()
    assert lines[0] == "AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/slurmflox_authorized_keys/%u"
    mount = next(
        m for m in loginset["spec"]["login"]["volumeMounts"] if m["mountPath"].startswith("/etc/ssh/slurmflox_")
    )
    assert mount["mountPath"] == f"/etc/ssh/slurmflox_authorized_keys/{s.test_user}" and mount["readOnly"] is True
    volume = by_name(pod_spec(loginset)["volumes"], mount["name"])
    item = next(i for i in volume["secret"]["items"] if i["path"] == mount["subPath"])
    assert item["mode"] & 0o022 == 0  # sshd StrictModes refuses group/world-writable key files
    secret = rc.one(objects, "Secret", volume["secret"]["secretName"])
    assert secret["stringData"][item["key"]] == key + "\n"
    # root keeps the operator's own mechanism
    assert "rootSshAuthorizedKeys" not in loginset["spec"]
    rendered = render(chart, s, test_ssh_authorized_keys=key, root_ssh_authorized_keys=key)
    assert rc.one(rendered, "LoginSet")["spec"]["rootSshAuthorizedKeys"].strip() == key


def test_without_a_test_identity_no_user_key_is_rendered(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for(TEST_IDENTITY="0"), test_ssh_authorized_keys="ssh-ed25519 AAAA x")
    loginset = rc.one(objects, "LoginSet")
    assert "extraSshdConfig" not in loginset["spec"]
    assert not [m for m in loginset["spec"]["login"]["volumeMounts"] if m["mountPath"].startswith("/etc/ssh/")]


def test_identity_reaches_the_login_endpoint_only(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for())
    for kind, container in (("NodeSet", "slurmd"), ("Controller", "slurmctld")):
        obj = rc.one(objects, kind)
        mounts = obj["spec"][container].get("volumeMounts") or []
        assert not [m for m in mounts if m["mountPath"].startswith("/etc/passwd")], kind
        volumes = pod_spec(obj).get("volumes") or []
        assert not [v for v in volumes if "secret" in v], kind
    init = by_name(pod_spec(rc.one(objects, "NodeSet"))["initContainers"], rv.INIT_CONTAINER)
    assert not [m for m in init["volumeMounts"] if m["mountPath"].startswith("/etc/passwd")]


def test_no_test_identity_gives_no_identity_files(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for(TEST_IDENTITY="0"))
    loginset = rc.one(objects, "LoginSet")
    paths = [m["mountPath"] for m in loginset["spec"]["login"]["volumeMounts"]]
    assert paths == ["/home"]
    assert rc.select(objects, "Secret", rv.IDENTITY_SECRET) == []


def test_no_login_gives_no_loginset(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for(LOGIN="0"))
    assert rc.select(objects, "LoginSet") == []
    assert rc.select(objects, "Secret", rv.IDENTITY_SECRET) == []
    assert rc.one(objects, "NodeSet")  # the workers do not depend on the login endpoint


# ------------------------------------------------------------------------------------------ one release
def test_every_referenced_configmap_and_secret_is_in_the_release(chart: tuple[str, Path]) -> None:
    objects = render(chart, settings_for())
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind in ("NodeSet", "LoginSet", "Controller"):
        for volume in pod_spec(rc.one(objects, kind)).get("volumes") or []:
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in names, volume
            if "secret" in volume:
                assert ("Secret", volume["secret"]["secretName"]) in names, volume


# ------------------------------------------------------------------------------------------ schemas
@pytest.mark.parametrize("env", [{}, {"WORKER_HOME_PATH": "", "TEST_IDENTITY": "0"}], ids=["default", "minimal"])
def test_custom_resources_validate_against_the_crds(chart: tuple[str, Path], env: dict[str, str]) -> None:
    objects = render(chart, settings_for(**env))
    for kind in ("NodeSet", "LoginSet", "Controller"):
        rcrd.validate_object(rc.one(objects, kind), crd(kind))


def test_crd_validation_is_not_vacuous(chart: tuple[str, Path]) -> None:
    nodeset = rc.one(render(chart, settings_for()), "NodeSet")
    broken = {**nodeset, "spec": {**nodeset["spec"], "replicas": "two"}}
    with pytest.raises(jsonschema.ValidationError):
        rcrd.validate_object(broken, crd("NodeSet"))
    missing = {**nodeset, "spec": {k: v for k, v in nodeset["spec"].items() if k != "controllerRef"}}
    with pytest.raises(jsonschema.ValidationError):
        rcrd.validate_object(missing, crd("NodeSet"))


def test_pod_specs_are_valid_kubernetes_objects(chart: tuple[str, Path]) -> None:
    """The CRDs leave the pod template open; the Kubernetes API models (extra fields forbidden) do not."""
    models = pytest.importorskip("kubernetes.client", reason="the kubernetes package is not installed")
    if not hasattr(models.V1PodSpec, "model_validate"):
        pytest.skip("this kubernetes package has no validating (pydantic) API models")
    objects = render(chart, settings_for())
    for kind, container in (("NodeSet", "slurmd"), ("LoginSet", "login"), ("Controller", "slurmctld")):
        obj = rc.one(objects, kind)
        models.V1PodSpec.model_validate({**pod_spec(obj), "containers": []})
        models.V1Container.model_validate({"name": container, **obj["spec"][container]})
    with pytest.raises(Exception, match="runtimeClasName"):
        models.V1PodSpec.model_validate({"containers": [], "runtimeClasName": "flox"})


def test_slinky_1_2_makes_only_what_the_values_declare(chart: tuple[str, Path]) -> None:
    """Slinky 1.2 removed the default NodeSet, LoginSet and partition ``all`` (slurm-operator CHANGELOG-1.2.md
    "Removed"): the chart with empty values makes none, and with ours exactly the declared ones, under the names
    every reader takes from values.py (the qemu pool, the login, the target the substrate writes)."""
    version, path = chart
    bare = rc.render_chart(path, {}, release="slurm", namespace=NAMESPACE)
    assert not [o for o in bare if o["kind"] in ("NodeSet", "LoginSet")]
    objects = render(chart, settings_for())
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "NodeSet"] == [rv.nodeset_name("slurm")]
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "LoginSet"] == [rv.loginset_name("slurm")]
    from pytest_slurmflox.substrates.qemu.login import LOGINSET_NAME
    from pytest_slurmflox.substrates.qemu.pool import NODESET_NAME

    assert (rv.nodeset_name("slurm"), rv.loginset_name("slurm")) == (NODESET_NAME, LOGINSET_NAME)
    plain = settings_for(TEST_IDENTITY="0")
    assert rv.render_slurm_values(plain, chart_version=version)["partitions"][rv.PARTITION]["enabled"]
