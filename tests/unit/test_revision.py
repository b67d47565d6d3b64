"""The runtime revision: canonical, stable, and sensitive to exactly the eleven runtime settings."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from pytest_slurmflox.model.revision import RuntimeSpec, runtime_revision, short_revision
from pytest_slurmflox.model.settings import resolve

CHANGES = {
    "image": "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04@sha256:" + "0" * 64,
    "flox_env": "myorg/hpc",
    "flox_generation": 18,
    "activate_mode": "dev",
    "skip_containers": ("logfile", "metrics"),
    "task_profile_schema": "slurmflox-task-profile/2",
    "env_exports": ("GATK_CONDAENV_PREFIX",),
    "path_precedence": "append",
    "cpus": 4,
    "mem_mb": 4096,
    "home_path": "",
}


def test_eleven_runtime_settings_give_eleven_distinct_revisions():
    base = RuntimeSpec.from_settings(resolve().settings)
    assert {f.name for f in dataclasses.fields(RuntimeSpec)} == set(CHANGES)
    revisions = {base.revision}
    for name, value in CHANGES.items():
        changed = dataclasses.replace(base, **{name: value})
        revisions.add(changed.revision)
    assert len(revisions) == 12


def test_each_worker_setting_moves_the_revision_through_settings():
    env = {
        "WORKER_IMAGE": CHANGES["image"],
        "WORKER_FLOX_ENV": "myorg/hpc",
        "WORKER_FLOX_GENERATION": "18",
        "WORKER_FLOX_ACTIVATE_MODE": "dev",
        "WORKER_FLOX_SKIP_CONTAINERS": "logfile,metrics",
        "WORKER_ENV_EXPORTS": "GATK_CONDAENV_PREFIX",
        "WORKER_PATH_PRECEDENCE": "append",
        "WORKER_CPUS": "4",
        "WORKER_MEM_MB": "4096",
        "WORKER_HOME_PATH": "",
    }
    base = runtime_revision(resolve().settings)
    seen = {base}
    for key, value in env.items():
        seen.add(runtime_revision(resolve(env={f"SLURMFLOX_{key}": value}).settings))
    assert len(seen) == 1 + len(env)


def test_compute_replicas_and_substrate_keys_do_not_move_the_revision():
    base = runtime_revision(resolve().settings)
    for key, value in (("COMPUTE_REPLICAS", "5"), ("NODES", "5"), ("LOGIN_SSH_PORT", "2300"), ("TEST_USER", "bob")):
        assert runtime_revision(resolve(cli={key: value}).settings) == base


def test_set_like_lists_are_order_insensitive():
    a = resolve(cli={"WORKER_ENV_EXPORTS": "A,B", "WORKER_FLOX_SKIP_CONTAINERS": "x,logfile"}).settings
    b = resolve(cli={"WORKER_ENV_EXPORTS": "B, A", "WORKER_FLOX_SKIP_CONTAINERS": "logfile x"}).settings
    assert runtime_revision(a) == runtime_revision(b)


def test_revision_is_stable_across_processes_and_pinned():
    code = (
        "from pytest_slurmflox.model.revision import runtime_revision;from pytest_slurmflox.model.settings import "
        "resolve;"
        "print(runtime_revision(resolve().settings))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": "/usr/bin:/bin"},
        ).stdout.strip()
        for seed in (0, 1, 12345)
    }
    assert outs == {runtime_revision(resolve().settings)}
    # The canonical document is plain sorted JSON: pin its exact form so a change is deliberate.
    doc = json.loads(RuntimeSpec.from_settings(resolve().settings).canonical())
    assert list(doc) == sorted(doc)
    assert doc["flox_generation"] == 2 and doc["format"] == 1


def test_short_revision_is_label_safe():
    short = short_revision(runtime_revision(resolve().settings))
    assert ":" not in short and len(short) <= 63 and short.startswith("sha256-")
