"""TP: task-environment provenance across Slurm's export modes, on every worker.

Requirement: whatever export mode the user picks (default, ALL, NONE, NIL, a variable list), for srun steps and
batch scripts alike, a task's environment is exactly: the submit-side variables that mode passes, with their
values; PATH with the environment's own entries placed per WORKER_PATH_PRECEDENCE; exactly the allow-listed
activation variables with the values the environment defines; and the variables Slurm itself sets (the documented
list in expectations.py), each with Slurm's own value (pytest_slurmflox/judges/slurmenv.py: no ``SLURM_CONF``-like
redirection, and the same Slurm-set names and job-wide values on every worker). Any other added or changed variable
FAILS, naming it. A command present both in the
environment and in the base image resolves as the policy says.

Where the expectations come from (never from the task profile the worker wrote):

- the submit-side environment: captured on the login endpoint in the same shell, just before submitting;
- the values Slurm sets for SLURM_CONF and TMPDIR: the login endpoint's ``scontrol show config`` (the controller's);
- export semantics and Slurm's own variables: expectations.py (our code, documented in docs/evidence-table.md);
  ``--export=NIL``'s by the version the cluster reports (see NIL_SINCE);
- the user's login variables a batch job may carry (sbatch with NONE or a variable list implies --get-user-env,
  sbatch(1)): a reference computed in the same job on the same worker by what su(1) and the login shell give
  (pytest_slurmflox/judges/loginenv.py); a variable that is not the reference's, name and value, still FAILS;
- PATH policy, allow-list, activation mode: the target file's ``expect.settings``;
- the environment's PATH entries, the executables in them and the values its activation defines: the runtime
  provider's record of the realized generation, read through the worker pool on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_slurmflox.base.run import Result, command_line, quoted
from pytest_slurmflox.base.waits import job_timeout
from pytest_slurmflox.judges.expectations import passes_through, task_env_problems
from pytest_slurmflox.judges.loginenv import LOGIN_PROBE, implies_user_env, login_origin
from pytest_slurmflox.judges.slurmenv import SlurmFacts, consistency_problems, redirection_problems
from pytest_slurmflox.model.declared import EXPORTS, MODE, PRECEDENCE

from ._capability import EveryWorker, declared, requirement
from ._marks import on_each, per_node, slurm_version_tuple
from ._records import ENVIRON_PROBE, SUBMIT_PROBE, environs, require_flox_runtime, runtimes
from ._slurm_reasons import lost_scripts

pytestmark = [pytest.mark.acceptance, pytest.mark.TP]

SUBMIT_VAR = "SFX_SUBMIT_SIDE"
MODES = ("default", "ALL", "NONE", "NIL", "VARLIST")


def _export_args(mode: str) -> tuple[str, ...]:
    """srun's and sbatch's ``--export`` for ``mode`` as arguments (none for Slurm's default)."""
    if mode == "default":
        return ()
    return (f"--export={SUBMIT_VAR}",) if mode == "VARLIST" else (f"--export={mode}",)


#: ``--export=NIL`` is new in Slurm 23.02. An older srun/sbatch accepts it and reads NIL as a variable list naming one
#: variable, NIL (measured on Debian bookworm's 22.05.8), so what a user of that
#: Slurm gets from ``--export=NIL`` is that variable list's environment: nothing from the submit side.
NIL_SINCE = (23, 2)


@dataclass(frozen=True)
class Semantics:
    """What ``--export=<mode>`` means on the cluster under test, decided by the version it reports."""

    mode: str  #: the export semantics the expectation is computed with (expectations.passes_through)
    varlist: tuple[str, ...]
    label: str  #: how the evidence names it


def _semantics(mode: str, target) -> Semantics:
    if mode == "NIL":
        version = target.slurm.version()
        if slurm_version_tuple(version) < NIL_SINCE:
            label = f"NIL, which Slurm {version} (sinfo --version; NIL is 23.02+) reads as the variable list NIL"
            return Semantics("VARLIST", ("NIL",), label)
    return Semantics(mode, (SUBMIT_VAR,), mode)


def _judge(kind: str, sem: Semantics, found: dict, workers, records, expect, facts, *evidence) -> None:
    mode = sem.label
    submit_env = found.get("SUBMIT")
    requirement(submit_env is not None, f"[{kind} {mode}] the submit-side environment was captured", *evidence)
    s = expect.settings
    logins = _login_environments(kind, sem, found, workers, *evidence)
    # the user's login variables (--get-user-env) are the login environment's, not Slurm's: judged by task_env_problems
    tasks = {
        node: {k: v for k, v in found[node].items() if k not in login_origin(found[node], logins.get(node))}
        for node in workers
        if node in found
    }
    # the names Slurm sets are judged too (slurmenv.py): redirections against the cluster's configuration, and the
    # same Slurm-set names and job-wide values on every worker
    odd = consistency_problems(tasks, one_step=kind == "srun", step_nodes=len(workers))
    tmpdir = submit_env.get("TMPDIR") if passes_through(sem.mode, "TMPDIR", sem.varlist) else None
    every = EveryWorker(
        f"[{kind} {mode}] the task environment is the computed one on each of the {len(workers)} workers"
    )
    for node, task in tasks.items():
        problems = redirection_problems(task, node, facts, submit_dir=submit_env.get("PWD"), tmpdir=tmpdir)
        problems += odd.get(node, [])
        every.holds(node, not problems, f"on {node} every name Slurm sets has Slurm's value ({'; '.join(problems)})")
    for node in workers:
        task = found.get(node)
        if not every.holds(node, task is not None, f"a task ran on {node} and showed its environment"):
            continue
        problems = task_env_problems(
            task,
            submit_env,
            mode=sem.mode,
            precedence=s.worker_path_precedence,
            allow_list=s.worker_env_exports,
            runtime=records[node],
            varlist=sem.varlist,
            login=logins.get(node),
        )
        every.holds(
            node, not problems, f"the task environment on {node} is exactly the computed one ({'; '.join(problems)})"
        )
    every.settle(*evidence)


def _login_environments(kind: str, sem: Semantics, found: dict, workers, *evidence) -> dict[str, dict[str, str]]:
    """Per worker, the user's login environment computed there (loginenv.LOGIN_PROBE), when this submission implies
    --get-user-env (sbatch with NONE or a variable list); else none."""
    if not implies_user_env(kind, sem.mode):
        return {}
    missed = [node for node in workers if f"{node}+login" not in found]
    requirement(
        not missed,
        f"[{kind} {sem.label}] the user's login environment was computed on every worker (sbatch with NONE or a "
        f"variable list implies --get-user-env); not on {', '.join(missed)}",
        *evidence,
    )
    return {node: found[f"{node}+login"] for node in workers}


@pytest.fixture(scope="module")
def slurm_facts(target) -> SlurmFacts:
    return SlurmFacts.read(target.login)


@pytest.fixture(scope="module")
def records(target, workers, expect):
    try:
        found = runtimes(target, workers, expect.settings.worker_flox_activate_mode)
    except pytest.skip.Exception as skipped:
        return skipped.msg  # each check first shows, in its own step, whether the declared environment is there at all
    declared(target, MODE)  # after the capability: a target without a runtime record SKIPs naming that
    return found


def _realized(records, target, submit, workers) -> dict:
    """The runtime records; without any: FAIL when the declared environment is not realized, else SKIP."""
    if isinstance(records, str):
        require_flox_runtime(target, submit, workers)
        pytest.skip(records)
    return records


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.per_worker
def test_srun_task_environment(mode, submit, target, workers, records, expect, slurm_facts):
    records = _realized(records, target, submit, workers)
    declared(target, PRECEDENCE, EXPORTS)
    sem = _semantics(mode, target)
    n = len(workers)
    srun = ["-J", submit.name, *submit.placement, f"-N{n}", f"-n{n}", "--ntasks-per-node=1"]
    srun += ["-w", ",".join(workers), *_export_args(mode), "/bin/bash", "-c", ENVIRON_PROBE]
    line = f"export {SUBMIT_VAR}=from-login; {SUBMIT_PROBE}" + command_line("srun", srun)
    res = submit.login.run(line, timeout=job_timeout())  # one step, one task per worker
    requirement(res.ok, f"[srun {sem.label}] the step ran on every worker", res)
    _judge("srun", sem, environs(res.stdout), workers, records, expect, slurm_facts, res)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.per_worker
def test_sbatch_task_environment(mode, submit, target, workers, records, expect, slurm_facts):
    records = _realized(records, target, submit, workers)
    declared(target, PRECEDENCE, EXPORTS)
    sem = _semantics(mode, target)
    script = f"#!/bin/bash\n{ENVIRON_PROBE}\n"
    if implies_user_env("sbatch", sem.mode):
        script += LOGIN_PROBE  # what --get-user-env may have loaded (loginenv.py)
    outdir = submit.made_outdir()  # a plain path: quoted below like any value
    path = f"{outdir}/tp-{mode}.sh"
    submit.login.run("cat >", path, input=script).check()
    options = ["-J", submit.name, *submit.placement, f"--output={outdir}/%j.out", *_export_args(mode)]

    def on(nodes: list[str]) -> tuple[Result, list[str], dict, Result]:
        """One batch job on each of ``nodes`` from one login shell (its submit side captured first); their
        states and outputs (all in one command: one per job grew with the cohort)."""
        sbatch = " ".join(command_line("sbatch --parsable -N1", [*options, "-w", node, path]) + ";" for node in nodes)
        res = submit.login.run(f"export {SUBMIT_VAR}=from-login; {SUBMIT_PROBE}{sbatch}").check()
        jobs = [line.split(";")[0] for line in res.stdout.splitlines() if line.strip() and "|" not in line]
        submit.submitted.extend(jobs)
        requirement(len(jobs) == len(nodes), f"[sbatch {mode}] one batch job per worker was accepted", res)
        states = submit.wait(*jobs)
        out = submit.login.run(" ; ".join(quoted("cat %s/%s.out", outdir, job) for job in jobs))
        return res, jobs, states, out

    res, jobs, states, out = on(list(workers))
    # a job whose script Slurm itself lost before running it (a race in slurmd: _slurm_reasons.py) ran nothing of
    # ours: its worker gets one more job from a new login shell, judged against that shell's submit side
    lost = [job for job in jobs if states[job].state == "FAILED" and job in lost_scripts(out.stdout)]
    again = [workers[jobs.index(job)] for job in lost]
    rounds = [(res, jobs, states, out, [w for w in workers if w not in again])]
    if lost:
        rounds.append((*on(again), again))
    for sub, sub_jobs, sub_states, sub_out, nodes in rounds:
        for job in sub_jobs:
            if job not in lost:
                requirement(
                    sub_states[job].state == "COMPLETED",
                    f"[sbatch {mode}] batch job {job} completed",
                    str(sub_states[job]),
                )
        found = environs(sub.stdout)
        found.update(environs(sub_out.stdout))
        lost_note = [f"Slurm lost the script of job {', '.join(lost)} before running it (slurmd's race): resubmitted"]
        _judge("sbatch", sem, found, nodes, records, expect, slurm_facts, sub, sub_out, *(lost_note if lost else []))


@pytest.mark.per_worker
def test_command_in_environment_and_image_resolves_per_policy(submit, workers, records, expect, target):
    """For every executable the provider recorded in the environment's PATH entries that the base image also has,
    ``command -v`` in a task resolves to the copy the policy picks, on every worker."""
    records = _realized(records, target, submit, workers)
    declared(target, PRECEDENCE)
    scripts = []
    for node, rt in records.items():
        pairs = " ".join(quoted("%s/%s", entry, name) for entry, names in rt.bin_entries.items() for name in names)
        scripts.append(f"{quoted('%s', node)}) set -- {pairs};;")
    script = (
        f'case "$SLURMD_NODENAME" in {" ".join(scripts)} esac; for f in "$@"; do n=${{f##*/}}; '
        'for b in /usr/local/bin /usr/bin /bin; do if [ -x "$b/$n" ]; then '
        'printf \'DUP %s %s %s\\n\' "$n" "$f" "$(command -v "$n")"; break; fi; done; done'
    )
    res = on_each(submit, workers, script)
    seen = per_node(res)
    if not any(line.startswith("DUP ") for lines in seen.values() for line in lines):
        pytest.skip("missing capability shadowed-command: no command exists both in the environment and the image")
    every = EveryWorker(f"a shadowed command resolves per the PATH policy on each of the {len(workers)} workers")
    prepend = expect.settings.worker_path_precedence == "prepend"
    for node in workers:
        dups = [[*line.split(), "<none>"][:4] for line in seen.get(node, []) if line.startswith("DUP ")]
        every.holds(node, bool(dups), f"{node}: the shadowed command exists there too")
        for _, name, flox_path, resolved in dups:
            if prepend:
                every.holds(node, resolved == flox_path, f"{node}: {name} resolves to the environment's copy (prepend)")
            else:
                every.holds(node, resolved != flox_path, f"{node}: {name} resolves to the base image's copy (append)")
    every.settle(res)
