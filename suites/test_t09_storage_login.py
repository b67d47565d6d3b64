"""T9: shared storage across workers and the login endpoint, and the login endpoint itself.

Requirement: a file written by a task on one worker is read by a task on another worker and at the login endpoint,
with the user's ownership; the user reaches the login endpoint over SSH and submits from there.

Where the expectations come from: the user name is the target file's ``login.user``; the client commands a user
needs are fixed here (each must resolve to an executable by itself); the token written is made up by the check.
"""

from __future__ import annotations

import secrets

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.model.declared import HOME

from ._capability import declared, requirement
from ._cohort import across, ring, ring_case

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
    "``id -un`` is ``login.user``": SSH logged in as that name, so that could only compare it with itself."""
    res = login.run("id -u")
    uid = res.stdout.strip()
    user = target.spec.login.user
    requirement(res.ok and uid.isdigit() and uid != "0", f"{user} at the login endpoint is not root (uid {uid})", res)


@pytest.mark.parametrize("command", CLIENT_COMMANDS)
def test_login_endpoint_has_the_slurm_client_command(slurmflox_login, command):
    """Written with the site-check vocabulary (testinfra's Host on the run's own login connection,
    docs/site-checks.md): the name resolves in the user's shell, to a file, that the user may execute. Only the
    user's PATH counts (no fallback to /sbin)."""
    try:
        path = slurmflox_login.find_command(command, extrapaths=())
    except ValueError:
        path = ""
    found = slurmflox_login.file(path) if path.startswith("/") else None
    is_file = found is not None and found.is_file
    runs = is_file and found is not None and found.is_executable
    requirement(
        runs,
        f"{command} resolves to an executable at the login endpoint",
        f"command -v {command}: {path or 'nothing'}; a file: {is_file}; executable by the user: {runs}",
    )


#: Each worker's file in the run's output directory (run id, node), quoted by run.quoted.
SHARED_FILE = "/shared-%s-%s.txt"
#: How long a reader waits for its writer's file in the shared home (both run in the same step, side by side).
VISIBLE_WITHIN = 30


def test_write_on_one_worker_read_on_another_and_at_login(shared_home, submit, workers, login, run_id):
    """Every worker writes a file that the next worker (in a ring over the whole cohort) reads back, all in ONE
    step (worker i writes, worker i+1 reads, side by side), and the login endpoint reads every file in one
    command. Each file's owner is the reading task's own uid:gid (the submitting user)."""
    if len(workers) < 2:
        pytest.skip("missing capability two-workers: the cohort has fewer than two workers")
    login.run(f"mkdir -p {submit.outdir}").check()
    # this check's own files: a run of the same id killed before (its files left in the run's directory) or another
    # check must never be read as what this step wrote
    own = f"{run_id}-{secrets.token_hex(4)}"

    def path(node: str) -> str:
        return submit.outdir + quoted(SHARED_FILE, own, node)

    def token(node: str) -> str:
        return f"written-on-{node}-{own}"

    pairs = ring(workers)
    writes = ring_case(pairs, lambda me, _reader: f"echo {token(me)} > {path(me)} && echo wrote")
    reads = ring_case(
        [(reader, writer) for writer, reader in pairs],
        lambda _me, writer: (
            f"f={path(writer)}; for _ in $(seq {VISIBLE_WITHIN * 4}); do [ -s $f ] && break; sleep 0.25; done; "
            f'echo "read {writer} $(cat $f) $(stat -c %u:%g $f) $(id -u):$(id -g)"'
        ),
    )
    step = across(submit, workers, f"{writes}; {reads}")
    readers = dict((reader, writer) for writer, reader in pairs)

    def judge(node: str, lines: list[str]) -> str | None:
        writer = readers[node]
        got = [line.split() for line in lines if line.startswith("read ")]
        if "wrote" not in lines:
            return "could not write to the shared home"
        if len(got) != 1 or len(got[0]) != 5 or got[0][2] != token(writer):
            return f"did not read {writer}'s file within {VISIBLE_WITHIN} s: {lines!r}"
        if got[0][3] != got[0][4]:
            return f"{writer}'s file is owned by {got[0][3]}, not by the submitting user {got[0][4]}"
        return None

    problems = step.wrong(judge)
    requirement(
        not problems, "each worker reads the next one's file on the shared home: " + "; ".join(problems), step.result
    )
    at_login = login.run(" && ".join("cat " + submit.outdir + quoted(SHARED_FILE, own, node) for node in workers))
    requirement(
        at_login.ok and at_login.stdout.split() == [token(node) for node in workers],
        "the login endpoint reads every worker's file too",
        at_login,
    )
