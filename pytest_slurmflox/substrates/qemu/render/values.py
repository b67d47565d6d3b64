"""Values for the Slinky ``slurm`` Helm chart, rendered purely from Settings.

Why a renderer of our own: the chart has no notion of a Flox runtime, a task profile or a TaskProlog. Everything
the worker contract needs is expressed through the chart's generic extension points, so ONE Helm release holds
the whole worker cohort and nothing is patched in afterwards:

* ``nodesets.compute``  -> NodeSet ``<release>-worker-compute`` (Slurm NodeSet ``compute``, pods ``compute-N``)
    - ``slurmd``: container fields (image string, resources, volumeMounts) the operator merges into slurmd;
    - ``metadata``: the chart puts it on the NodeSet AND its pod template, so the Flox annotations and the
      runtime revision reach every worker pod (where the Flox shim and our suites read them);
    - ``podSpec``: runtimeClassName, nodeSelector, tolerations, the ``flox-task-profile-init`` init container
      and the volumes (profile emptyDir, script ConfigMaps, hostPath home), merged by the operator into the pod.
* ``controller.extraConf`` -> slurm.conf lines (TaskProlog, LaunchParameters); ``partitions.all`` -> the
  ``PartitionName=all Nodes=compute ...`` line the chart appends to the same extraConf.
* ``loginsets.login`` -> LoginSet ``<release>-login-login`` with a NodePort service, the shared home and, with
  TEST_IDENTITY=1, the acceptance identity mounted over /etc/passwd, /etc/group and /etc/shadow.
* ``extraObjects`` -> the ConfigMaps with our two provision scripts (and the identity Secret). The chart passes
  extraObjects through ``tpl``, which we use only to stamp the release namespace on them.

The image is given to the chart as one string: the chart's image helper renders ``repository@digest`` when a
digest is split out (dropping the tag), but passes a string through unchanged, so the container image is exactly
WORKER_IMAGE (``repository:tag@sha256:...``) in both chart versions.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from ....model.labels import (
    ANNOTATION_ACTIVATE_MODE,
    ANNOTATION_ENVIRONMENT,
    ANNOTATION_REVISION,
    ANNOTATION_SKIP_CONTAINERS,
    LABEL_NATIVE_WORKER,
    LABEL_REVISION_SHORT,
)
from ....model.mpiconf import mpi_conf
from ....model.revision import runtime_revision, short_revision
from ....model.settings import PROTECTED_CONTAINERS, Settings, SettingsError
from .identity import IdentityFiles, test_identity_files  # noqa: F401  (test_identity_files: re-exported)

# ------------------------------------------------------------------------------------------ fixed names
#: What these values declare, by name. Slinky 1.2 removed the chart's default NodeSet, LoginSet and partition
#: ``all`` (slurm-operator CHANGELOG/CHANGELOG-1.2.md "Removed"; helm/slurm/values.yaml v1.2.1: ``nodesets: {}``,
#: ``loginsets: {}``, ``partitions.all.enabled: false``): nothing exists unless the values name it, so every place
#: that needs one of these names reads it from here (:func:`nodeset_name`, :func:`loginset_name`, :data:`PARTITION`).
COMPUTE_NODESET = "compute"
LOGINSET = "login"
PARTITION = "all"


def nodeset_name(release: str) -> str:
    """The NodeSet the chart makes of ``nodesets.compute``: ``<release>-worker-compute`` (helm/slurm
    templates/nodeset/_helpers.tpl ``slurm.worker.name`` = ``<fullname>-worker``, nodeset-cr.yaml appends the key)."""
    return f"{release}-worker-{COMPUTE_NODESET}"


def loginset_name(release: str) -> str:
    """The LoginSet the chart makes of ``loginsets.login``: ``<release>-login-login`` (templates/loginset/
    _helpers.tpl ``slurm.login.name`` = ``<fullname>-login``, loginset-cr.yaml appends the key)."""
    return f"{release}-login-{LOGINSET}"


INIT_CONTAINER = "flox-task-profile-init"
SLURMD_CONTAINER = "slurmd"

PROFILE_DIR = "/run/flox-task-profile"
TASK_PROLOG_DIR = "/etc/slurm/flox-task-prolog"
TASK_PROLOG_FILE = "task-prolog.sh"
TASK_PROLOG_PATH = f"{TASK_PROLOG_DIR}/{TASK_PROLOG_FILE}"
PROFILE_INIT_DIR = "/etc/slurmflox/task-profile-init"
PROFILE_INIT_FILE = "task-profile-init.sh"
PROFILE_INIT_PATH = f"{PROFILE_INIT_DIR}/{PROFILE_INIT_FILE}"

TASK_PROLOG_CONFIGMAP = "slurmflox-task-prolog"
PROFILE_INIT_CONFIGMAP = "slurmflox-task-profile-init"
IDENTITY_SECRET = "slurmflox-test-identity"

VOLUME_PROFILE = "flox-task-profile"
VOLUME_PROLOG = "flox-task-prolog"
VOLUME_PROFILE_INIT = "flox-task-profile-init"
VOLUME_HOME = "shared-home"
VOLUME_IDENTITY = "test-identity"

#: The test user's authorized keys on the login pod. The operator installs only root's keys (slurm-operator
#: v1.2.1 internal/builder/loginbuilder/login_config.go ``buildAuthorizedKeys(spec.RootSshAuthorizedKeys)``, mounted
#: at /root/.ssh/authorized_keys by login_app.go), and the test user's home is the shared /home (not the image),
#: so the key comes from the identity Secret, mounted read-only with subPath (the pattern login_app.go uses for
#: root's file: owned by root, so sshd's StrictModes accepts it), and sshd is told to look there through the
#: chart's ``loginsets.<key>.extraSshdConfig`` (helm/slurm/templates/loginset/loginset-cr.yaml), which
#: login_config.go ``buildSshdConfig`` appends to the sshd_config it generates (that file sets no
#: AuthorizedKeysFile, so ours is the first and only one; ``.ssh/authorized_keys`` keeps root's working).
AUTHORIZED_KEYS_DIR = "/etc/ssh/slurmflox_authorized_keys"
AUTHORIZED_KEYS_ITEM = "authorized_keys"
SSHD_AUTHORIZED_KEYS = f"AuthorizedKeysFile .ssh/authorized_keys {AUTHORIZED_KEYS_DIR}/%u"

RUNTIME_CLASS = "flox"

CONTROLLER_EXTRA_CONF = (f"TaskProlog={TASK_PROLOG_PATH}", "LaunchParameters=enable_nss_slurm")

_REVISION = re.compile(r"sha256:[0-9a-f]{64}\Z")
_CHART_VERSION = re.compile(r"1\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?\Z")


# ------------------------------------------------------------------------------------------ helpers
def provision_script(name: str) -> str:
    """Text of one of our provision scripts, read from the installed package (wheel or checkout)."""
    return (resources.files("pytest_slurmflox.provision") / name).read_text(encoding="utf-8")


def check_runtime_containers(settings: Settings) -> None:
    """Refuse a skip-container list that would take slurmd or the profile initializer off the Flox runtime.

    Settings parsing already refuses it; this guards Settings built any other way, before anything renders.
    """
    for name in settings.worker_flox_skip_containers:
        if name in PROTECTED_CONTAINERS:
            raise SettingsError(
                "WORKER_FLOX_SKIP_CONTAINERS",
                ",".join(settings.worker_flox_skip_containers),
                f"{name!r} defines the worker runtime and may never skip Flox preparation",
            )


def worker_annotations(settings: Settings, revision: str) -> dict[str, str]:
    """Annotations every worker pod must carry (compare with a rendered or live pod's metadata)."""
    return {
        ANNOTATION_ENVIRONMENT: settings.worker_flox_ref,
        ANNOTATION_ACTIVATE_MODE: settings.worker_flox_activate_mode,
        ANNOTATION_SKIP_CONTAINERS: ",".join(settings.worker_flox_skip_containers),
        ANNOTATION_REVISION: revision,
    }


def worker_labels(revision: str) -> dict[str, str]:
    """Labels every worker pod must carry (label values cannot hold the full ``sha256:`` revision)."""
    return {LABEL_REVISION_SHORT: short_revision(revision)}


def profile_init_env(settings: Settings, revision: str) -> dict[str, str]:
    """The initializer's SLURMFLOX_* inputs (FLOX_ENV and PATH come from the Flox activation itself).

    The local substrate passes the same mapping to the same script, so both substrates agree on the contract.
    """
    return {
        "SLURMFLOX_ENVIRONMENT": settings.worker_flox_ref,
        "SLURMFLOX_ACTIVATE_MODE": settings.worker_flox_activate_mode,
        "SLURMFLOX_IMAGE": settings.worker_image,
        "SLURMFLOX_REVISION": revision,
        "SLURMFLOX_PATH_PRECEDENCE": settings.worker_path_precedence,
        "SLURMFLOX_ENV_EXPORTS": ",".join(settings.worker_env_exports),
        "SLURMFLOX_PROFILE_DIR": PROFILE_DIR,
    }


def worker_resources(settings: Settings) -> dict[str, dict[str, str]]:
    """Requests equal to limits: the operator turns slurmd's limits into the CPUs/RealMemory Slurm sees."""
    amount = {"cpu": str(settings.worker_cpus), "memory": f"{settings.worker_mem_mb}Mi"}
    return {"limits": dict(amount), "requests": dict(amount)}


def _tpl_safe(text: str, what: str) -> str:
    # extraObjects pass through Helm's `tpl`: a literal "{{" would be executed as a template action.
    if "{{" in text:
        raise ValueError(f"{what} contains '{{{{', which the chart's extraObjects would treat as a template")
    return text


def _namespaced(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": '{{ include "slurm.namespace" $ }}',
        "labels": {"app.kubernetes.io/part-of": "slurm", "app.kubernetes.io/component": "slurmflox"},
    }


def _home_volume(path: str) -> dict[str, Any]:
    # type Directory: a missing shared home must stop the pod, not be replaced by an empty local directory.
    return {"name": VOLUME_HOME, "hostPath": {"path": path, "type": "Directory"}}


# ------------------------------------------------------------------------------------------ sections
def _compute_nodeset(settings: Settings, revision: str) -> dict[str, Any]:
    home = settings.worker_home_path
    slurmd_mounts: list[dict[str, Any]] = [
        {"name": VOLUME_PROFILE, "mountPath": PROFILE_DIR, "readOnly": True},
        {"name": VOLUME_PROLOG, "mountPath": TASK_PROLOG_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": VOLUME_PROFILE, "emptyDir": {}},
        {
            "name": VOLUME_PROLOG,
            "configMap": {
                "name": TASK_PROLOG_CONFIGMAP,
                "defaultMode": 0o755,
                "items": [{"key": TASK_PROLOG_FILE, "path": TASK_PROLOG_FILE}],
            },
        },
        {
            "name": VOLUME_PROFILE_INIT,
            "configMap": {
                "name": PROFILE_INIT_CONFIGMAP,
                "defaultMode": 0o755,
                "items": [{"key": PROFILE_INIT_FILE, "path": PROFILE_INIT_FILE}],
            },
        },
    ]
    if home:
        slurmd_mounts.append({"name": VOLUME_HOME, "mountPath": home})
        volumes.append(_home_volume(home))
    init_container = {
        "name": INIT_CONTAINER,
        # Same image and (through the pod's runtimeClass and the skip list) the same pinned Flox runtime.
        "image": settings.worker_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/bash", PROFILE_INIT_PATH],
        "env": [{"name": k, "value": v} for k, v in profile_init_env(settings, revision).items()],
        "volumeMounts": [
            {"name": VOLUME_PROFILE, "mountPath": PROFILE_DIR},
            {"name": VOLUME_PROFILE_INIT, "mountPath": PROFILE_INIT_DIR, "readOnly": True},
        ],
    }
    return {
        "enabled": True,
        "replicas": settings.compute_replicas,
        "slurmd": {
            "image": settings.worker_image,
            "resources": worker_resources(settings),
            "volumeMounts": slurmd_mounts,
        },
        "metadata": {
            "annotations": worker_annotations(settings, revision),
            "labels": worker_labels(revision),
        },
        "podSpec": {
            "runtimeClassName": RUNTIME_CLASS,
            "nodeSelector": {"kubernetes.io/os": "linux", LABEL_NATIVE_WORKER: "true"},
            "tolerations": [{"key": LABEL_NATIVE_WORKER, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "initContainers": [init_container],
            "volumes": volumes,
        },
    }


def _controller(settings: Settings) -> dict[str, Any]:
    controller: dict[str, Any] = {"extraConf": "\n".join(CONTROLLER_EXTRA_CONF)}
    if settings.worker_home_path:
        controller["slurmctld"] = {"volumeMounts": [{"name": VOLUME_HOME, "mountPath": settings.worker_home_path}]}
        controller["podSpec"] = {"volumes": [_home_volume(settings.worker_home_path)]}
    return controller


def _loginset(
    settings: Settings,
    identity: IdentityFiles | None,
    root_ssh_authorized_keys: str | None,
    test_ssh_authorized_keys: str | None,
) -> dict[str, Any]:
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if settings.worker_home_path:
        mounts.append({"name": VOLUME_HOME, "mountPath": settings.worker_home_path})
        volumes.append(_home_volume(settings.worker_home_path))
    if settings.test_identity:
        assert identity is not None
        for name in ("passwd", "group", "shadow"):
            mounts.append({"name": VOLUME_IDENTITY, "mountPath": f"/etc/{name}", "subPath": name, "readOnly": True})
        items = [
            {"key": "passwd", "path": "passwd", "mode": 0o644},
            {"key": "group", "path": "group", "mode": 0o644},
            {"key": "shadow", "path": "shadow", "mode": 0o640},
        ]
        if test_ssh_authorized_keys:
            items.append({"key": AUTHORIZED_KEYS_ITEM, "path": AUTHORIZED_KEYS_ITEM, "mode": 0o644})
            mounts.append(
                {
                    "name": VOLUME_IDENTITY,
                    "mountPath": f"{AUTHORIZED_KEYS_DIR}/{settings.test_user}",
                    "subPath": AUTHORIZED_KEYS_ITEM,
                    "readOnly": True,
                }
            )
        volumes.append({"name": VOLUME_IDENTITY, "secret": {"secretName": IDENTITY_SECRET, "items": items}})
    loginset: dict[str, Any] = {
        "enabled": True,
        "replicas": 1,
        "login": {"volumeMounts": mounts},
        "podSpec": {"volumes": volumes},
        "service": {"spec": {"type": "NodePort"}, "nodePort": settings.login_nodeport},
    }
    if root_ssh_authorized_keys:
        loginset["rootSshAuthorizedKeys"] = root_ssh_authorized_keys
    if settings.test_identity and test_ssh_authorized_keys:
        loginset["extraSshdConfig"] = SSHD_AUTHORIZED_KEYS
    return loginset


def _extra_objects(
    settings: Settings, identity: IdentityFiles | None, test_ssh_authorized_keys: str | None
) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _namespaced(TASK_PROLOG_CONFIGMAP),
            "data": {TASK_PROLOG_FILE: _tpl_safe(provision_script(TASK_PROLOG_FILE), TASK_PROLOG_FILE)},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _namespaced(PROFILE_INIT_CONFIGMAP),
            "data": {PROFILE_INIT_FILE: _tpl_safe(provision_script(PROFILE_INIT_FILE), PROFILE_INIT_FILE)},
        },
    ]
    if settings.login and settings.test_identity:
        assert identity is not None
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _namespaced(IDENTITY_SECRET),
                "type": "Opaque",
                "stringData": {
                    "passwd": _tpl_safe(identity.passwd, "passwd"),
                    "group": _tpl_safe(identity.group, "group"),
                    "shadow": _tpl_safe(identity.shadow, "shadow"),
                    **(
                        {AUTHORIZED_KEYS_ITEM: _tpl_safe(test_ssh_authorized_keys.strip() + "\n", "authorized keys")}
                        if test_ssh_authorized_keys
                        else {}
                    ),
                },
            }
        )
    return objects


# ------------------------------------------------------------------------------------------ entry point
def render_slurm_values(
    settings: Settings,
    *,
    revision: str | None = None,
    chart_version: str = "1.2.1",
    identity: IdentityFiles | None = None,
    root_ssh_authorized_keys: str | None = None,
    test_ssh_authorized_keys: str | None = None,
) -> dict[str, Any]:
    """Values for one Helm release of the Slinky ``slurm`` chart (1.x) that deploys the whole worker contract.

    ``revision`` defaults to the runtime revision of ``settings``; a substrate that runs another image passes
    the revision it computed for it. ``identity`` is required when LOGIN=1 and TEST_IDENTITY=1 (build it with
    :func:`test_identity_files` from the login image's own files); ``test_ssh_authorized_keys`` lets the test user
    log in with that key (only with TEST_IDENTITY=1: there is no such user otherwise). The same layout serves
    slurm chart 1.2.x and 1.3.x: the keys used here did not change between them; other majors are refused.
    Raises SettingsError/ValueError before producing anything.
    """
    check_runtime_containers(settings)
    if not _CHART_VERSION.match(chart_version):
        raise ValueError(f"chart_version={chart_version!r}: these values are written for the slurm chart 1.x")
    revision = runtime_revision(settings) if revision is None else revision
    if not _REVISION.match(revision):
        raise ValueError(f"revision={revision!r} is not sha256:<64 hex digits>")
    if settings.login and settings.test_identity and identity is None:
        raise ValueError(
            "TEST_IDENTITY=1 needs the login image's passwd/group/shadow: pass identity=test_identity_files(...)"
            " (or set TEST_IDENTITY=0)"
        )
    values: dict[str, Any] = {
        "nodesets": {COMPUTE_NODESET: _compute_nodeset(settings, revision)},
        "controller": _controller(settings),
        "partitions": {
            PARTITION: {
                "enabled": True,
                "nodesets": [COMPUTE_NODESET],
                # State=DOWN: a slurmctld that starts from this configuration admits nothing until the Reconciler
                # has verified the cohort and reopened the partition (lifecycle "reopen"); a first deployment is
                # therefore a recovery cycle, never the fast path (REFERENCE-DESIGN "Failed and interrupted updates").
                "configMap": {"Default": "YES", "MaxTime": "UNLIMITED", "State": "DOWN"},
            }
        },
        "loginsets": (
            {LOGINSET: _loginset(settings, identity, root_ssh_authorized_keys, test_ssh_authorized_keys)}
            if settings.login
            else {}
        ),
        "extraObjects": _extra_objects(settings, identity, test_ssh_authorized_keys),
        # mounted into the controller's /etc/slurm, served to configless slurmd (model/mpiconf.py)
        "configFiles": {"mpi.conf": mpi_conf("reference stack")},
    }
    return values
