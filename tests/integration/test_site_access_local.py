"""Site access on a real cluster (issue 38 item 2): a target declaring an account, a QOS and an admin reservation
runs every job of the run under them, and uses only the reservation's nodes.

The cluster is this module's own, three workers. On its controller, as a site's admin would: an account the test
user (and root) is associated with (``sacctmgr``), and a reservation of two of the three workers for that user
(``scontrol create reservation ... Flags=IGNORE_JOBS StartTime=now``). The target file is the deployment's own, plus
``slurm.account``, ``slurm.qos``, ``slurm.reservation`` and an ``extra_args`` item, as a customer writes them. A few
groups run (T4 ordinary batch, T5 srun/salloc/steps, T7's early jobs and chains, TR's REST submission): every job of
the run (its pre-flight step included) must show the account, the QOS and the reservation in ``sacct``, and none may
have run on the worker outside the reservation. The cost stays modest: one ``up`` and one run of four groups.
On the same cluster, read-only: the starter file (``--slurmflox-init-target``) from its login, and the doctor
(``--slurmflox-check-target``), healthy and, last, with slurmdbd stopped.

Where the expectations come from: the names this test created on the controller, and the nodes it reserved; what
is judged is Slurm's accounting record of each job, not anything the run says about itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import yaml
from acceptance_helpers import clean_env, deployed, local_substrate, node_sh, run_pytest

from pytest_slurmflox.harness.doctor import doctor
from pytest_slurmflox.harness.starter import init_target

pytestmark = pytest.mark.integration

ACCOUNT, QOS, RESERVATION = "sfxsite", "normal", "sfxhandover"
RESERVED, OUTSIDE = ("worker1", "worker2"), "worker3"
GROUPS = "T4 or T5 or T7 or TR"
RUN_ID = "siteaccess1"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    nothing = ("-k", "sfx_site_access_selects_nothing")  # up only: the run below selects its groups
    with deployed(tmp_path_factory, "siteaccess", *nothing, options=("--slurmflox-compute-replicas=3",)) as recorded:
        yield recorded


@pytest.fixture(scope="module")
def site(deployment):
    """The account, its associations and the reservation, made on the controller; the customer's target file."""
    home, workdir, _, first = deployment
    assert first.rc == 0, first.output[-4000:]
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    user = doc["login"]["user"]
    node_sh(
        workdir,
        "ctl",
        f"sacctmgr -i add account {ACCOUNT} Description=site Organization=site"
        f" && sacctmgr -i add user {user} account={ACCOUNT} && sacctmgr -i add user root account={ACCOUNT}"
        f" && scontrol create reservation ReservationName={RESERVATION} Users={user},root"
        f" Nodes={','.join(RESERVED)} Flags=IGNORE_JOBS StartTime=now Duration=120",
    )
    doc["slurm"] |= {
        "account": ACCOUNT,
        "qos": QOS,
        "reservation": RESERVATION,
        "extra_args": ["--comment=sfx site access"],
    }
    target = home / "site.yaml"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return home, workdir, target, user


def test_every_job_of_the_run_carries_the_account_qos_and_reservation_and_stays_inside_it(site):
    home, workdir, target, user = site
    run = run_pytest(home, f"--slurmflox-target={target}", f"--slurmflox-run-id={RUN_ID}", "-m", GROUPS, timeout=900)
    print(run.output[-3000:])
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]
    assert len(run.outcomes("passed")) >= 8, run.output[-3000:]
    fields = "JobID,JobName%80,Account,QOS,Reservation,NodeList,State"
    out = node_sh(workdir, "ctl", f"sacct -X -n -P -u {user} -S now-2hours -o {fields}")
    jobs = [line.split("|") for line in out.splitlines() if f"sfx-{RUN_ID}-" in line]
    print("\n".join("|".join(job) for job in jobs))
    names = {job[1] for job in jobs}
    assert any("preflight" in n for n in names), names  # the cohort's own step
    assert any("timelimit" in n for n in names), names  # an early job (T7, sbatchchain)
    assert any("salloc" in n for n in names), names  # an allocation (T5)
    assert any("test_rest" in n for n in names), names  # a REST submission (TR: account, qos, reservation fields)
    assert len(jobs) >= 8, jobs
    wrong = [job for job in jobs if job[2:5] != [ACCOUNT, QOS, RESERVATION]]
    assert wrong == [], wrong
    # the cohort is the reservation's nodes (the pre-flight step ran on every worker of it, and only there)
    used = {node for job in jobs for node in _hosts(job[5])}
    assert used == set(RESERVED) and OUTSIDE not in used, used


def _hosts(nodelist: str) -> set[str]:
    """``worker[1-2]``, ``worker[2,1]``, ``worker3`` or ``None assigned`` as node names."""
    hosts: set[str] = set()
    for prefix, ranges, single in re.findall(r"([A-Za-z_-]+)\[([\d,-]+)\]|([A-Za-z_-]+\d+)", nodelist):
        if single:
            hosts.add(single)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            hosts.update(f"{prefix}{i}" for i in range(int(low), int(high or low) + 1))
    return hosts


def test_a_declared_reservation_slurm_does_not_have_fails_the_run_naming_it(site):
    """Declared but broken is FAIL: a target naming a reservation Slurm does not have fails the cohort pre-flight,
    and with it every check, naming the reservation (never a SKIP, never a run on nodes outside any reservation)."""
    home, _, target, _ = site
    doc = yaml.safe_load(target.read_text())
    doc["slurm"]["reservation"] = "sfxnosuch"
    broken = home / "site-nosuch.yaml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_pytest(home, f"--slurmflox-target={broken}", "-m", "T4", timeout=600)
    failed = run.outcomes("failure") + run.outcomes("error")
    assert failed and run.outcomes("passed") == [], run.output[-4000:]
    said = run.messages("failure") + run.messages("error")  # the pre-flight fails in the checks' setup
    assert "slurm.reservation sfxnosuch: Slurm has no such reservation" in said, run.output[-4000:]


def _plugin(home, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """``pytest ARGS`` as a customer runs a verb of the plugin: exit status and lines."""
    argv = [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=home, capture_output=True, text=True, timeout=120, env=env or clean_env())
    lines = (proc.stdout + proc.stderr).splitlines()
    print("\n".join(lines), f"{args[0]} took {time.monotonic() - t0:.1f}s", sep="\n")
    return proc.returncode, lines


def _doctor(home, target, env: dict[str, str] | None = None) -> tuple[int, list[str], float]:
    """``pytest --slurmflox-check-target=FILE`` as a customer runs it: exit status, lines, the doctor's own seconds."""
    rc, lines = _plugin(home, f"--slurmflox-check-target={target}", env=env)
    return rc, lines, float(lines[-1].rsplit("; ", 1)[1].rstrip("s")) if lines else 99.0


def _rows(lines: list[str]) -> dict[str, str]:
    return {line.split()[0].lstrip("*"): line for line in lines if line[:1] in "* " and line[1:2] == "T"}


def _verdict(row: str) -> str:
    """The verdict column of a doctor's row (``*T4    RUN            why``; ``NOT RUN`` is not ``RUN``)."""
    return row[7:21].strip()


def test_a_starter_file_holds_what_the_login_reports_and_the_doctor_reads_it(site, monkeypatch):
    """``--slurmflox-init-target`` against this cluster's login, given as a customer gives it (``user@host:port``;
    the key and the pinned host key in the customer's ssh_config). Expectations: the deployment's own target file
    (the login, its partition, its accounting account, the Slurm version the image was built with), never the
    starter's output. The file holds exactly those, no expectation; the doctor reads it (no FAIL, the groups left
    without expectations NOT RUN naming them, exit 1) and, once the customer declares ``expect`` and ``identity``,
    foresees a sign-off (exit 0). A second init to the same path: one line, exit 4, the file unchanged."""
    home, workdir, _, user = site
    deployed = yaml.safe_load((workdir / "target.yaml").read_text())
    login = deployed["login"]
    customer = home / "customer"
    (customer / ".ssh").mkdir(parents=True)
    (customer / ".ssh" / "config").write_text(
        f"Host {login['host']}\n  IdentityFile {login['key']}\n  UserKnownHostsFile {login['known_hosts']}\n"
    )
    env = clean_env() | {"HOME": str(customer)}
    starter = customer / "site.yaml"
    t0 = time.monotonic()
    init = (f"--slurmflox-init-target={starter}", f"--slurmflox-init-login={user}@{login['host']}:{login['port']}")
    rc, lines = _plugin(customer, *init, env=env)
    assert rc == 0, lines
    written = yaml.safe_load(starter.read_text())
    assert written["login"] == {"host": login["host"], "port": login["port"], "user": user}, written
    assert written["slurm"] == {"partition": deployed["slurm"]["partition"], "version": deployed["slurm"]["version"]}
    assert written["accounting"] == {"account": deployed["accounting"]["account"]}, written
    assert written["substrate"] == "existing" and not {"expect", "identity", "runtime", "rest"} & set(written)
    assert "# identity:" in starter.read_text() and "#   uid:" in starter.read_text()
    rc, lines, _ = _doctor(customer, starter, env)
    rows = _rows(lines)
    assert rc == 1 and not [row for row in rows.values() if _verdict(row) == "FAIL"], lines
    assert all(_verdict(rows[g]) == "RUN" for g in ("T4", "T5", "T6", "T7", "TA")), lines
    blocked = [row for row in rows.values() if row.startswith("*") and _verdict(row) != "RUN"]
    not_run = [row for row in blocked if _verdict(row) == "NOT RUN" and ("expect." in row or "identity." in row)]
    assert blocked and blocked == not_run, lines  # only what the customer has yet to declare
    # the same two functions the options call, in this process (no second pytest start-up: ~3 s each here)
    monkeypatch.setenv("HOME", str(customer))  # the customer's ssh_config
    declared = customer / "site-declared.yaml"
    declared.write_text(starter.read_text() + yaml.safe_dump({k: deployed[k] for k in ("expect", "identity")}))
    said: list[str] = []
    assert doctor(declared, said.append) == 0, said
    before, said = starter.read_bytes(), []
    assert init_target(starter, init[1].split("=", 1)[1], said.append) == 4, said
    assert len(said) == 1 and "exists" in said[0] and starter.read_bytes() == before, said
    print(f"starter, doctor twice, refusal: {time.monotonic() - t0:.1f}s")


def test_the_doctor_foresees_a_run_and_names_accounting_when_slurmdbd_stops(site):
    """Last in the module (it stops slurmdbd, then restarts its node from kept state): on the healthy cluster the
    doctor exits 0 with a line per group within 10 s; with slurmdbd stopped it exits 1 naming accounting (TA FAIL:
    declared, contradicted). Nothing is submitted: the queue holds no job of the doctor's."""
    home, workdir, target, _ = site
    rc, lines, took = _doctor(home, target)
    rows = _rows(lines)
    assert rc == 0, lines
    assert took < 10, lines[-1]
    assert {"T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "TP", "TI", "TA", "TR"} <= set(rows), lines
    assert all(_verdict(rows[g]) == "RUN" for g in ("T4", "TA", "TR")), lines
    assert any(line.strip().startswith("slurm ") and "slurm " in line for line in lines), lines  # scontrol --version
    pool = local_substrate(workdir).pool()
    node_sh(workdir, "db", "kill -TERM $(cat /run/slurmdbd/slurmdbd.pid)")
    try:
        rc, lines, took = _doctor(home, target)
        assert rc == 1, lines
        assert "FAIL" in _rows(lines)["TA"] and "accounting" in _rows(lines)["TA"], lines
        assert "TA" in lines[-1] and took < 40, lines[-1]
    finally:
        pool.restart_service("slurmdbd")
