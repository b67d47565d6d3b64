"""Integration (issue 26, "Must show"): the independent customer cluster, reproduced on the local substrate.

The cluster issue 26 names (Slurm 22.05, a printing site prolog, a closed key directory, ``proctrack/linuxproc``, a
Flox environment declared but no Flox runtime in its tasks) is not reachable from here, so one private local
deployment is made into it:

- Slurm 22.05: the bookworm node image (``--slurmflox-local-suite=bookworm``);
- a printing site prolog and TaskProlog (``--slurmflox-local-site-noise``);
- ``proctrack/linuxproc``: the cluster restarted from a slurm.conf that says so, through a subclass of the cluster
  that changes only that line of the rendered configuration (the test's wrapper, as in test_cgroups_local.py; the
  local substrate itself never chooses linuxproc);
- a closed key directory: on every worker the directories holding the munge key (``/etc/munge``,
  ``/run/slurmflox``) made 0700 by root, so a user cannot even list them;
- no Flox runtime in the tasks: on every worker the TaskProlog replaced by one that gives nothing and no task
  profile (an empty directory over ``/run/flox-task-profile``: no profile initializer runs there), and the target
  rewritten as a customer's (substrate existing: no runtime-provider record) that declares the environment and
  what a customer knows of its Slurm side (the test user, home path, CPUs and memory of a worker), but no image,
  revision or Kubernetes facts.

Then the default acceptance runs against that target as a customer runs it; the verdicts are the run's own group
table (its sign-off summary), each FAIL matched by the JUnit cases that failed. Expected (the bullet): the Slurm
groups PASS; T2 and TP FAIL (declared environment not realized), T3 FAIL (no task profile; and the site TaskProlog
slurm.conf names, handing over to one that exits 0, does not fail closed), T8 FAIL (linuxproc lets
a job's processes outlive it: a real FAIL); T10 does not FAIL; nothing of the run is left in the queue. TR is the
exception, and the bullet is wrong there: its REST task-environment check FAILs for the same unrealized
environment as TP (it SKIPped for the missing runtime record before), while its REST submission checks PASS.
"""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import yaml
from acceptance_helpers import TASK_PROLOG, Run, cluster_of, deployed, group_verdicts, run_pytest, slurm_2205_config

from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates.local import LocalSubstrate, cgroups, slurmconf
from pytest_slurmflox.substrates.local.cluster import LocalCluster

pytestmark = pytest.mark.integration

SUITE = "bookworm"
OPTIONS = (f"--slurmflox-local-suite={SUITE}", "--slurmflox-local-site-noise")
WORKERS = ("worker1", "worker2")
KEY_DIRS = ("/etc/munge", "/run/slurmflox")
SLURM_GROUPS = ("T4", "T5", "T6", "T7", "T9", "TI", "TA", "TD")
FAILING_GROUPS = ("T2", "T3", "TP", "T8", "TR")
PROFILE_ROOT = "/run/flox-task-profile"


class LinuxprocCluster(LocalCluster):
    """The customer's process tracking: ``proctrack/linuxproc`` (a job's processes found by parentage only)."""

    def cluster_conf(self, support: cgroups.Support) -> slurmconf.ClusterConf:
        return dataclasses.replace(super().cluster_conf(support), proctrack="proctrack/linuxproc")


def _restart_with_linuxproc(workdir, common: tuple[str, ...]) -> None:
    port = next(c.split("=", 1)[1] for c in common if c.startswith("--slurmflox-login-ssh-port="))
    cli = {"WORKDIR": str(workdir), "LOGIN_SSH_PORT": port, "LOCAL_SUITE": SUITE}
    settings = resolve(cli=cli, substrate="local").settings
    cluster = LinuxprocCluster(settings, Workdir(workdir), lambda line: print(f"[local] {line}"), site_noise=True)
    LocalSubstrate(cluster).up()


def _make_it_the_customers(workdir) -> None:
    """On every worker, as root: the key directories closed, a TaskProlog that gives the task nothing, no task
    profile."""
    empty, nothing = "/tmp/.sfx-empty-prolog.sh", "/tmp/.sfx-no-profile"
    closing = " && ".join(f"chmod 0700 {d}" for d in KEY_DIRS)
    for worker in WORKERS:
        runner = cluster_of(workdir, LOCAL_SUITE=SUITE).node_runner(worker)
        done = runner.run(
            f"{closing} && printf '#!/bin/sh\\nexit 0\\n' > {empty} && chmod 755 {empty} && "
            f"mount --bind {empty} {TASK_PROLOG} && mkdir -p {nothing} && mount --bind {nothing} {PROFILE_ROOT} && "
            f"stat -c '%n %U %a' {' '.join(KEY_DIRS)}"
        )
        assert done.ok, done.describe()
        print(f"[{worker}] {done.stdout}")


def _customer_target(home, workdir):
    """The deployment described as a customer's: no runtime-provider record, the declared environment kept, and the
    Slurm-side facts a customer knows (its test user under ``identity``, home path, a worker's CPUs and memory)."""
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    settings = doc["expect"]["settings"]
    keep = ("WORKER_FLOX_ENV", "WORKER_FLOX_GENERATION", "WORKER_FLOX_ACTIVATE_MODE", "WORKER_PATH_PRECEDENCE")
    keep += ("WORKER_HOME_PATH", "WORKER_CPUS", "WORKER_MEM_MB")
    doc.update(substrate="existing", name="customer-2205")
    for key in ("deployment", "workdir"):
        doc.pop(key, None)
    doc["expect"] = {
        "settings": {k: settings[k] for k in keep} | {"WORKER_ENV_EXPORTS": settings.get("WORKER_ENV_EXPORTS", "")}
    }
    path = home / "customer-2205.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def customer(tmp_path_factory):
    with deployed(tmp_path_factory, "customer2205", "-m", "T5", options=OPTIONS) as (home, workdir, common, first):
        assert first.rc == 0 and first.cases, first.output[-4000:]
        _restart_with_linuxproc(workdir, common)
        _make_it_the_customers(workdir)
        target = _customer_target(home, workdir)
        t0 = time.monotonic()
        run = run_pytest(home, "-m", "acceptance", f"--slurmflox-target={target}")
        print(f"[customer] acceptance as a customer: {time.monotonic() - t0:.1f}s, exit {run.rc}")
        print(run.output[-8000:])
        _print_node_states(workdir, sorted(set(re.findall(r"(\d+)=PENDING", run.messages()))))
        yield home, workdir, run


def _print_node_states(workdir, pending: list[str]) -> None:
    """The workers' states and reasons after the run, and what slurmctld logged about them and about the jobs a
    failed check saw pending (evidence for a verdict that a node's state decided)."""
    sub = cluster_of(workdir, LOCAL_SUITE=SUITE)
    states = sub.node_runner("login").run("sinfo -N -h -o '%N %T %E %H'")
    jobs = "".join(f"|JobId={job}[^0-9]" for job in pending)
    logged = sub.node_runner("ctl").run(
        f"grep -hiE 'drain|kill task|not responding|set node|down|reserv|epilog{jobs}' /var/log/slurm/slurmctld.log"
        " | tail -80"
    )
    print(f"[customer] node states:\n{states.stdout}{states.stderr}\n[customer] slurmctld:\n{logged.stdout}")


def _group_of(case: str) -> str:
    """``test_t05_interactive::...`` -> ``T5``; ``test_tp_provenance::...`` -> ``TP``."""
    found = re.match(r"test_t(\d+|[a-z]+)_", case)
    assert found, case
    tag = found.group(1)
    return f"T{int(tag)}" if tag.isdigit() else f"T{tag.upper()}"


def failures_by_group(run: Run) -> dict[str, dict[str, str]]:
    """The JUnit cases that failed or errored, by group: group -> case -> message."""
    found: dict[str, dict[str, str]] = {}
    for case, (outcome, message) in run.cases.items():
        if outcome in ("failure", "error"):
            found.setdefault(_group_of(case), {})[case] = message
    return found


def test_the_cluster_is_the_customers(customer):
    _, workdir, _ = customer
    settings = slurm_2205_config(workdir, LOCAL_SUITE=SUITE)
    assert settings.get("ProctrackType") == "proctrack/linuxproc", settings
    assert settings.get("TaskProlog", "").startswith("/etc/slurm/site/"), settings
    sub = cluster_of(workdir, LOCAL_SUITE=SUITE)
    login = sub.node_runner("login", sub.settings.test_user)
    for worker in WORKERS:
        task = login.run(f"cd && srun -N1 -w {worker} sh -c 'echo FLOX_ENV=${{FLOX_ENV:-none}}; ls /etc/munge'")
        # the site's prolog prints; the task has no Flox runtime; the key directory cannot be listed
        assert "site: welcome to the cluster" in task.stdout, task.describe()
        assert "FLOX_ENV=none" in task.stdout, task.describe()
        assert not task.ok and "Permission denied" in task.stderr, task.describe()


def test_slurm_groups_pass_t2_t3_tp_t8_fail_t10_does_not(customer):
    _, _, run = customer
    verdicts = group_verdicts(run.output)  # the run's own group table: SKIP and NOT RUN count, not only FAIL
    failed = failures_by_group(run)
    print(f"group table: {verdicts}")
    for group, cases in sorted(failed.items()):
        for case, message in sorted(cases.items()):
            said = re.findall(r"requirement not met: [^\n]*", message) or [message[:300]]
            print(f"{group} FAIL {case}: {said[0][:400]}")
    assert run.cases and verdicts, run.output[-4000:]
    # the table fails exactly the groups whose cases failed
    assert {g for g, v in verdicts.items() if v == "FAIL"} == set(failed), (verdicts, sorted(failed))
    assert {g: verdicts.get(g) for g in SLURM_GROUPS} == dict.fromkeys(SLURM_GROUPS, "PASS"), verdicts
    assert {g: verdicts.get(g) for g in FAILING_GROUPS} == dict.fromkeys(FAILING_GROUPS, "FAIL"), verdicts
    assert verdicts.get("T10") in ("PASS", "NOT APPLICABLE", "NOT RUN", "SKIP"), verdicts
    assert run.rc != 0, run.output[-3000:]
    # each FAIL for the customer cluster's own reason, on every worker
    unrealized = "realized on every worker: worker1: no FLOX_ENV"
    for group in ("T2", "TP", "TR"):
        assert all(unrealized in m and "worker2: no FLOX_ENV" in m for m in failed[group].values()), failed[group]
    # T3: no profile on any worker: every file is missing on each (the reading's own answers: cat failed, both workers)
    missing = [re.compile(rf"\|{w}\|\d+\|1\|\|cat: [^|\n]*: No such file or directory") for w in WORKERS]
    closed = {c: m for c, m in failed["T3"].items() if "fails_closed" in c}
    profile = {c: m for c, m in failed["T3"].items() if c not in closed}
    assert profile and all(
        "all profile files present" in m and all(r.search(m) for r in missing) for m in profile.values()
    ), failed["T3"]
    # the target declares no runtime.task_prolog: the site TaskProlog its slurm.conf names is run on every worker,
    # and (handing over to a prolog that exits 0) it starts a task without a profile: FAIL naming each worker
    assert len(closed) == 1 and all(f"{w}: TaskProlog /etc/slurm/site/" in m for w in WORKERS for m in closed.values())
    assert all("exit 0 (a task would start without a valid profile)" in m for m in closed.values()), closed
    assert any("detached" in case for case in failed["T8"]), failed["T8"]  # linuxproc: a setsid process escapes
    rest = [case for case in run.outcomes("passed") if case.startswith("test_tr_rest::")]
    assert any("cancelled" in case for case in rest), rest  # REST submission itself works


def test_nothing_of_the_run_is_left_in_the_queue(customer):
    _, workdir, run = customer
    assert run.cases, run.output[-3000:]
    login = cluster_of(workdir, LOCAL_SUITE=SUITE).node_runner("login")
    left = ""
    for _ in range(30):  # a job still COMPLETING is ending, not left: give it a few seconds
        listing = login.run("squeue -h -a -o 'QUEUED %i %u %j %T'")
        assert listing.ok, listing.describe()
        left = "\n".join(line for line in listing.stdout.splitlines() if line.startswith("QUEUED "))
        if not left:
            break
        time.sleep(1)
    assert left == "", left
