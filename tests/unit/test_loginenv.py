"""The user's login environment a batch job may carry under ``sbatch --export=NONE``
(pytest_slurmflox/judges/loginenv.py):
which submissions imply --get-user-env, how TP judges a task carrying login variables, and the reference probe
itself, run here by bash as root (the probe is shell text; running it is the only honest test of it)."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest
from pytest_slurmflox.suites._records import environs

from pytest_slurmflox.judges.expectations import Runtime, expected_task_path, task_env_problems
from pytest_slurmflox.judges.loginenv import LOGIN_PROBE, implies_user_env, login_origin

FLOX = Runtime("local/demo:1", "/nix/store/x-demo-1", "sha256:0", path=("/nix/store/x-demo-1/bin",))
LOGIN = {
    "HOME": "/home/u",
    "USER": "u",
    "LOGNAME": "u",
    "SHELL": "/bin/bash",
    "MAIL": "/var/mail/u",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "SITE_MODULES": "/opt/site/modules",
    "PWD": "/home/u",
}
SUBMIT = {"HOME": "/home/u", "PATH": "/usr/bin:/bin", "SFX": "from-login"}


def _task(**extra: str) -> dict[str, str]:
    """A batch script's environment under --export=NONE where slurmd loaded the user's login environment."""
    base = {k: v for k, v in LOGIN.items() if k != "PATH"}
    return {
        **base,
        "PATH": expected_task_path("prepend", FLOX.path, LOGIN["PATH"]),
        "SLURM_JOB_ID": "7",
        "SLURMD_NODENAME": "worker2",
        **extra,
    }


def _problems(task: dict[str, str], login: dict[str, str] | None = LOGIN, mode: str = "NONE") -> list[str]:
    return task_env_problems(
        task, SUBMIT, mode=mode, precedence="prepend", allow_list=(), runtime=FLOX, varlist=("SFX",), login=login
    )


def test_only_sbatch_with_none_or_a_variable_list_implies_get_user_env():
    assert implies_user_env("sbatch", "NONE") and implies_user_env("sbatch", "VARLIST")
    assert not implies_user_env("sbatch", "NIL") and not implies_user_env("sbatch", "ALL")
    assert not implies_user_env("sbatch", "default") and not implies_user_env("srun", "NONE")


def test_the_login_environment_passes_and_so_does_a_job_that_could_not_load_it():
    assert _problems(_task()) == []
    # slurmd could not resolve the user as root ("running only with passed environment"): PATH is the environment's
    # entries then the system's default
    bare = {"PATH": expected_task_path("prepend", FLOX.path, None), "SLURM_JOB_ID": "7", "SLURMD_NODENAME": "worker2"}
    assert _problems(bare) == []


def test_a_leak_or_a_changed_login_value_still_fails():
    assert _problems(_task(LD_LIBRARY_PATH="/opt/leak/lib")) == ["unexpected variable LD_LIBRARY_PATH='/opt/leak/lib'"]
    assert _problems(_task(SITE_MODULES="/elsewhere")) == [
        "SITE_MODULES='/elsewhere', the user's login environment on the worker has '/opt/site/modules'"
    ]
    wrong_path = _task(PATH="/opt/leak/bin:" + _task()["PATH"])
    assert _problems(wrong_path)[0].startswith("PATH is '/opt/leak/bin:")
    # without --get-user-env (srun, NIL, ALL...) the same login variables are not the user's to carry
    assert "unexpected variable SITE_MODULES='/opt/site/modules'" in _problems(_task(), login=None)


def test_login_origin_never_vouches_for_slurms_own_names():
    task = _task(SLURM_CONF="/tmp/x", SLURM_SFX_FOREIGN="from-profile")
    login = {**LOGIN, "SLURM_CONF": "/tmp/x", "SLURM_SFX_FOREIGN": "from-profile"}
    assert login_origin(task, login) == set(LOGIN) - {"PATH"}
    assert login_origin(task, None) == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the probe as another user")
def test_the_probe_prints_what_su_and_the_login_shell_give():
    """As root (this host's: shell, home and /etc/profile are real), the reference has su(1)'s variables and the
    login shell's PATH, with the node label the task's SLURMD_NODENAME gives."""
    me = pwd.getpwuid(0)
    out = subprocess.run(
        ["bash", "-c", LOGIN_PROBE],
        env={"SLURMD_NODENAME": "worker2", "LD_LIBRARY_PATH": "/opt/leak/lib"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    login = environs(out.stdout)["worker2+login"]
    assert login["HOME"] == me.pw_dir and login["USER"] == login["LOGNAME"] == me.pw_name
    assert login["SHELL"] == me.pw_shell and login["MAIL"].endswith("/" + me.pw_name)
    assert login["PWD"] == me.pw_dir and login.get("PATH")
    assert "LD_LIBRARY_PATH" not in login  # nothing of the task's own environment leaks into the reference
