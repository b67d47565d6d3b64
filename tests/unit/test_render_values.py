"""Pure checks of the values renderer: refusals happen before anything renders, and identity building.

Where each value lands in Kubernetes objects is proven in test_render_chart.py through the real chart.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from pytest_slurmflox.model.revision import runtime_revision
from pytest_slurmflox.model.settings import Settings, SettingsError, resolve
from pytest_slurmflox.substrates.qemu.render import chart as rc
from pytest_slurmflox.substrates.qemu.render import values as rv

BASE_PASSWD = "root:x:0:0:root:/root:/bin/bash\n"
BASE_GROUP = "root:x:0:\n"
BASE_SHADOW = "root:*:20000:0:99999:7:::\n"


def settings_for(**keys: str) -> Settings:
    return resolve(cli=keys).settings


def no_identity(**env: str) -> Settings:
    return settings_for(TEST_IDENTITY="0", **env)


@pytest.mark.parametrize("protected", ["slurmd", "flox-task-profile-init"])
def test_protected_container_in_skip_list_is_refused_by_settings(protected: str) -> None:
    with pytest.raises(SettingsError, match="WORKER_FLOX_SKIP_CONTAINERS"):
        settings_for(WORKER_FLOX_SKIP_CONTAINERS=f"logfile,{protected}")


@pytest.mark.parametrize("protected", ["slurmd", "flox-task-profile-init"])
def test_protected_container_in_skip_list_is_refused_before_rendering(protected: str) -> None:
    """Settings assembled without the parser (dataclasses.replace) are still refused by the renderer."""
    bad = dataclasses.replace(no_identity(), worker_flox_skip_containers=("logfile", protected))
    with pytest.raises(SettingsError) as caught:
        rv.render_slurm_values(bad)
    assert caught.value.key == "WORKER_FLOX_SKIP_CONTAINERS"
    assert protected in str(caught.value)


def test_revision_defaults_to_the_settings_runtime_revision() -> None:
    s = no_identity()
    values = rv.render_slurm_values(s)
    meta = values["nodesets"][rv.COMPUTE_NODESET]["metadata"]
    assert meta["annotations"][rv.ANNOTATION_REVISION] == runtime_revision(s)


@pytest.mark.parametrize("revision", ["sha256:abc", "sha1:" + "a" * 64, "sha256:" + "A" * 64, ""])
def test_malformed_revision_is_refused(revision: str) -> None:
    with pytest.raises(ValueError, match="revision"):
        rv.render_slurm_values(no_identity(), revision=revision)


@pytest.mark.parametrize("version", ["1.2.1", "1.2.2", "1.3.0-rc1"])
def test_chart_1x_versions_are_accepted(version: str) -> None:
    assert rv.render_slurm_values(no_identity(), chart_version=version)["nodesets"]


@pytest.mark.parametrize("version", ["0.4.0", "2.0.0", "latest", ""])
def test_other_chart_versions_are_refused(version: str) -> None:
    with pytest.raises(ValueError, match="chart_version"):
        rv.render_slurm_values(no_identity(), chart_version=version)


def test_test_identity_requires_the_login_image_files() -> None:
    with pytest.raises(ValueError, match="TEST_IDENTITY=1"):
        rv.render_slurm_values(settings_for())
    # Without a login endpoint there is nowhere to mount them, so none are needed.
    assert rv.render_slurm_values(settings_for(LOGIN="0"))["loginsets"] == {}


def test_values_are_plain_json_data() -> None:
    """Helm receives the values as JSON; a tuple or a Path sneaking in would change their meaning."""
    s = settings_for()
    values = rv.render_slurm_values(s, identity=rv.test_identity_files(s, BASE_PASSWD, BASE_GROUP, BASE_SHADOW))
    assert json.loads(json.dumps(values)) == values


def test_identity_files_append_the_test_user_and_group() -> None:
    s = settings_for(TEST_USER="alice", TEST_UID="5001", TEST_GID="5001", TEST_SUPP_GROUP="lab", TEST_SUPP_GID="5002")
    files = rv.test_identity_files(s, BASE_PASSWD, BASE_GROUP, BASE_SHADOW)
    assert files.passwd.splitlines() == [
        "root:x:0:0:root:/root:/bin/bash",
        "alice:x:5001:5001:slurmflox acceptance user:/home/alice:/bin/bash",
    ]
    assert files.group.splitlines() == ["root:x:0:", "alice:x:5001:", "lab:x:5002:alice"]
    assert files.shadow.splitlines()[-1].startswith("alice:*:"), "no password: key-based login only"
    assert files.passwd.endswith("\n") and files.group.endswith("\n") and files.shadow.endswith("\n")


def test_identity_files_are_idempotent_and_refuse_clashes() -> None:
    s = settings_for()
    once = rv.test_identity_files(s, BASE_PASSWD, BASE_GROUP, BASE_SHADOW)
    assert rv.test_identity_files(s, once.passwd, once.group, once.shadow) == once
    with pytest.raises(ValueError, match="clashes"):
        rv.test_identity_files(s, BASE_PASSWD + "other:x:4001:4001::/home/other:/bin/sh\n", BASE_GROUP, BASE_SHADOW)
    with pytest.raises(ValueError, match="clashes"):
        rv.test_identity_files(s, BASE_PASSWD, BASE_GROUP + "sharedgrp:x:999:\n", BASE_SHADOW)


def test_identity_home_follows_the_shared_home() -> None:
    files = rv.test_identity_files(settings_for(WORKER_HOME_PATH="/srv/home"), BASE_PASSWD, BASE_GROUP, BASE_SHADOW)
    assert ":/srv/home/slurmtest:" in files.passwd


def test_template_syntax_in_identity_is_refused() -> None:
    s = settings_for()
    files = rv.test_identity_files(s, BASE_PASSWD + "x:x:7:7:{{ .Values }}:/x:/bin/sh\n", BASE_GROUP, BASE_SHADOW)
    with pytest.raises(ValueError, match="template"):
        rv.render_slurm_values(s, identity=files)


def test_helpers_describe_the_worker_contract() -> None:
    s = no_identity(WORKER_ENV_EXPORTS="A,B", WORKER_FLOX_SKIP_CONTAINERS="")
    revision = runtime_revision(s)
    assert rv.worker_annotations(s, revision)[rv.ANNOTATION_SKIP_CONTAINERS] == ""
    assert rv.profile_init_env(s, revision)["SLURMFLOX_ENV_EXPORTS"] == "A,B"
    assert rv.worker_labels(revision)[rv.LABEL_REVISION_SHORT] == "sha256-" + revision[7:39]
    assert rv.worker_resources(s) == {
        "limits": {"cpu": "6", "memory": "6144Mi"},
        "requests": {"cpu": "6", "memory": "6144Mi"},
    }
    assert rv.provision_script("task-prolog.sh").startswith("#!/bin/bash\n")


def test_chart_helper_refuses_a_directory_without_a_chart(tmp_path: Path) -> None:
    with pytest.raises(rc.ChartUnavailable, match=r"Chart\.yaml"):
        rc.render_chart(tmp_path, {})
    assert rc.find_slurm_charts(tmp_path / "absent") == {}


def test_chart_helper_names_the_missing_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """helm-python-sdk is imported lazily; without it the error says what to install."""
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.0\n")
    monkeypatch.setitem(sys.modules, "helm_python", None)  # makes `import helm_python` fail
    with pytest.raises(rc.ChartUnavailable, match="helm-python-sdk"):
        rc.render_chart(tmp_path, {})
