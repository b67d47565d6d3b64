"""What a run collects and selects (pytest_slurmflox/harness/selection.py), unit by unit and as a whole command.

Issue 25: in the checkout, ``--slurmflox-up=local -m acceptance`` collected ``tests/`` too (``testpaths``), whose
modules need the test extra: a newcomer's first command stopped with four collection errors. And a bare
``--slurmflox-up`` ran every check instead of provisioning and exiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_slurmflox.harness import selection

REPO = Path(__file__).resolve().parents[2]


def fake_config(rootpath: Path = REPO, markexpr: str = "", args_user: bool = False, **options: Any) -> Any:
    """The parts of a pytest config the selection rules read: options (CLI), ini (none), mark expression."""
    source = pytest.Config.ArgsSource.ARGS if args_user else pytest.Config.ArgsSource.TESTPATHS
    return SimpleNamespace(
        rootpath=rootpath,
        option=SimpleNamespace(markexpr=markexpr),
        args_source=source,
        getoption=lambda dest: options.get(dest),
        getini=lambda _name: None,
    )


@pytest.fixture(autouse=True)
def _no_option_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("SLURMFLOX_"):
            monkeypatch.delenv(name)


def test_a_main_job_in_the_checkout_collects_the_suites_only():
    suites = [str(REPO / "suites")]
    assert selection.main_job_paths(fake_config(markexpr="acceptance"), user_paths=False) == suites
    assert selection.main_job_paths(fake_config(slurmflox_up="local"), user_paths=False) == suites
    assert selection.main_job_paths(fake_config(slurmflox_target="t.yaml"), user_paths=False) == suites


def test_paths_the_user_names_and_runs_of_the_projects_tests_are_left_alone(tmp_path):
    assert selection.main_job_paths(fake_config(markexpr="acceptance"), user_paths=True) is None
    assert selection.main_job_paths(fake_config(markexpr="not acceptance"), user_paths=False) is None
    assert selection.main_job_paths(fake_config(markexpr="integration"), user_paths=False) is None
    # not the checkout (a customer's directory, a pytester dir) and no target: pytest's own choice
    assert selection.main_job_paths(fake_config(tmp_path, markexpr="acceptance"), user_paths=False) is None
    assert selection.main_job_paths(fake_config(tmp_path, slurmflox_target="t.yaml"), user_paths=True) is None


def test_a_target_file_without_paths_means_the_suites_wherever_it_runs(tmp_path):
    """Issue 38: ``pytest --slurmflox-target=site.yaml`` in a customer's directory collected nothing (exit 5, and
    still a NOT SIGNED OFF report); it collects the installed suites, as ``--pyargs pytest_slurmflox.suites``."""
    suites = [str(selection.installed_suites())]
    assert selection.main_job_paths(fake_config(tmp_path, slurmflox_target="site.yaml"), user_paths=False) == suites
    assert selection.main_job_paths(fake_config(tmp_path, slurmflox_target="t.yaml", markexpr="T3"), False) == suites


def test_a_bare_up_is_plain_operation_and_anything_selected_is_not():
    assert selection.plain_operation(fake_config(slurmflox_up="local"))
    assert not selection.reports_wanted(fake_config(slurmflox_up="local"))
    for selected in (
        fake_config(slurmflox_up="local", markexpr="acceptance"),
        fake_config(slurmflox_up="local", markexpr="T3 or T7"),
        fake_config(slurmflox_up="local", slurmflox_groups="T3"),
        fake_config(slurmflox_up="local", slurmflox_signoff=True),
        fake_config(slurmflox_up="local", args_user=True),  # --pyargs pytest_slurmflox.suites named
    ):
        assert not selection.plain_operation(selected)
        assert selection.acceptance_requested(selected)
        assert selection.reports_wanted(selected)
    assert not selection.acceptance_requested(fake_config(slurmflox_up="local"))


def test_the_main_job_in_the_checkout_never_imports_the_projects_tests(tmp_path):
    """The whole command, collect-only, in the checkout, with a ``hypothesis`` that cannot be imported (as on a
    machine without the test extra): only suites are collected, nothing errors."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "hypothesis.py").write_text("raise ImportError('the test extra is not installed here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMFLOX_", "WORKER_"))}
    env["PYTHONPATH"] = str(shadow)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "acceptance",
            "-p",
            "no:randomly",
            "-p",
            "no:hypothesispytest",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert ids and all(line.startswith("suites/") for line in ids), ids[:5]
    assert "error" not in proc.stdout.lower().splitlines()[-1], proc.stdout[-500:]


def test_pyargs_names_resolve_to_where_the_modules_live():
    suites = REPO / "suites"
    assert selection.pyargs_anchors(["pytest_slurmflox.suites"]) == [str(suites)]
    assert selection.pyargs_anchors(["pytest_slurmflox.suites.test_t03_task_profile::test_x"]) == [
        str(suites / "test_t03_task_profile.py")
    ]
    assert selection.pyargs_anchors(["no_such_module_here", "pytest_slurmflox.no_such"]) == []


def test_the_customer_command_in_the_checkout_loads_no_conftest_of_the_projects_tests():
    """``--pyargs pytest_slurmflox.suites`` names no path, so pytest anchored its conftest discovery at the cwd and
    its ``test*`` directories: in the checkout that loaded ``tests/conftest.py``, whose serial default and skip guard
    made the run serial and failed it on the not-applicable checks. Now the suites' conftest anchors it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURMFLOX_", "WORKER_"))}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--pyargs", "pytest_slurmflox.suites", "-m", "T3"),
            *("--collect-only", "-q", "--trace-config", "-p", "no:randomly"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    loaded = [line for line in proc.stdout.splitlines() if "PLUGIN registered" in line and "conftest" in line]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert any(str(REPO / "suites" / "conftest.py") in line for line in loaded), loaded
    assert not any(str(REPO / "tests") in line for line in loaded), loaded


def test_the_customer_command_without_pyargs_collects_what_pyargs_collects(tmp_path):
    """Issue 38: in a customer's directory, ``pytest --slurmflox-target=site.yaml`` collects the suites, the same
    checks as ``pytest --pyargs pytest_slurmflox.suites --slurmflox-target=site.yaml`` (once: 0 items, exit 5)."""
    (tmp_path / "site.yaml").write_text("login: {host: 127.0.0.1, user: nobody}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMFLOX_")}

    def collected(*args: str) -> list[str]:
        argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
        proc = subprocess.run(
            [*argv, "--slurmflox-target=site.yaml", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return [line for line in proc.stdout.splitlines() if "::" in line]

    alone = collected()
    assert len(alone) > 50 and all(line.startswith("test_t") for line in alone), alone[:5]
    assert sorted(alone) == sorted(collected("--pyargs", "pytest_slurmflox.suites"))


def _item(group: str) -> Any:
    marks = [SimpleNamespace(name="acceptance"), SimpleNamespace(name=group)]
    return SimpleNamespace(get_closest_marker=lambda name: next((m for m in marks if m.name == name), None),
                           iter_markers=lambda: iter(marks))  # fmt: skip


@pytest.mark.parametrize(
    ("markexpr", "groups", "runs"),
    [("acceptance", None, False), ("TB", None, True), ("acceptance and TB", None, True), ("", "T4,TB", True)],
)
def test_tb_runs_only_when_named(markexpr: str, groups: str | None, runs: bool):
    """TB (groups.NAMED_ONLY_GROUPS) is left out of a run that does not name it, saying how to name it; a group
    beside it is not."""
    config = fake_config(markexpr=markexpr, slurmflox_groups=groups)
    chosen = selection.Selection.of(config, "local")
    if not runs:
        assert chosen.why_dropped(_item("TB")) == "group TB runs only when named (-m TB or --slurmflox-groups TB)"
        assert chosen.why_dropped(_item("T4")) is None
    else:
        assert chosen.why_dropped(_item("TB")) is None


def test_a_retest_runs_the_per_worker_checks_only_and_is_a_main_job():
    """``--slurmflox-retest`` keeps the checks marked ``per_worker`` (their FAIL names workers as data) and says why
    every other one is left out; it is a main job on its own."""
    config = fake_config(markexpr="acceptance", slurmflox_retest="quarantined")
    chosen = selection.Selection.of(config, "local")
    per_worker = _item("T3")
    marks = [SimpleNamespace(name="acceptance"), SimpleNamespace(name="T3"), SimpleNamespace(name="per_worker")]
    per_worker.get_closest_marker = lambda name: next((m for m in marks if m.name == name), None)
    assert chosen.why_dropped(per_worker) is None
    assert chosen.why_dropped(_item("T5")) == "a re-test (--slurmflox-retest) runs the per-worker checks only"
    assert selection.main_job(fake_config(slurmflox_retest="worker2"))
    assert selection.Selection.of(fake_config(markexpr="acceptance"), "local").why_dropped(_item("T5")) is None
