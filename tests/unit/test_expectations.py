"""expectations.py and the local runtime provider's record: the independent references the suites judge by.

The record is made by really realizing and activating the shipped definitions; the digest a worker recomputes is
the real shell listing (runtime.DIGEST_SH) run here on the realized entry; the task-environment judgement is fed
environments shaped like the ones measured on the local substrate (srun/sbatch, every export mode).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_slurmflox.judges.expectations import (
    SYSTEM_DEFAULT_PATH,
    Runtime,
    expected_exports,
    expected_revision,
    expected_task_path,
    parse_environ,
    passes_through,
    slurm_sets,
    task_env_problems,
)
from pytest_slurmflox.model.revision import runtime_revision
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.substrates.local import runtime

MOUNT = "/flox/store"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store")


def _shell_digest(path: Path) -> str:
    proc = subprocess.run(["bash", "-c", runtime.DIGEST_SH, "digest", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------------------------------------ provider record
def test_worker_side_digest_equals_the_providers_record(store):
    realized = runtime.realize("local/gatk:1", store)
    assert realized.record is not None
    assert realized.record.content_digest == runtime.content_digest(realized.path) == _shell_digest(realized.path)
    assert realized.record.content_digest == "sha256:" + realized.content_hash


def test_generations_are_distinguishable_by_content(store):
    one = runtime.realize("local/demo:1", store).record
    two = runtime.realize("local/demo:2", store).record
    assert one is not None and two is not None
    assert one.content_digest != two.content_digest
    assert one.activations["run"].exports["SLURMFLOX_DEMO_GENERATION"] == "1"
    assert two.activations["run"].exports["SLURMFLOX_DEMO_GENERATION"] == "2"


def test_replaced_content_changes_the_digest(store, tmp_path):
    realized = runtime.realize("local/demo:1", store)
    copy = tmp_path / "copy"
    shutil.copytree(realized.path, copy, symlinks=True)
    assert _shell_digest(copy) == realized.record.content_digest  # the marker file is not content
    (copy / "bin" / "flox-probe").chmod(0o755)
    (copy / "bin" / "flox-probe").write_text("#!/bin/sh\necho lookalike\n")
    assert _shell_digest(copy) != realized.record.content_digest
    assert _shell_digest(tmp_path / "absent") == "MISSING"


def test_executable_bit_is_content(tmp_path):
    root = tmp_path / "env"
    (root / "bin").mkdir(parents=True)
    tool = root / "bin" / "t"
    tool.write_text("x")
    tool.chmod(0o644)
    before = _shell_digest(root)
    assert before == runtime.content_digest(root)
    tool.chmod(0o755)
    assert _shell_digest(root) == runtime.content_digest(root) != before


def test_record_holds_path_order_executables_and_exports(store):
    rec = runtime.realize("local/gatk:1", store).record
    run = rec.activations["run"]
    assert run.ok
    assert run.path == ("opt/conda/envs/gatk/bin", "bin")
    assert run.bin_entries == {"opt/conda/envs/gatk/bin": ("gatk",), "bin": ("flox-probe",)}
    assert run.exports["GATK_CONDAENV_PREFIX"] == "${FLOX_ENV}/opt/conda/envs/gatk"
    assert run.exports["FLOX_ENV"] == "${FLOX_ENV}" and run.exports["FLOX_ACTIVATE_MODE"] == "run"
    assert rec.activations["dev"].exports["FLOX_ACTIVATE_MODE"] == "dev"


def test_record_is_kept_outside_every_entry_and_read_back(store):
    realized = runtime.realize("local/demo:1", store)
    path = runtime.record_file(store, realized.store_name)
    assert path.is_file() and realized.path not in path.parents
    assert runtime.read_record(store, realized.store_name) == realized.record
    assert runtime.read_record(store, "no-such-entry") is None


def test_failing_activation_is_recorded_as_failed(store):
    rec = runtime.realize("local/failhook:1", store).record
    assert rec.activations["run"].status.startswith("failed: ") and not rec.activations["run"].ok
    assert rec.activations["run"].exports == {}


# ------------------------------------------------------------------------------------------------ expectations
@pytest.fixture(scope="module")
def gatk(store) -> Runtime:
    rec = runtime.realize("local/gatk:1", store).record
    return Runtime.from_record(rec.as_dict(), rec.realized_path(MOUNT), "run")


def test_runtime_resolves_the_record_at_the_workers_path(gatk):
    root = gatk.realized_path
    assert root.startswith(MOUNT + "/") and root.endswith("-gatk-1")
    assert gatk.path == (f"{root}/opt/conda/envs/gatk/bin", f"{root}/bin")
    assert gatk.exports["GATK_CONDAENV_PREFIX"] == f"{root}/opt/conda/envs/gatk"
    assert gatk.bin_entries[f"{root}/bin"] == ("flox-probe",)


def test_expected_exports_are_exactly_the_allow_listed_ones_the_environment_defines(gatk):
    assert expected_exports(("GATK_CONDAENV_PREFIX", "NOT_DEFINED"), gatk) == {
        "GATK_CONDAENV_PREFIX": gatk.exports["GATK_CONDAENV_PREFIX"]
    }
    assert expected_exports((), gatk) == {}


@pytest.mark.parametrize(
    ("precedence", "task", "want"),
    [
        ("prepend", "/usr/bin:/bin", "/e/a:/e/bin:/usr/bin:/bin"),
        ("append", "/usr/bin:/bin", "/usr/bin:/bin:/e/a:/e/bin"),
        ("prepend", None, f"/e/a:/e/bin:{SYSTEM_DEFAULT_PATH}"),
        ("append", None, f"/e/a:/e/bin:{SYSTEM_DEFAULT_PATH}"),
        ("append", "", f"/e/a:/e/bin:{SYSTEM_DEFAULT_PATH}"),
    ],
)
def test_expected_task_path(precedence, task, want):
    assert expected_task_path(precedence, ("/e/a", "/e/bin"), task) == want


def test_export_semantics():
    assert passes_through("default", "X") and passes_through("ALL", "X")
    assert not passes_through("NONE", "X") and not passes_through("NIL", "X")
    assert passes_through("VARLIST", "X", ("X",)) and not passes_through("VARLIST", "Y", ("X",))


def test_slurm_set_list():
    for name in ("SLURM_JOB_ID", "SLURMD_NODENAME", "TMPDIR", "ENVIRONMENT", "PMIX_RANK", "HYDRA_BOOTSTRAP"):
        assert slurm_sets(name), name
    for name in ("LD_LIBRARY_PATH", "FLOXHUB_TOKEN", "FLOX_ENV", "KUBERNETES_SERVICE_HOST", "SLURMFLOX_X"):
        assert not slurm_sets(name), name


SUBMIT = {"HOME": "/home/u", "USER": "u", "PATH": "/usr/bin:/bin", "SFX": "from-login", "_": "/usr/bin/env"}
ALLOW = ("GATK_CONDAENV_PREFIX",)


def _task(gatk: Runtime, mode: str, **changes: str | None) -> dict[str, str]:
    """The environment a correct worker gives a task under ``mode`` (as measured), with ``changes`` applied."""
    base = {k: v for k, v in SUBMIT.items() if passes_through(mode, k, ("SFX",)) and k not in ("PATH", "_")}
    passed = SUBMIT["PATH"] if passes_through(mode, "PATH", ("SFX",)) else None
    env = {
        **base,
        "PATH": expected_task_path("prepend", gatk.path, passed),
        "GATK_CONDAENV_PREFIX": gatk.exports["GATK_CONDAENV_PREFIX"],
        "SLURM_JOB_ID": "7",
        "SLURMD_NODENAME": "worker1",
        "TMPDIR": "/tmp",
        "_": "/usr/bin/srun",
    }
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _problems(gatk: Runtime, mode: str, task: dict[str, str], precedence: str = "prepend") -> list[str]:
    return task_env_problems(
        task, SUBMIT, mode=mode, precedence=precedence, allow_list=ALLOW, runtime=gatk, varlist=("SFX",)
    )


@pytest.mark.parametrize("mode", ["default", "ALL", "NONE", "NIL", "VARLIST"])
def test_a_correct_task_environment_passes_in_every_mode(gatk, mode):
    assert _problems(gatk, mode, _task(gatk, mode)) == []


@pytest.mark.parametrize("mode", ["default", "NONE"])
def test_an_extra_variable_is_named(gatk, mode):
    problems = _problems(gatk, mode, _task(gatk, mode, LD_LIBRARY_PATH="/opt/x", FLOXHUB_TOKEN="t"))
    assert any("unexpected variable LD_LIBRARY_PATH" in p for p in problems)
    assert any("unexpected variable FLOXHUB_TOKEN" in p for p in problems)


def test_activation_state_off_the_allow_list_is_named(gatk):
    problems = _problems(gatk, "NONE", _task(gatk, "NONE", FLOX_ENV=gatk.realized_path))
    assert problems == [f"unexpected variable FLOX_ENV={gatk.realized_path!r} (activation state not on the allow-list)"]


def test_wrong_path_order_is_named(gatk):
    flipped = _task(gatk, "default", PATH=expected_task_path("append", gatk.path, SUBMIT["PATH"]))
    problems = _problems(gatk, "default", flipped)
    assert len(problems) == 1 and problems[0].startswith("PATH is ")
    reversed_entries = _task(gatk, "NONE", PATH=":".join(reversed(gatk.path)))
    assert _problems(gatk, "NONE", reversed_entries)[0].startswith("PATH is ")


def test_missing_or_wrong_allow_listed_value_is_named(gatk):
    assert _problems(gatk, "ALL", _task(gatk, "ALL", GATK_CONDAENV_PREFIX=None)) == [
        f"allow-listed GATK_CONDAENV_PREFIX is None, expected {gatk.exports['GATK_CONDAENV_PREFIX']!r}"
    ]
    assert (
        "allow-listed GATK_CONDAENV_PREFIX" in _problems(gatk, "ALL", _task(gatk, "ALL", GATK_CONDAENV_PREFIX="/x"))[0]
    )


def test_changed_or_lost_submit_side_variable_is_named(gatk):
    assert _problems(gatk, "ALL", _task(gatk, "ALL", HOME="/root")) == ["HOME changed: '/root', submitted '/home/u'"]
    assert _problems(gatk, "VARLIST", _task(gatk, "VARLIST", SFX=None)) == [
        "SFX was submitted ('from-login') but did not reach the task"
    ]
    # NONE must not carry the user's variables
    assert _problems(gatk, "NONE", _task(gatk, "NONE", SFX="from-login")) == ["unexpected variable SFX='from-login'"]


def test_parse_environ():
    assert parse_environ(b"A=1\0B=x=y\0\0junk\0") == {"A": "1", "B": "x=y"}


def test_expected_revision_is_the_revision_code_on_the_declared_settings():
    settings = resolve(cli={}, substrate="local").settings
    image = "local/slurmflox-node:x@sha256:" + "1" * 64
    assert expected_revision(settings, image) == runtime_revision(settings, image=image)
    other = settings.replace(worker_path_precedence="append")
    assert expected_revision(other, image) != expected_revision(settings, image)


def test_a_task_without_any_flox_runtime_is_named_unrealized():
    """#26: T2/TP FAIL "declared environment not realized" on this decision, instead of SKIPping for a missing
    record. Environments as a task shows them under --export=NONE (what slurmd and the TaskProlog gave it)."""
    from pytest_slurmflox.judges.expectations import unrealized_environment

    bare = {"SLURM_JOB_ID": "7", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    assert unrealized_environment(bare) == (
        "no FLOX_ENV and no PATH entry of a Flox environment (PATH '/usr/local/bin:/usr/bin:/bin': the system's)"
    )
    assert "PATH unset" in str(unrealized_environment({"SLURM_JOB_ID": "7"}))
    assert unrealized_environment({**bare, "FLOX_ENV": "/run/flox/env"}) is None
    nix = "/nix/store/0c9f2x-environment-hpc/bin:/usr/bin"
    assert unrealized_environment({"PATH": nix}) is None  # half an activation: for the content checks to judge
    assert unrealized_environment({"PATH": "/home/u/proj/.flox/run/x86_64-linux.hpc/bin:/usr/bin"}) is None
    assert unrealized_environment({**bare, "FLOX_ENV": ""}) is not None  # empty is not set
