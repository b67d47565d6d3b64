"""T9: shared storage across workers and the login endpoint, and the login endpoint itself.

Requirement: a file written by a task on one worker is read by a task on another worker and at the login endpoint,
with the user's ownership; the user reaches the login endpoint over SSH and submits from there.
"""

from __future__ import annotations

import pytest

from ._support import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T9]


@pytest.fixture
def shared_home(expect):
    if not expect.settings.worker_home_path:
        pytest.skip("missing capability shared-home: WORKER_HOME_PATH is empty, workers mount no shared home")


def test_login_endpoint_is_the_users(target, login):
    res = login.run("id -un; echo $HOME; command -v sbatch srun squeue")
    user = target.spec.login.user
    requirement(res.ok and res.stdout.splitlines()[0] == user, f"SSH reaches the login endpoint as {user}", res)
    requirement(res.stdout.count("/") >= 3, "the Slurm client commands are on the login endpoint", res)


def test_write_on_one_worker_read_on_another_and_at_login(shared_home, submit, workers, login, run_id):
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    path = f"{submit.outdir}/shared-{run_id}.txt"
    login.run(f"mkdir -p {submit.outdir}").check()
    token = f"written-on-{workers[0]}-{run_id}"
    w = submit.srun(f"-N1 -n1 -w {workers[0]}", f"bash -c 'echo {token} > {path}'")
    requirement(w.ok, f"a task on {workers[0]} writes to the shared home", w)
    r = submit.srun(f"-N1 -n1 -w {workers[1]}", f"bash -c 'cat {path}; stat -c %u:%g {path}; id -u; id -g'")
    lines = r.stdout.split()
    requirement(r.ok and lines[0] == token, f"a task on {workers[1]} reads it", r)
    requirement(lines[1] == f"{lines[2]}:{lines[3]}", "the file is owned by the submitting user", r)
    at_login = login.run(f"cat {path}")
    requirement(at_login.ok and at_login.stdout.strip() == token, "the login endpoint reads it too", at_login)
