"""TR: REST submission through slurmrestd, with the same task-environment contract as sbatch.

Requirement: as the test user, with a token from ``scontrol token``, an ordinary batch script submitted
through the REST API runs on a worker with exactly the task environment TP computes for sbatch (the Flox PATH per
the policy, exactly the allow-listed activation variables, the submitted variables, Slurm's own); the job can be
queried and cancelled through REST; a request without a valid token, or one that names another user, is refused.
Runs where the target file declares ``rest`` (capabilities.py); SKIPs naming the capability where it declares none;
FAILS when declared but slurmrestd does not answer. Requests go through httpx (no hand-written HTTP).

Where the expectations come from (never from slurmrestd's answers about itself):

- the submit-side environment: the ``environment`` this check sends with the job (REST has no submitting shell;
  Slurm passes exactly that list, which is sbatch's ``--export=ALL`` of a shell holding those variables);
- PATH policy, allow-list, activation mode: the target file's ``expect.settings``; the environment's PATH entries
  and values: the runtime provider's record (as in TP, through the same ``task_env_problems``);
- the OpenAPI version: the highest ``/slurm/v0.0.N/job/submit`` the server's own ``/openapi/v3`` lists (or the
  target file's ``rest.version``); states: Slurm's documented job states (CANCELLED after a cancel).
"""

from __future__ import annotations

import re

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.base.waits import job_timeout, poll_last
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.judges.expectations import task_env_problems
from pytest_slurmflox.judges.slurmenv import SlurmFacts, consistency_problems, redirection_problems

from ._capability import EveryWorker, requirement
from ._records import ENVIRON_PROBE, environs, require_flox_runtime, runtimes

pytestmark = [pytest.mark.acceptance, pytest.mark.TR]

SUBMIT_VAR = "SFX_SUBMIT_SIDE"


class Rest:
    """slurmrestd as the test user: base URL, OpenAPI version, the user's token."""

    def __init__(self, url: str, version: str, user: str, token: str) -> None:
        import httpx

        self.url, self.version, self.user, self.token = url, version, user, token
        self.http = httpx.Client(base_url=url, timeout=30)

    def headers(self, user: str | None = None, token: str | None = None) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": user or self.user, "X-SLURM-USER-TOKEN": self.token if token is None else token}

    def path(self, tail: str) -> str:
        return f"/slurm/{self.version}/{tail}"

    def submit(self, job: dict, **auth):
        return self.http.post(
            self.path("job/submit"), json=submit_body(self.version, job), headers=self.headers(**auth)
        )

    def job(self, job_id: str):
        return self.http.get(self.path(f"job/{job_id}"), headers=self.headers())

    def state(self, job_id: str) -> list[str]:
        res = self.job(job_id)
        jobs = res.json().get("jobs") or [] if res.status_code == 200 else []
        state = jobs[0].get("job_state") if jobs else None
        return list(state) if isinstance(state, list) else [str(state)] if state else []

    def wait(self, job_id: str, want: set[str], timeout: float = 120.0) -> list[str]:
        """The job's state once it is one of ``want``, or its last state after ``timeout`` (the check judges it)."""
        return poll_last(
            lambda: self.state(job_id),
            lambda state: bool(set(state) & want),
            what=f"REST job {job_id} in {sorted(want)}",
            timeout=timeout,
            interval=0.5,
        )


def submit_versions(paths) -> list[str]:
    """The data-parser versions whose ``/slurm/v0.0.N/job/submit`` an OpenAPI document's ``paths`` list, oldest
    first (Slurm 26.05: v0.0.42-45; 25.11: v0.0.41-44; 24.11: v0.0.40-42; RELEASE_NOTES)."""
    found = {m.group(1) for path in paths if (m := re.fullmatch(r"/slurm/(v0\.0\.\d+)/job/submit", path))}
    return sorted(found, key=_minor)


def _version(http, declared: str | None, headers: dict[str, str]) -> tuple[str, str]:
    """The highest data-parser version whose job/submit the server documents (or the declared one)."""
    res = http.get("/openapi/v3", headers=headers)
    try:
        paths = res.json().get("paths") or {}
    except ValueError:
        paths = {}
    found = submit_versions(paths)
    if declared:
        return declared, f"declared {declared}; the server lists {found}"
    requirement(bool(found), "slurmrestd documents a job/submit endpoint in /openapi/v3", f"HTTP {res.status_code}")
    return found[-1], f"the server lists {found}"


@pytest.fixture(scope="module")
def rest(target):
    import httpx

    require(target, "rest")
    spec = target.spec.rest
    res = target.login.run(spec.token_command, timeout=30)
    match = re.search(r"SLURM_JWT=(\S+)", res.stdout)
    requirement(res.ok and match is not None, f"`{spec.token_command}` gives the login user a token", res)
    user, token = target.spec.login.user, match.group(1)
    with httpx.Client(base_url=spec.url, timeout=30) as http:
        version, _ = _version(http, spec.version, {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
    client = Rest(spec.url, version, user, token)
    yield client
    client.http.close()


@pytest.fixture(scope="module")
def records(target, workers, expect):
    try:
        return runtimes(target, workers, expect.settings.worker_flox_activate_mode)
    except pytest.skip.Exception as skipped:
        return skipped.msg  # the check first shows, in its own step, whether the declared environment is there


def _home(submit) -> str:
    return submit.login.run('printf %s "$HOME"').check().stdout.strip()


def _minor(version: str) -> int:
    return int(version.rsplit(".", 1)[1])


#: The last data-parser version with the old job description (Slurm 22.05's openapi/v0.0.36..v0.0.38 plugins).
LEGACY_LAST = 38


def _job(submit, node: str, script: str, env: dict[str, str], outdir: str) -> dict:
    """The job description in a version-neutral form; ``submit_body`` shapes it for the server's version."""
    return {
        "name": submit.name,
        "partition": submit.partition,
        **submit.site.job_fields(),  # the site's account, QOS and reservation (slurm.*; siteaccess.py)
        "script": script,
        "required_nodes": [node],
        "current_working_directory": outdir,
        "standard_output": f"{outdir}/%j.out",
        "environment": dict(env),
    }


def submit_body(version: str, job: dict) -> dict:
    """The job/submit request body for the OpenAPI ``version`` the server offers.

    v0.0.39 and later (Slurm 23.02+): the script inside ``job``, ``environment`` a list of ``K=V`` strings,
    ``required_nodes`` a list. v0.0.38 and earlier (Slurm 22.05; upstream SchedMD/slurm
    src/plugins/openapi/v0.0.38/jobs.c ``_op_handler_submit_job_post`` and ``job_params``, and
    src/common/slurm_opt.c ``arg_set_data_environment``): the script at the top level next to ``job`` (an unknown
    key inside ``job`` fails the whole request), ``environment`` a dictionary ("environment must be a
    dictionary"), and ``required_nodes`` disabled, the node list given as ``nodelist`` instead."""
    job = dict(job)
    env, script, nodes = job.pop("environment"), job.pop("script"), job.pop("required_nodes")
    if _minor(version) <= LEGACY_LAST:
        return {"script": script, "job": {**job, "nodelist": ",".join(nodes), "environment": env}}
    return {
        "job": {**job, "script": script, "required_nodes": nodes, "environment": [f"{k}={v}" for k, v in env.items()]}
    }


def _accepted(res) -> str:
    try:
        job_id = res.json().get("job_id")
    except ValueError:
        job_id = None
    requirement(res.status_code == 200 and bool(job_id), "slurmrestd accepted the job", f"{res.status_code} {res.text}")
    return str(job_id)


@pytest.mark.per_worker
def test_rest_job_has_the_sbatch_task_environment(rest, submit, target, workers, records, expect):
    """A REST batch job on every worker: a batch step exists once per job, so it is one job per worker, but all
    are submitted at once, waited for together (one state query per tick for all of them) and their outputs read
    in one command, so the cost does not grow with the cohort. Without a runtime record, a declared environment
    the tasks do not show at all FAILs (as in TP); else the check SKIPs for the missing record."""
    if isinstance(records, str):
        require_flox_runtime(target, submit, workers)
        pytest.skip(records)
    home = _home(submit)
    outdir = submit.made_outdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "USER": rest.user, SUBMIT_VAR: "from-rest"}
    job_ids = {}
    for node in workers:
        job_ids[node] = _accepted(rest.submit(_job(submit, node, f"#!/bin/bash\n{ENVIRON_PROBE}\n", env, outdir)))
        submit.submitted.append(job_ids[node])
    states = submit.wait(*job_ids.values(), timeout=job_timeout())
    ended = {node: rest.state(job_id) for node, job_id in job_ids.items()}
    requirement(
        all("COMPLETED" in state for state in ended.values()),
        f"the REST job on every worker completed (queried through REST): {ended}",
        str(states),
    )
    # the job ids came from REST replies: values, quoted wherever they meet a shell
    out = submit.login.run(" ; ".join(quoted("cat %s/%s.out", outdir, job_id) for job_id in job_ids.values()))
    found = environs(out.stdout)
    s = expect.settings
    facts = SlurmFacts.read(submit.login)
    odd = consistency_problems({node: found[node] for node in workers if node in found}, one_step=False)
    every = EveryWorker(f"[REST] the task environment is the computed one on each of the {len(workers)} workers")
    for node in workers:
        task = found.get(node)
        if not every.holds(node, task is not None, f"the REST job ran on {node} and showed its environment"):
            continue
        foreign = redirection_problems(task, node, facts, submit_dir=None, tmpdir=None) + odd.get(node, [])
        every.holds(node, not foreign, f"on {node} every name Slurm sets has Slurm's value ({'; '.join(foreign)})")
        problems = task_env_problems(
            task,
            env,
            mode="ALL",
            precedence=s.worker_path_precedence,
            allow_list=s.worker_env_exports,
            runtime=records[node],
        )
        every.holds(
            node, not problems, f"the task environment on {node} is exactly the computed one ({'; '.join(problems)})"
        )
    every.settle(out)


def test_rest_job_can_be_cancelled(rest, submit, workers):
    outdir = submit.made_outdir()
    env = {"PATH": "/usr/bin:/bin"}
    job_id = _accepted(rest.submit(_job(submit, workers[0], "#!/bin/bash\nsleep 300\n", env, outdir)))
    submit.submitted.append(job_id)
    rest.wait(job_id, {"RUNNING"}, timeout=job_timeout())
    res = rest.http.delete(rest.path(f"job/{job_id}"), headers=rest.headers())
    requirement(
        res.status_code == 200, f"DELETE job {job_id} through REST is accepted", f"{res.status_code} {res.text}"
    )
    state = rest.wait(job_id, {"CANCELLED"}, timeout=job_timeout())  # KillWait is within a pass
    requirement("CANCELLED" in state, f"REST-cancelled job {job_id} is CANCELLED", str(state))


@pytest.mark.parametrize("case", ["no-token", "bad-token", "other-user"])
def test_request_without_valid_token_or_for_another_user_is_refused(case, rest, submit, workers):
    outdir = submit.made_outdir()
    job = _job(submit, workers[0], "#!/bin/bash\n/bin/true\n", {"PATH": "/usr/bin:/bin"}, outdir)
    if case == "no-token":
        body = submit_body(rest.version, job)
        res = rest.http.post(rest.path("job/submit"), json=body, headers={"X-SLURM-USER-NAME": rest.user})
    elif case == "bad-token":
        head, _, sig = rest.token.rpartition(".")
        forged = head + "." + ("A" if sig[:1] != "A" else "B") + sig[1:]  # same claims, wrong signature
        res = rest.submit(job, token=forged)
    else:
        res = rest.submit(job, user="root")  # the test user's token, naming another user
    try:
        job_id = res.json().get("job_id")
    except ValueError:
        job_id = None
    if job_id:
        submit.submitted.append(str(job_id))
    # slurmrestd itself answers 401 to a request without a token; with SLURM_JWT=daemon it passes a token on, and
    # slurmctld refuses a forged one or one naming another user (slurmrestd: HTTP 511, "Protocol authentication
    # error"): either way an authentication refusal, and no job
    refused = res.status_code in (401, 403) or (res.status_code >= 400 and "authentication" in res.text.lower())
    what = "HTTP 401/403, or an authentication error"
    if not refused and _minor(rest.version) <= LEGACY_LAST and not job_id and _dropped(res):
        # Slurm 22.05 (v0.0.38 and older): slurmctld refuses an RPC that fails authentication by closing the
        # connection without an answer (its log: "Protocol authentication error"), which slurmrestd reports as
        # HTTP 500 with error 5005 "Zero Bytes were transmitted or received". That alone could be any broken
        # connection: the same request with the user's own valid token must then be accepted (the token is the
        # only difference, and the controller is up).
        control = rest.submit(job)
        control_id = _job_id(control)
        if control_id:
            submit.submitted.append(control_id)
        refused = control.status_code == 200 and bool(control_id)
        what = (
            f"Slurm 22.05 ({rest.version}): the controller drops the connection (HTTP 500, error 5005) and the same "
            f"request with the valid token is accepted (HTTP {control.status_code}, job {control_id or 'none'})"
        )
    requirement(
        refused and not job_id,
        f"[{case}] slurmrestd refuses the request as unauthenticated ({what})",
        f"HTTP {res.status_code}: {res.text[:500]}",
    )


def _job_id(res) -> str:
    try:
        job_id = res.json().get("job_id")
    except ValueError:
        job_id = None
    return str(job_id) if job_id else ""


def _dropped(res) -> bool:
    """slurmrestd 22.05's answer when slurmctld closed the connection without a reply (error 5005)."""
    try:
        errors = res.json().get("errors") or []
    except ValueError:
        return False
    return res.status_code == 500 and any(isinstance(e, dict) and e.get("error_code") == 5005 for e in errors)
