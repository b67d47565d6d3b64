"""The task-profile initializer (provision/task-profile-init.sh), run for real with bash on real temp dirs.

Each test builds the exact environment the init container would have (like ``env -i`` plus the inputs), so
nothing from the test process leaks in, and then inspects the files the script wrote.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from hostile import HOSTILE
from hypothesis import HealthCheck, given, settings
from pytest_slurmflox.suites._profile import PROFILE_FILES

from pytest_slurmflox.model.settings import TASK_PROFILE_SCHEMA

INIT = Path(__file__).resolve().parents[2] / "provision" / "task-profile-init.sh"
BASH = shutil.which("bash") or "/bin/bash"
REV_A = "sha256:" + "a" * 64
REV_B = "sha256:" + "b" * 64
IMAGE = "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04@sha256:" + "f" * 64
FILES = PROFILE_FILES


class Layout:
    """A realized-environment dir and a profile dir under one temp dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.flox = root / "flox-env"
        for sub in ("bin", "sbin", "opt/conda/envs/x/bin"):
            (self.flox / sub).mkdir(parents=True, exist_ok=True)
        self.profile = root / "profile"

    def env(self, **overrides: str | None) -> dict[str, str]:
        env = {
            "FLOX_ENV": str(self.flox),
            "SLURMFLOX_ENVIRONMENT": "local/demo:1",
            "SLURMFLOX_ACTIVATE_MODE": "run",
            "SLURMFLOX_IMAGE": IMAGE,
            "SLURMFLOX_REVISION": REV_A,
            "SLURMFLOX_PATH_PRECEDENCE": "prepend",
            "SLURMFLOX_ENV_EXPORTS": "",
            "SLURMFLOX_PROFILE_DIR": str(self.profile),
            "PATH": f"{self.flox}/bin:/usr/local/bin:/usr/bin:/bin",
        }
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(self, **overrides: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BASH, str(INIT)],
            env=self.env(**overrides),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    @property
    def current(self) -> Path:
        return self.profile / "current"

    def read(self, name: str) -> str:
        return (self.current / name).read_text()

    def staging_dirs(self) -> list[str]:
        return sorted(p.name for p in self.profile.iterdir() if p.name.startswith(".profile-"))


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


def ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"initializer failed: {result.stderr}"


def refused(lay: Layout, result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode != 0, f"initializer accepted bad input: {result.stdout}"
    assert needle in result.stderr, result.stderr
    assert not os.path.lexists(lay.current), "a refused run must not publish a profile"
    if lay.profile.exists():
        assert lay.staging_dirs() == [], "a refused run must not leave a staging dir behind"


# ------------------------------------------------------------------------------------------ happy path
def test_writes_every_file_with_the_contract_contents(lay: Layout) -> None:
    ok(lay.run(SLURMFLOX_PATH_PRECEDENCE="append", SLURMFLOX_ACTIVATE_MODE="dev"))
    assert lay.current.is_symlink()
    target = os.readlink(lay.current)
    assert target.startswith(".profile-") and "/" not in target, "relative link to a sibling staging dir"
    assert sorted(os.listdir(lay.current)) == sorted(FILES)
    assert lay.read("schema") == TASK_PROFILE_SCHEMA + "\n"
    assert lay.read("environment") == "local/demo:1\n"
    assert lay.read("activate-mode") == "dev\n"
    assert lay.read("image") == IMAGE + "\n"
    assert lay.read("realized-path") == f"{lay.flox}\n"
    assert lay.read("path-precedence") == "append\n"
    assert lay.read("path") == f"{lay.flox}/bin\n"
    assert lay.read("exports") == ""
    assert lay.read("revision") == REV_A + "\n"
    real = lay.current.resolve()
    assert stat.S_IMODE(real.stat().st_mode) == 0o755
    for name in FILES:
        assert stat.S_IMODE((real / name).stat().st_mode) == 0o644, name


def test_keeps_only_rooted_path_entries_in_order(lay: Layout) -> None:
    f = lay.flox
    path = ":".join(
        [
            "/usr/local/bin",
            f"{f}/bin",
            "",
            "/usr/bin",
            f"{f}x/bin",  # shares the prefix but is not below FLOX_ENV
            f"{f}/opt/conda/envs/x/bin",  # a non-top-level dir an activation hook added
            f"{f}/../escape/bin",  # climbs out of FLOX_ENV
            f"{f}/bin",  # repeat
            str(f),  # FLOX_ENV itself
            "relative/bin",
            f"{f}/sbin",
        ]
    )
    ok(lay.run(PATH=path, FLOX_ENV=f"{f}/"))
    assert lay.read("path").splitlines() == [f"{f}/bin", f"{f}/opt/conda/envs/x/bin", str(f), f"{f}/sbin"]
    assert lay.read("realized-path") == f"{f}\n", "trailing slash of FLOX_ENV normalized"


def test_no_rooted_path_entry_is_refused(lay: Layout) -> None:
    refused(lay, lay.run(PATH="/usr/bin:/bin"), "no PATH entry is rooted in FLOX_ENV")


def test_writes_with_a_flox_only_path(lay: Layout) -> None:
    """The tools the script uses come from the base system even when the activated PATH has none of them."""
    ok(lay.run(PATH=f"{lay.flox}/bin"))
    assert lay.read("path") == f"{lay.flox}/bin\n"


# ------------------------------------------------------------------------------------------ exports
def test_exports_only_allow_listed_variables_that_are_set(lay: Layout) -> None:
    result = lay.run(
        SLURMFLOX_ENV_EXPORTS=" GATK_CONDAENV_PREFIX , MY_TOOL_HOME,NOT_SET,EMPTY_ONE,GATK_CONDAENV_PREFIX,",
        GATK_CONDAENV_PREFIX=f"{lay.flox}/opt/conda/envs/x",
        MY_TOOL_HOME="/opt/tool with space",
        EMPTY_ONE="",
        SECRET_TOKEN="s3cr3t-value",
        KUBERNETES_SERVICE_HOST="10.96.0.1",
        FLOX_REALIZATION_TOKEN="another-secret",
    )
    ok(result)
    assert lay.read("exports").splitlines() == [
        f"GATK_CONDAENV_PREFIX={lay.flox}/opt/conda/envs/x",
        "MY_TOOL_HOME=/opt/tool with space",
        "EMPTY_ONE=",
    ]
    everything = "".join(lay.read(name) for name in FILES) + result.stdout + result.stderr
    for leaked in ("SECRET_TOKEN", "s3cr3t-value", "KUBERNETES_SERVICE_HOST", "10.96.0.1", "another-secret"):
        assert leaked not in everything


def test_shell_internal_variables_are_not_exports(lay: Layout) -> None:
    """RANDOM or BASH_VERSION exist inside bash but were not set by the activation: not exported."""
    ok(lay.run(SLURMFLOX_ENV_EXPORTS="RANDOM,BASH_VERSION,HOSTTYPE"))
    assert lay.read("exports") == ""


@pytest.mark.parametrize(
    "name",
    ["1ABC", "A-B", "A.B", "$(touch x)", "A B;C", "ÄRGER", "PATH", "SLURM_JOB_ID", "LD_PRELOAD", "BASH_FUNC_x"],
)
def test_refuses_names_that_are_not_plain_shell_variables(lay: Layout, name: str) -> None:
    result = lay.run(SLURMFLOX_ENV_EXPORTS=f"GOOD,{name}", GOOD="1")
    assert result.returncode != 0
    assert not os.path.lexists(lay.current)


@pytest.mark.parametrize("value", ["line1\nline2", "a\rb", "trailing\n", "\nexport EVIL=1"])
def test_refuses_multiline_values(lay: Layout, value: str) -> None:
    refused(lay, lay.run(SLURMFLOX_ENV_EXPORTS="MULTI", MULTI=value), "spans several lines")


# ------------------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize(
    "missing",
    [
        "FLOX_ENV",
        "SLURMFLOX_ENVIRONMENT",
        "SLURMFLOX_ACTIVATE_MODE",
        "SLURMFLOX_IMAGE",
        "SLURMFLOX_REVISION",
        "SLURMFLOX_PATH_PRECEDENCE",
        "SLURMFLOX_ENV_EXPORTS",
        "PATH",
    ],
)
def test_missing_input_is_refused(lay: Layout, missing: str) -> None:
    refused(lay, lay.run(**{missing: None}), f"missing input {missing}")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("SLURMFLOX_REVISION", "sha256:" + "A" * 64),
        ("SLURMFLOX_REVISION", "sha256:" + "a" * 63),
        ("SLURMFLOX_REVISION", "a" * 64),
        ("SLURMFLOX_REVISION", "sha256:" + "a" * 64 + "\n"),
        ("SLURMFLOX_PATH_PRECEDENCE", "first"),
        ("SLURMFLOX_ACTIVATE_MODE", "activate"),
        ("SLURMFLOX_ENVIRONMENT", "no-generation"),
        ("SLURMFLOX_ENVIRONMENT", "owner/name:1\nexport X=1"),
        ("SLURMFLOX_IMAGE", "repo:tag @sha256:x"),
        ("FLOX_ENV", "relative/env"),
        ("FLOX_ENV", "/"),
        ("SLURMFLOX_PROFILE_DIR", "relative/profile"),
    ],
)
def test_malformed_input_is_refused(lay: Layout, key: str, value: str) -> None:
    result = lay.run(**{key: value})
    assert result.returncode != 0, f"{key}={value!r} accepted"
    assert "refused" in result.stderr
    assert not os.path.lexists(lay.current)


# ------------------------------------------------------------------------------------------ publication
def test_revision_is_written_last(lay: Layout, tmp_path: Path) -> None:
    """Trace the real file creations: `revision` is the last file created in the staging dir."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed: cannot observe the order of file creation")
    log = tmp_path / "trace"
    env = lay.env(SLURMFLOX_ENV_EXPORTS="X", X="1")
    probe = subprocess.run(
        [strace, "-f", "-qq", "-e", "trace=openat,creat", "-o", str(log), BASH, str(INIT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0 and "ptrace" in probe.stderr:
        pytest.skip(f"ptrace is not permitted here: {probe.stderr.strip()}")
    ok(probe)
    created = []
    for line in log.read_text().splitlines():
        if "O_CREAT" in line and "/.profile-" in line:
            created.append(line.split('"')[1].rsplit("/", 1)[1])
    assert sorted(set(created)) == sorted(FILES)
    first_revision = created.index("revision")
    last_other = max(i for i, name in enumerate(created) if name != "revision")
    assert first_revision > last_other, f"revision created before other files: {created}"


def test_rerun_replaces_the_profile_and_removes_the_old_one(lay: Layout) -> None:
    ok(lay.run())
    first = os.readlink(lay.current)
    ok(lay.run(SLURMFLOX_REVISION=REV_B, SLURMFLOX_ENV_EXPORTS="X", X="2"))
    second = os.readlink(lay.current)
    assert second != first
    assert lay.read("revision") == REV_B + "\n"
    assert lay.read("exports") == "X=2\n"
    assert lay.staging_dirs() == [second], "exactly the live profile remains"
    assert sorted(os.listdir(lay.profile)) == sorted(["current", second]), "no temporary links left"


def test_a_refused_rerun_keeps_the_previous_profile(lay: Layout) -> None:
    ok(lay.run())
    before = {name: lay.read(name) for name in FILES}
    link = os.readlink(lay.current)
    result = lay.run(SLURMFLOX_REVISION="sha256:broken")
    assert result.returncode != 0
    assert os.readlink(lay.current) == link
    assert {name: lay.read(name) for name in FILES} == before
    assert lay.staging_dirs() == [link]


def test_readers_never_see_current_pointing_to_an_incomplete_profile(lay: Layout) -> None:
    """Swap the profile 25 times while a reader checks every published profile it can reach."""
    ok(lay.run())
    stop = threading.Event()
    violations: list[str] = []
    observed: set[str] = set()

    def reader() -> None:
        while not stop.is_set():
            try:
                target = os.readlink(lay.current)
            except OSError as exc:
                violations.append(f"current missing during a swap: {exc}")
                continue
            missing = [name for name in FILES if not (lay.profile / target / name).is_file()]
            if missing:
                # Deletion of an old profile only starts after it stopped being current: benign if current moved.
                try:
                    still = os.readlink(lay.current)
                except OSError:
                    still = None
                if still == target:
                    violations.append(f"current -> {target} lacks {missing}")
            else:
                observed.add(target)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for index in range(25):
            ok(lay.run(SLURMFLOX_REVISION=REV_B if index % 2 else REV_A))
    finally:
        stop.set()
        thread.join(timeout=30)
    assert violations == []
    assert len(observed) > 1, "the reader must have seen several published profiles"


# ------------------------------------------------------------------------------------------ hostile values
_hostile = HOSTILE


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=_hostile)
def test_hostile_single_line_values_are_recorded_verbatim_and_never_run(tmp_path: Path, template: str) -> None:
    lay = Layout(tmp_path)
    marker = tmp_path / "executed"
    value = template.replace("{marker}", str(marker)) if "{marker}" in template else template
    if lay.profile.exists():
        shutil.rmtree(lay.profile)
    ok(lay.run(SLURMFLOX_ENV_EXPORTS="HOSTILE", HOSTILE=value))
    assert (lay.current / "exports").read_bytes() == f"HOSTILE={value}\n".encode("utf-8", "surrogateescape")
    assert not marker.exists(), "a value was executed"
