"""T9: shared storage across workers and the login endpoint, and the login endpoint itself.

Requirement: a file written by a task on one worker is read by a task on another worker and at the login endpoint,
with the user's ownership; the user reaches the login endpoint over SSH and submits from there.

Where the expectations come from: the user name is the target file's ``login.user``; the client commands a user
needs are fixed here (each must resolve to an executable by itself); the token written is made up by the check.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.declared import HOME

from ._support import Mark, _q, declared, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T9]


@pytest.fixture
def shared_home(expect, target):
    declared(target, HOME)
    if not expect.settings.worker_home_path:
        pytest.skip("missing capability shared-home: WORKER_HOME_PATH is empty, workers mount no shared home")


#: The Slurm client commands a user needs at the login endpoint; each is checked by itself.
CLIENT_COMMANDS = ("sbatch", "srun", "squeue", "scancel", "sinfo")


def test_login_endpoint_user_is_unprivileged(target, login):
    """The login endpoint's user is an ordinary user (the suites' claims about unprivileged work rest on it). Not
    "``id -un`` is ``login.user``": SSH logged in as that name, so that could only compare it with itself (#26)."""
    res = login.run("id -u")
    uid = res.stdout.strip()
    user = target.spec.login.user
    requirement(res.ok and uid.isdigit() and uid != "0", f"{user} at the login endpoint is not root (uid {uid})", res)


@pytest.mark.parametrize("command", CLIENT_COMMANDS)
def test_login_endpoint_has_the_slurm_client_command(login, command):
    res = login.run(f'p=$(command -v {command}) && [ -f "$p" ] && [ -x "$p" ] && echo "$p"')
    requirement(
        res.ok and res.stdout.strip().startswith("/"), f"{command} resolves to an executable at the login endpoint", res
    )


def test_write_on_one_worker_read_on_another_and_at_login(shared_home, submit, workers, login, run_id):
    """Every worker writes a file that the next worker (in a ring over the whole cohort) and the login endpoint
    read back."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    login.run(f"mkdir -p {submit.outdir}").check()
    for i, writer in enumerate(workers):
        reader = workers[(i + 1) % len(workers)]
        path = f"{submit.outdir}/shared-{run_id}-{writer}.txt"
        token = f"written-on-{writer}-{run_id}"
        w = submit.srun(f"-N1 -n1 -w {writer}", f"bash -c 'echo {token} > {path}'")
        requirement(w.ok, f"a task on {writer} writes to the shared home", w)
        mark = Mark.new()
        r = submit.srun(
            f"-N1 -n1 -w {reader}", "bash -c " + _q(mark.wrap(f"cat {path}; stat -c %u:%g {path}; id -u; id -g"))
        )
        lines = mark.lines(r.stdout)
        requirement(r.ok and len(lines) == 4 and lines[0] == token, f"a task on {reader} reads {writer}'s file", r)
        requirement(lines[1] == f"{lines[2]}:{lines[3]}", "the file is owned by the submitting user", r)
        at_login = login.run(f"cat {path}")
        requirement(at_login.ok and at_login.stdout.strip() == token, "the login endpoint reads it too", at_login)
