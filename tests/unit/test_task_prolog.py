"""The Slurm TaskProlog (provision/task-prolog.sh), run for real with bash.

Profiles are produced by the real initializer wherever a valid profile is needed; broken variants are made by
damaging such a profile on disk, so every case is a file layout the prolog can really meet. The prolog's
environment is built explicitly (``env -i`` semantics): only what a test passes reaches it, as with
``srun --export=NONE``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hostile import HOSTILE, LINE_TEXT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_slurmflox.judges.expectations import SYSTEM_DEFAULT_PATH, expected_task_path

PROVISION = Path(__file__).resolve().parents[2] / "provision"
PROLOG = PROVISION / "task-prolog.sh"
INIT = PROVISION / "task-profile-init.sh"
BASH = "/bin/bash"
REV = "sha256:" + "c" * 64
IMAGE = "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04@sha256:" + "f" * 64
INVALID = "print slurmflox: task profile invalid: "


def make_profile(
    root: Path, *, precedence: str = "prepend", exports: dict[str, str] | None = None
) -> tuple[Path, list[str]]:
    """Run the real initializer; return (profile dir, the Flox PATH entries it recorded)."""
    flox = root / "flox-env"
    entries = [f"{flox}/bin", f"{flox}/opt/conda/envs/gatk/bin"]
    for entry in entries:
        Path(entry).mkdir(parents=True, exist_ok=True)
    profile = root / "profile"
    env = {
        "FLOX_ENV": str(flox),
        "SLURMFLOX_ENVIRONMENT": "local/demo:1",
        "SLURMFLOX_ACTIVATE_MODE": "run",
        "SLURMFLOX_IMAGE": IMAGE,
        "SLURMFLOX_REVISION": REV,
        "SLURMFLOX_PATH_PRECEDENCE": precedence,
        "SLURMFLOX_ENV_EXPORTS": ",".join(exports or {}),
        "SLURMFLOX_PROFILE_DIR": str(profile),
        "PATH": f"{entries[0]}:/usr/bin:/bin:{entries[1]}",
        **(exports or {}),
    }
    result = subprocess.run([BASH, str(INIT)], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return profile, entries


def prolog(profile: Path | str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(PROLOG), str(profile)],
        env=env if env is not None else {},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def failed_closed(result: subprocess.CompletedProcess[str], reason: str) -> None:
    """Non-zero exit, exactly one `print` line for the user, no export directive, reason on stderr too."""
    assert result.returncode != 0, f"prolog accepted a broken profile: {result.stdout!r}"
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(INVALID), result.stdout
    assert reason in lines[0], lines[0]
    assert reason in result.stderr
    assert not any(line.startswith("export ") for line in lines)


def current(profile: Path) -> Path:
    return profile / os.readlink(profile / "current")


# ------------------------------------------------------------------------------------------ PATH policy
def apply_path(result: subprocess.CompletedProcess[str]) -> str:
    """The PATH a task gets from the prolog's directives (Slurm takes the rest of an ``export`` line literally)."""
    assert result.returncode == 0, result.stdout + result.stderr
    paths = [
        line.removeprefix("export PATH=") for line in result.stdout.splitlines() if line.startswith("export PATH=")
    ]
    assert len(paths) == 1, result.stdout
    return paths[0]


@pytest.mark.parametrize("precedence", ["prepend", "append"])
@pytest.mark.parametrize("task_env", [{}, {"PATH": ""}], ids=["unset", "empty"])
def test_a_task_given_no_path_gets_flox_then_the_system_default(
    tmp_path: Path, precedence: str, task_env: dict[str, str]
) -> None:
    """No PATH (srun --export=NONE, --export=VAR) or an empty one: the environment's entries, then the system's
    default PATH, in both precedence modes; the expectation is the judges' own (expectations.expected_task_path)."""
    profile, entries = make_profile(tmp_path, precedence=precedence)
    result = prolog(profile, env=task_env)
    assert apply_path(result) == expected_task_path(precedence, tuple(entries), None)
    assert apply_path(result) == f"{':'.join(entries)}:{SYSTEM_DEFAULT_PATH}"


@pytest.mark.parametrize("precedence", ["prepend", "append"])
def test_a_task_given_no_path_finds_flox_commands_first_and_the_images_after(tmp_path: Path, precedence: str) -> None:
    """The contract behind the PATH: under bash with an empty environment (as ``srun --export=NONE`` and
    ``--export=TEST_ENV_VAR=123`` start a task), a command of the environment resolves to the environment's copy,
    one of the environment shadowing the image's (grep) too, and env and cat, which only the image has, are found
    after them (Slurm's own testsuite: ``srun --export=TEST_ENV_VAR=123 env_script`` failed with
    "env: command not found" when the prolog gave the environment's entries alone)."""
    profile, entries = make_profile(tmp_path, precedence=precedence)
    for name in ("flox-probe", "grep"):
        tool = Path(entries[0]) / name
        tool.write_text("#!/bin/sh\necho flox\n")
        tool.chmod(0o755)
    path = apply_path(prolog(profile, env={}))
    shown = subprocess.run(
        [
            BASH,
            "-c",
            'for c in flox-probe grep env cat; do command -v "$c" || echo "missing $c"; done; env | grep -c .',
        ],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = shown.stdout.splitlines()
    assert lines[:2] == [f"{entries[0]}/flox-probe", f"{entries[0]}/grep"], shown.stdout
    system = SYSTEM_DEFAULT_PATH.split(":")
    for found in lines[2:4]:
        assert found.rsplit("/", 1)[0] in system, shown.stdout  # env, cat: the image's, after the environment's
    assert lines[4] == "flox", shown.stdout  # `env | grep`: env ran, and grep was the environment's copy


def test_runs_under_env_dash_i(tmp_path: Path) -> None:
    env_cmd = shutil.which("env")
    if env_cmd is None:
        pytest.skip("no env(1) on this host")
    profile, entries = make_profile(tmp_path)
    result = subprocess.run(
        [env_cmd, "-i", BASH, str(PROLOG), str(profile)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"export PATH={':'.join(entries)}:{SYSTEM_DEFAULT_PATH}\n"


def test_the_prolog_and_the_judges_name_the_same_system_path() -> None:
    """The prolog is shell builtins only and cannot import the judges: its one literal must be theirs."""
    assert f"_sfp_system_path='{SYSTEM_DEFAULT_PATH}'" in PROLOG.read_text().splitlines()


def test_prepend_puts_flox_first(tmp_path: Path) -> None:
    profile, entries = make_profile(tmp_path, precedence="prepend")
    result = prolog(profile, env={"PATH": "/submit/bin:/usr/bin"})
    assert result.stdout == f"export PATH={':'.join(entries)}:/submit/bin:/usr/bin\n"


def test_append_keeps_the_task_path_first(tmp_path: Path) -> None:
    profile, entries = make_profile(tmp_path, precedence="append")
    result = prolog(profile, env={"PATH": "/modules/bin:/usr/bin"})
    assert result.stdout == f"export PATH=/modules/bin:/usr/bin:{':'.join(entries)}\n"


def test_uses_no_external_command(tmp_path: Path) -> None:
    """A PATH full of booby-trapped commands: any external command the prolog ran would leave a marker."""
    profile, entries = make_profile(tmp_path)
    traps = tmp_path / "traps"
    traps.mkdir()
    marker = tmp_path / "external-command-ran"
    for name in (
        "cat",
        "head",
        "tail",
        "sed",
        "awk",
        "tr",
        "grep",
        "readlink",
        "realpath",
        "ls",
        "test",
        "printf",
        "echo",
        "env",
        "basename",
        "dirname",
        "cut",
        "wc",
        "true",
        "false",
        "[",
    ):
        trap = traps / name
        trap.write_text(f"#!/bin/sh\necho \"$0\" >> '{marker}'\n")
        trap.chmod(0o755)
    result = prolog(profile, env={"PATH": str(traps)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"export PATH={':'.join(entries)}:{traps}\n"
    assert not marker.exists(), f"external commands ran: {marker.read_text()}"


# ------------------------------------------------------------------------------------------ exports
def test_every_allow_listed_variable_is_exported_in_order(tmp_path: Path) -> None:
    exports = {
        "GATK_CONDAENV_PREFIX": str(tmp_path / "flox-env/opt/conda/envs/gatk"),
        "MY_TOOL_HOME": "/opt/my tool",
        "LANG": "C.UTF-8",
        "EMPTY": "",
        "_underscore9": "x=y=z",
    }
    profile, entries = make_profile(tmp_path, exports=exports)
    result = prolog(profile, env={"PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"export PATH={':'.join(entries)}:/usr/bin",
        *(f"export {k}={v}" for k, v in exports.items()),
    ]


# ------------------------------------------------------------------------------------------ fail closed
def test_missing_profile_directory(tmp_path: Path) -> None:
    failed_closed(prolog(tmp_path / "nowhere"), "is missing")


def test_default_profile_directory_is_run_flox_task_profile() -> None:
    """Slurm passes no argument; on this host there is no /run/flox-task-profile, so it must fail closed."""
    if os.path.exists("/run/flox-task-profile"):
        pytest.skip("/run/flox-task-profile exists on this host")
    result = subprocess.run([BASH, str(PROLOG)], env={}, capture_output=True, text=True, check=False)
    failed_closed(result, "/run/flox-task-profile")


def test_missing_current_link(tmp_path: Path) -> None:
    profile, _ = make_profile(tmp_path)
    (profile / "current").unlink()
    failed_closed(prolog(profile), "no complete profile")


def test_dangling_current_link(tmp_path: Path) -> None:
    profile, _ = make_profile(tmp_path)
    shutil.rmtree(current(profile))
    failed_closed(prolog(profile), "no complete profile")


def test_missing_revision_marker(tmp_path: Path) -> None:
    profile, _ = make_profile(tmp_path)
    (current(profile) / "revision").unlink()
    failed_closed(prolog(profile), "missing revision marker")


@pytest.mark.parametrize(
    "name", ["schema", "environment", "activate-mode", "image", "realized-path", "path-precedence", "path", "exports"]
)
def test_missing_file(tmp_path: Path, name: str) -> None:
    profile, _ = make_profile(tmp_path)
    (current(profile) / name).unlink()
    failed_closed(prolog(profile), f"missing file {name}")


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("schema", "slurmflox-task-profile/2\n", "unsupported schema"),
        ("schema", "slurmflox-task-profile/1\nslurmflox-task-profile/1\n", "exactly one line"),
        ("schema", "", "exactly one line"),
        ("revision", "sha256:" + "c" * 63 + "\n", "revision is not"),
        ("revision", REV + "\nexport EVIL=1\n", "exactly one line"),
        ("revision", REV + "\r\n", "carriage return"),
        ("environment", "local/demo:1\nprint hi\n", "exactly one line"),
        ("image", "\n", "image is empty"),
        ("activate-mode", "activate\n", "activate-mode is not"),
        ("realized-path", "relative\n", "realized-path is not"),
        ("path-precedence", "first\n", "path-precedence is not"),
        ("path", "", "path file is empty"),
        ("path", "relative/bin\n", "empty or relative entry"),
        ("path", "\n", "empty or relative entry"),
        ("path", "{flox}/bin:/usr/bin\n", "contains :"),
        ("path", "/usr/bin\n", "not rooted"),
        ("path", "{flox}/bin\r\n", "carriage return"),
        ("exports", "GOOD=1\ncontinued line of a multiline value\n", "not NAME=value"),
        ("exports", "1BAD=x\n", "bad variable name"),
        ("exports", "A-B=x\n", "bad variable name"),
        ("exports", "=x\n", "bad variable name"),
        ("exports", "export X=1\n", "bad variable name"),
        ("exports", "PATH=/evil\n", "may not set PATH"),
        ("exports", "LD_PRELOAD=/evil.so\n", "may not set LD_PRELOAD"),
        ("exports", "GOOD=value\r\n", "carriage return"),
    ],
)
def test_malformed_profile(tmp_path: Path, name: str, content: str, reason: str) -> None:
    profile, _ = make_profile(tmp_path)
    target = current(profile) / name
    target.write_text(content.replace("{flox}", str(tmp_path / "flox-env")))
    failed_closed(prolog(profile, env={"PATH": "/usr/bin"}), reason)


def test_unreadable_directory_argument_with_a_newline_stays_one_line(tmp_path: Path) -> None:
    result = prolog(f"{tmp_path}/x\nexport EVIL=1")
    failed_closed(result, "is missing")


# ------------------------------------------------------------------------------------------ hostile values
_hostile = HOSTILE


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=_hostile, precedence=st.sampled_from(["prepend", "append"]))
def test_hostile_values_stay_one_literal_directive_and_never_run(
    tmp_path: Path, template: str, precedence: str
) -> None:
    """Initializer then prolog: every value comes out verbatim on its own export line, nothing executes."""
    marker = tmp_path / "executed"
    value = template.replace("{marker}", str(marker))
    if (tmp_path / "profile").exists():
        shutil.rmtree(tmp_path / "profile")
    profile, entries = make_profile(tmp_path, precedence=precedence, exports={"HOSTILE": value, "SECOND": value})
    task_path = f"/task/{value}".replace(":", "_")
    result = prolog(profile, env={"PATH": task_path, "HOSTILE": "task-side"})
    assert result.returncode == 0, result.stderr
    flox = ":".join(entries)
    expected_path = f"{flox}:{task_path}" if precedence == "prepend" else f"{task_path}:{flox}"
    assert result.stdout.split("\n") == [
        f"export PATH={expected_path}",
        f"export HOSTILE={value}",
        f"export SECOND={value}",
        "",
    ]
    assert not marker.exists(), "a value was executed"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    before=LINE_TEXT,
    after=LINE_TEXT,
    breaker=st.sampled_from(["\n", "\r", "\r\n"]),
)
def test_values_with_line_breaks_never_reach_a_task(tmp_path: Path, before: str, after: str, breaker: str) -> None:
    """A multiline value is refused by the initializer; forced into a profile, the prolog fails closed."""
    value = before + breaker + after
    profile = tmp_path / "profile"
    if profile.exists():
        shutil.rmtree(profile)
    flox = tmp_path / "flox-env"
    (flox / "bin").mkdir(parents=True, exist_ok=True)
    env = {
        "FLOX_ENV": str(flox),
        "SLURMFLOX_ENVIRONMENT": "local/demo:1",
        "SLURMFLOX_ACTIVATE_MODE": "run",
        "SLURMFLOX_IMAGE": IMAGE,
        "SLURMFLOX_REVISION": REV,
        "SLURMFLOX_PATH_PRECEDENCE": "prepend",
        "SLURMFLOX_ENV_EXPORTS": "MULTI",
        "SLURMFLOX_PROFILE_DIR": str(profile),
        "PATH": f"{flox}/bin",
        "MULTI": value,
    }
    init = subprocess.run([BASH, str(INIT)], env=env, capture_output=True, text=True, check=False)
    assert init.returncode != 0
    assert not os.path.lexists(profile / "current")
    # Now bypass the initializer: write the value straight into a profile.
    good, _ = make_profile(tmp_path)
    (current(good) / "exports").write_bytes(f"MULTI={value}\n".encode("utf-8", "surrogateescape"))
    result = prolog(good)
    if result.returncode == 0:
        # Only possible when the tail after the break happens to be a valid NAME=value line itself: then the
        # file holds two well-formed exports and the prolog emits exactly those two lines, never more.
        lines = result.stdout.splitlines()
        assert lines[1:] == [f"export MULTI={before}", f"export {after}"], lines
        assert breaker == "\n" and "=" in after
    else:
        assert result.stdout.startswith(INVALID) and result.stdout.count("\n") == 1


# ------------------------------------------------------------------------------------------ static checks
@pytest.mark.parametrize("script", [PROLOG, INIT], ids=lambda p: p.name)
def test_shellcheck_clean(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed")
    result = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_prolog_neither_evals_nor_sources_profile_content() -> None:
    code = [line.split("#", 1)[0] for line in PROLOG.read_text().splitlines()]
    words = " ".join(code).replace(";", " ").split()
    assert "eval" not in words and "source" not in words and "." not in words
