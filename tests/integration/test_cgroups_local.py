"""Integration: local workers contained like pods (cgroups), T8 with teeth, and nothing of it left after destroy.

One private deployment, provisioned the way a user does (``pytest --slurmflox-up=local -m T8`` in a subprocess).
The containment is observed from the host (cgroup files, the node's processes seen from a root shell in the node),
not only through Slurm. Then two mutations restart the cluster with a weaker configuration, through a subclass
of the substrate that changes only the rendered configuration (the test's wrapper, not a production hook), and
T8 must FAIL the check that configuration defeats; after restoring, T8 passes again. Last,
``pytest --slurmflox-destroy`` must leave no cgroup of the cluster under any hierarchy.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml
from acceptance_helpers import Run, destroy, private_deployment, run_pytest

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates.local import LocalSubstrate, cgroups, slurmconf
from pytest_slurmflox.substrates.local.cluster import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home, workdir, common = private_deployment(tmp_path_factory, "cgroups")
    first = run_pytest(home, "--slurmflox-up=local", "-m", "T8", *common)
    info = {"home": home, "workdir": workdir, "common": common, "first": first}
    try:
        yield info
    finally:
        if not info.get("destroyed"):
            print(destroy(home, common)[-2000:])


def _settings(deployment):
    port = next(c.split("=", 1)[1] for c in deployment["common"] if c.startswith("--slurmflox-login-ssh-port="))
    cli = {"WORKDIR": str(deployment["workdir"]), "LOGIN_SSH_PORT": port}
    return resolve(cli=cli, substrate="local").settings


def _substrate(deployment, cls: type[LocalCluster] = LocalCluster) -> LocalSubstrate:
    """The substrate over a cluster of class ``cls`` (a mutation below changes one of the cluster's configs)."""
    return LocalSubstrate(
        cls(_settings(deployment), Workdir(deployment["workdir"]), lambda line: print(f"[local] {line}"))
    )


class PgidWorkers(LocalCluster):
    """Mutation: process tracking by process group, as before containment (setsid escapes it)."""

    def cluster_conf(self, support: cgroups.Support) -> slurmconf.ClusterConf:
        return dataclasses.replace(super().cluster_conf(support), proctrack="proctrack/pgid")


class UnconstrainedCores(LocalCluster):
    """Mutation: ConstrainCores=no (task/affinity still binds, but the cpuset no longer confines)."""

    def cgroup_conf(self, support: cgroups.Support) -> slurmconf.CgroupConf:
        return dataclasses.replace(super().cgroup_conf(support), constrain_cores=False)


class UnconstrainedMemory(LocalCluster):
    """Mutation: ConstrainRAMSpace=no and ConstrainSwapSpace=no (Slurm still accounts --mem, nothing enforces it)."""

    def cgroup_conf(self, support: cgroups.Support) -> slurmconf.CgroupConf:
        return dataclasses.replace(super().cgroup_conf(support), constrain_ram=False, constrain_swap=False)


def _t8(deployment, *select: str) -> Run:
    return run_pytest(deployment["home"], "-m", "T8", *select, *deployment["common"], timeout=900)


def _failed(run: Run) -> list[str]:
    return run.outcomes("failure") + run.outcomes("error")


def _t8_under(deployment, mutation: type[LocalCluster], *select: str) -> Run:
    """T8 (``select``) run on the cluster restarted with ``mutation``; the healthy cluster is back afterwards."""
    _substrate(deployment, mutation).up()
    try:
        return _t8(deployment, *select)
    finally:
        _substrate(deployment).up()


def test_t8_passes_on_a_healthy_local_cluster(deployment):
    run = deployment["first"]
    print(run.output[-3000:])
    assert _failed(run) == [] and run.outcomes("skipped") == [], run.output[-6000:]
    passed = run.outcomes("passed")
    for check in (
        "test_no_process_of_a_job_survives_it[detached-ended]",
        "test_no_process_of_a_job_survives_it[child-cancelled]",
        "test_job_is_confined_to_its_allocated_cpus",
        "test_job_beyond_its_memory_is_killed_out_of_memory",
        "test_request_beyond_a_worker_is_refused_for_that_reason[memory]",
    ):
        assert any(p.endswith("::" + check) for p in passed), (check, passed)


def test_every_node_lives_in_its_own_cgroups_below_ours(deployment):
    sub = _substrate(deployment)
    recorded = sub.cluster.read_state()["cgroups"]
    assert recorded["unusable"] == {}, recorded  # measured on this host: freezer, cpuset and memory all work
    own_memory = cgroups.own_cgroup("memory")
    assert own_memory is not None
    for controller, base in recorded["bases"].items():
        own = cgroups.own_cgroup(controller)
        assert Path(base).parent == cgroups.v1_mounts()[controller] / own.lstrip("/"), (controller, base)
        for name in ("ctl", "login", "worker1", "worker2"):
            init = sub.cluster.node(name).init_pid()
            line = next(li for li in Path(f"/proc/{init}/cgroup").read_text().splitlines() if f":{controller}:" in li)
            assert line.endswith(f"/slurmflox-{sub.cluster.prefix}/{name}"), (controller, name, line)
    # inside a node, its cgroups are the root of what Slurm sees (cgroup namespace + its own mounts)
    seen = sub.cluster.node_runner("worker1").run("nsenter -t 1 -C cat /proc/1/cgroup; ls /sys/fs/cgroup")
    assert seen.ok, seen.describe()
    assert "freezer:/\n" in seen.stdout and "memory:/\n" in seen.stdout, seen.stdout
    assert {"cpuset", "freezer", "memory"} <= set(seen.stdout.split()), seen.stdout


def test_setsid_daemon_of_a_job_does_not_survive_it(deployment):
    """``setsid sleep 600 &`` in a batch job: seen in the node while the job runs, gone once it ended."""
    sub = _substrate(deployment)
    doc = sub.target()["login"]
    login = SSHRunner("127.0.0.1", doc["port"], doc["user"], Path(doc["key"]), Path(doc["known_hosts"]))
    marker = f"sfxsetsid{time.monotonic_ns() % 10**8}"
    look = f"pgrep -af -- '[s]{marker[1:]}' || true"  # the bracket keeps pgrep's own shell from matching
    node = sub.cluster.node_runner("worker1")
    try:
        script = f"#!/bin/bash\nsetsid bash -c 'exec -a {marker} sleep 600' </dev/null >/dev/null 2>&1 &\nsleep 3\n"
        job = login.run("cd /tmp && sbatch --parsable -w worker1 -o /dev/null", input=script).check().stdout.strip()
        seen = ""
        for _ in range(50):
            seen = node.run(look).stdout
            if marker in seen:
                break
            time.sleep(0.1)
        assert marker in seen, "control: the daemon is visible in the node while the job runs"
        for _ in range(100):
            state = login.run(f"squeue -h -t all -j {job} -o %T").stdout.strip()
            if state == "COMPLETED":
                break
            time.sleep(0.2)
        assert state == "COMPLETED", state
        left = node.run(look).stdout
        assert marker not in left, f"the setsid daemon survived its job: {left}"
    finally:
        login.close()


def test_proctrack_pgid_fails_t8_setsid_then_restored_passes(deployment):
    run = _t8_under(deployment, PgidWorkers, "-k", "survives_it")
    failed = sorted(f.rsplit("::", 1)[-1] for f in _failed(run))
    # the detached kinds' check FAILs, both endings, naming the setsid daemon (a process group holds the double-forked
    # orphan and the background child: those pass)
    assert failed == [
        "test_no_process_of_a_job_survives_it[detached-cancelled]",
        "test_no_process_of_a_job_survives_it[detached-ended]",
    ], run.output[-4000:]
    said = [m for _, m in run.cases.values() if "no setsid or double-fork process of the ended job survives it" in m]
    assert said and "still runs setsid" in said[0] and "still runs double-fork" not in said[0], run.output[-4000:]
    again = _t8(deployment, "-k", "survives_it")
    assert _failed(again) == [] and len(again.outcomes("passed")) == 4, again.output[-4000:]


def test_constrain_cores_no_fails_t8_cpu_binding_then_restored_passes(deployment):
    run = _t8_under(deployment, UnconstrainedCores, "-k", "confined")
    assert [f.rsplit("::", 1)[-1] for f in _failed(run)] == ["test_job_is_confined_to_its_allocated_cpus"], run.output
    assert any("cannot move itself to a CPU outside its allocation" in m for _, m in run.cases.values()), run.output
    again = _t8(deployment, "-k", "confined")
    assert _failed(again) == [] and again.outcomes("passed"), again.output[-4000:]


def test_constrain_ram_no_fails_t8_memory_limit_then_restored_passes(deployment):
    """The memory check has teeth: with neither RAM nor swap constrained, a 512 MiB buffer in a --mem=64 task is not
    killed, and the verdict names the configuration that let it live."""
    run = _t8_under(deployment, UnconstrainedMemory, "-k", "memory")
    failed = [f.rsplit("::", 1)[-1] for f in _failed(run)]
    assert failed == ["test_job_beyond_its_memory_is_killed_out_of_memory"], run.output[-4000:]
    said = [m for _, m in run.cases.values() if "a task that uses 512 MiB with --mem=64 was not killed" in m]
    # judged against what the cluster configures, the configured values named (pytest_slurmflox/judges/memlimit.py)
    assert said and "ConstrainRAMSpace=no" in said[0] and "ConstrainSwapSpace=no" in said[0], run.output[-4000:]
    again = _t8(deployment, "-k", "memory")
    assert _failed(again) == [] and len(again.outcomes("passed")) == 2, again.output[-4000:]


def test_declared_limitations_skip_their_checks_naming_them(deployment, tmp_path):
    """What a host without a controller gets: the target file names the limitation, the check SKIPs (not PASS)."""
    doc = yaml.safe_load((deployment["workdir"] / "target.yaml").read_text())
    assert not doc.get("limitations")  # this host: every controller works (an empty section is not written)
    why = "local substrate: the cgroup v1 {} controller cannot be used on this host: test"
    doc["limitations"] = {
        "cpu-binding": why.format("cpuset"),
        "memory-limits": why.format("memory"),
        "process-tracking": why.format("freezer"),
    }
    limited = tmp_path / "limited.yaml"
    limited.write_text(yaml.safe_dump(doc))
    run = run_pytest(
        deployment["home"], "-m", "T8", "-k", "confined or memory or survives", f"--slurmflox-target={limited}"
    )
    skipped = {k.rsplit("::", 1)[-1]: m for k, (o, m) in run.cases.items() if o == "skipped"}
    assert set(skipped) == {
        "test_job_is_confined_to_its_allocated_cpus",
        "test_job_beyond_its_memory_is_killed_out_of_memory",
        "test_no_process_of_a_job_survives_it[detached-ended]",
        "test_no_process_of_a_job_survives_it[detached-cancelled]",
    }, run.output[-4000:]
    assert all("controller cannot be used on this host" in m for m in skipped.values()), skipped
    assert "missing capability memory-limits" in skipped["test_job_beyond_its_memory_is_killed_out_of_memory"]
    assert _failed(run) == [], run.output[-4000:]


def test_zz_destroy_leaves_no_cgroup_under_any_hierarchy(deployment):
    sub = _substrate(deployment)
    bases = [Path(p) for p in sub.cluster.read_state()["cgroups"]["bases"].values()]
    assert bases and all(b.is_dir() for b in bases)
    assert cgroups.leftovers(sub.cluster.prefix), "the walk finds the cluster's cgroups while it runs"
    print(destroy(deployment["home"], deployment["common"])[-2000:])
    deployment["destroyed"] = True
    assert cgroups.leftovers(sub.cluster.prefix) == []
    assert not any(b.exists() for b in bases)
