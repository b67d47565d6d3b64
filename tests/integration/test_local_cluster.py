"""Integration: a real local cluster (Debian's Slurm 24.11 in namespaces), exercised as the test user over SSH.

One module-scoped cluster in a temp work dir with its own namespace prefix and a free loopback port, so it can
never collide with a developer's cluster. Tests run in file order; the last one destroys the cluster and checks
that nothing of it remains.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pytest_slurmflox.base.run import SSHRunner
from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SubstrateUnavailable, proc
from pytest_slurmflox.substrates.local import cgroups

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _progress(line: str) -> None:
    print(f"[local] {line}", flush=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: the local substrate creates namespaces and overlay mounts")
    from pytest_slurmflox.substrates.local import LocalSubstrate, apt
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    try:
        apt.require_root_debian()
    except SubstrateUnavailable as exc:
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("local-cluster")
    settings = resolve(cli={"WORKDIR": str(workdir), "LOGIN_SSH_PORT": str(_free_port())}, substrate="local").settings
    sub = LocalSubstrate(LocalCluster(settings, Workdir(workdir), _progress))
    t0 = time.monotonic()
    sub.cluster.ensure_image()  # the first build takes minutes; not part of the up-time measurement
    _progress(f"image ready in {time.monotonic() - t0:.1f}s: {sub.cluster.image_ref()}")
    t1 = time.monotonic()
    target = sub.up()
    elapsed = time.monotonic() - t1
    _progress(f"MEASURED up-to-all-nodes-idle with the image cached: {elapsed:.2f}s")
    info = {"sub": sub, "target": target, "up_seconds": elapsed, "workdir": workdir}
    try:
        yield info
    finally:
        if not info.get("destroyed"):
            sub.destroy()


@pytest.fixture(scope="module")
def login(cluster):
    t = cluster["target"]["login"]
    runner = SSHRunner("127.0.0.1", t["port"], t["user"], Path(t["key"]), Path(t["known_hosts"]))
    yield runner
    runner.close()


def _ok(result):
    assert result.ok, result.describe()
    return result


def test_up_is_fast_with_cached_image(cluster):
    print(f"up-to-all-nodes-idle: {cluster['up_seconds']:.2f}s (goal < 15 s)")
    assert cluster["up_seconds"] < 60


def test_target_file_describes_the_cluster(cluster):
    sub = cluster["sub"]
    doc = yaml.safe_load((cluster["workdir"] / "target.yaml").read_text())
    assert doc == cluster["target"]
    assert doc["substrate"] == "local" and doc["kubernetes"] is None
    assert doc["slurm"]["partition"] == "all" and re.fullmatch(r"24\.11\.\d+", doc["slurm"]["version"])
    assert re.fullmatch(r"slurmflox-node:trixie@sha256:[0-9a-f]{64}", doc["expect"]["image"])
    assert doc["expect"]["revision"] == sub.cluster.revision_for(sub.cluster.settings)
    assert doc["expect"]["settings"]["WORKER_FLOX_ENV"] == "local/demo"
    assert doc["identity"]["user"] == sub.cluster.settings.test_user
    key = Path(doc["login"]["key"])
    assert key.stat().st_mode & 0o777 == 0o600
    # the target file loads the way the plugin will load it
    from pytest_slurmflox.model.target import load_target

    spec = load_target(cluster["workdir"] / "target.yaml")
    assert spec.expect.revision == doc["expect"]["revision"]


def test_root_ssh_and_host_key_pinned(cluster):
    t = cluster["target"]["login"]
    root = SSHRunner("127.0.0.1", t["port"], "root", Path(t["key"]), Path(t["known_hosts"]))
    try:
        assert _ok(root.run("id -u; hostname")).stdout.split() == ["0", "login"]
    finally:
        root.close()


def test_srun_two_distinct_workers(login):
    res = _ok(login.run("srun -N2 -n2 hostname", timeout=120))
    hosts = res.stdout.split()
    assert len(hosts) == 2 and len(set(hosts)) == 2, res.describe()
    assert all(h.startswith("worker") for h in hosts)


def test_mpi_pmix_ranks_on_two_nodes(login):
    res = _ok(login.run("srun --mpi=pmix -N2 -n2 mpi-hello", timeout=180))
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("mpi-hello"))
    assert len(lines) == 2, res.describe()
    fields = [dict(kv.split("=") for kv in line.split()[1:]) for line in lines]
    assert {f["rank"] for f in fields} == {"0", "1"} and {f["size"] for f in fields} == {"2"}
    assert len({f["host"] for f in fields}) == 2 and {f["sum"] for f in fields} == {"1"}


def test_identity_resolved_on_worker_without_account(cluster, login):
    s = cluster["sub"].cluster.settings
    res = _ok(login.run("srun -N1 -w worker1 id", timeout=60))
    out = res.stdout.strip()
    assert f"uid={s.test_uid}({s.test_user})" in out, out
    assert f"gid={s.test_gid}({s.test_user})" in out, out
    assert f"{s.test_supp_gid}({s.test_supp_group})" in out, out
    # ...and the worker really has no such account of its own
    local = cluster["sub"].cluster.node_runner("worker1").run(f"getent passwd {s.test_user}")
    assert local.exit_status == 2, local.describe()


def test_task_path_starts_with_the_runtime(cluster, login):
    realized = cluster["sub"].cluster.node("worker1").annotations()["realized_path"]
    res = _ok(login.run("srun -N1 bash -c 'echo $PATH; flox-probe; slurmflox-demo'", timeout=60))
    path, probe, demo = res.stdout.splitlines()
    assert path.split(":")[0] == f"{realized}/bin", res.describe()
    assert probe == "flox" and demo == "slurmflox-demo generation 1"
    res = _ok(login.run("srun -N1 --export=NONE /bin/bash -c 'echo $PATH; flox-probe'", timeout=60))
    path, probe = res.stdout.splitlines()
    assert path.split(":")[0] == f"{realized}/bin" and probe == "flox", res.describe()
    # without the TaskProlog the base image's command would answer
    base = cluster["sub"].cluster.node_runner("worker1").run("flox-probe")
    assert base.stdout.strip() == "base"


@pytest.mark.parametrize("export", ["--export=NONE", "--export=FOO=1"])
def test_a_task_given_no_path_finds_the_runtime_first_and_the_image_after(cluster, login, export):
    """Slurm passes no PATH under NONE or a variable list: the TaskProlog gives the environment's entries, then
    the system's default (expectations.SYSTEM_DEFAULT_PATH): the environment's command first, env and grep after."""
    from pytest_slurmflox.judges.expectations import SYSTEM_DEFAULT_PATH

    realized = cluster["sub"].cluster.node("worker1").annotations()["realized_path"]
    script = 'echo "$PATH"; command -v flox-probe env grep; flox-probe; env | grep -c "^FOO=1$" || true'
    res = _ok(login.run(f"srun -N1 -w worker1 {export} /bin/bash -c '{script}'", timeout=60))
    path, probe, env, grep, answer, foo = res.stdout.splitlines()
    assert path.startswith(f"{realized}/bin:") and path.endswith(f":{SYSTEM_DEFAULT_PATH}"), res.describe()
    assert probe == f"{realized}/bin/flox-probe" and answer == "flox", res.describe()
    assert env.rsplit("/", 1)[0] in SYSTEM_DEFAULT_PATH.split(":"), res.describe()
    assert grep.rsplit("/", 1)[0] in SYSTEM_DEFAULT_PATH.split(":"), res.describe()
    assert foo == ("1" if export == "--export=FOO=1" else "0"), res.describe()


def test_slurm_user_has_an_association_and_runs_a_job(cluster):
    """SlurmUser under AccountingStorageEnforce=associations: Slurm's own admin paths run jobs as it."""
    t = cluster["target"]["login"]
    root = SSHRunner("127.0.0.1", t["port"], "root", Path(t["key"]), Path(t["known_hosts"]))
    try:
        assoc = _ok(root.run("sacctmgr -n -P show assoc where user=slurm format=account,user"))
        assert assoc.stdout.split() == ["root|slurm"], assoc.describe()
        res = _ok(root.run("runuser -u slurm -- srun -N1 -n1 -t 1 /usr/bin/id -un", timeout=60))
        assert res.stdout.split() == ["slurm"], res.describe()
    finally:
        root.close()


def test_workers_annotated_like_pods(cluster):
    sub = cluster["sub"]
    pool = sub.pool()
    workers = pool.workers()
    assert [w.name for w in workers] == ["worker1", "worker2"]
    assert all(w.ready and w.revision == pool.desired_revision() for w in workers)
    assert all(w.environment == "local/demo:1" and w.image == sub.cluster.image_ref() for w in workers)
    profile = sub.cluster.node_runner("worker1").run("cat /run/flox-task-profile/current/revision")
    assert profile.stdout.strip() == pool.desired_revision()


def test_failing_environment_never_registers(cluster, login):
    sub = cluster["sub"]
    pool = sub.pool()
    info = pool.start_isolated_worker("isobad", "local/broken:1")
    try:
        assert not info.ready and info.environment == "local/broken:1"
        assert sub.cluster.node("isobad").phase().startswith("failed: realization")
        for _ in range(20):  # give a (wrongly) started slurmd time to register
            nodes = _ok(login.run("sinfo -h -N -o '%N'")).stdout.split()
            assert "isobad" not in nodes
            time.sleep(0.1)
        res = _ok(login.run("srun -N2 -n2 hostname", timeout=120))
        assert len(set(res.stdout.split())) == 2
    finally:
        pool.stop_isolated_worker("isobad")
    assert "isobad" not in [w.name for w in pool.workers()]


def test_failing_activation_never_registers(cluster, login):
    """Realizes fine, but activation fails: the initializer never writes a profile and slurmd never starts."""
    sub = cluster["sub"]
    pool = sub.pool()
    info = pool.start_isolated_worker("isohook", "local/failhook:1")
    try:
        assert not info.ready and info.environment == "local/failhook:1"
        phase = sub.cluster.node("isohook").phase()
        assert phase.startswith("failed: task-profile initializer failed"), phase
        assert "isohook" not in _ok(login.run("sinfo -h -N -o '%N'")).stdout.split()
    finally:
        pool.stop_isolated_worker("isohook")


def test_early_throwaway_worker_is_claimed_once_and_released_when_unclaimed(cluster):
    """TF's throwaway workers start with the run (pytest_slurmflox/harness/throwaway.py): one start per run, one claim;
    a
    second claim starts its own; one nobody claimed is stopped at session end, and a later claim starts again."""
    from pytest_slurmflox.harness.throwaway import EarlyWorker, claim_worker, release_unclaimed, start_early
    from pytest_slurmflox.model.runrecord import RunRecords, forget, new_start

    pool = cluster["sub"].pool()
    spec = EarlyWorker("isoearly", "local/failhook:1")
    run, other = (RunRecords(f"itest-{os.getpid()}-{x}", new_start()) for x in "ab")
    try:
        before = time.time()
        assert start_early(pool, run, [spec]) == ["isoearly"]
        assert start_early(pool, run, [spec]) == []  # once per run
        assert "isoearly" in pool.isolated()
        first = claim_worker(pool, run, spec)
        assert first.early and before <= first.at <= time.time() and "failhook" in first.outcome
        second = claim_worker(pool, run, spec)
        assert not second.early and second.at >= first.at  # claimed already: a start of its own
        assert release_unclaimed(pool, run, [spec]) == []  # claimed: the check stops it
        pool.stop_isolated_worker("isoearly")
        assert start_early(pool, other, [spec]) == ["isoearly"]
        assert release_unclaimed(pool, other, [spec]) == ["isoearly"]
        assert "isoearly" not in pool.isolated()
        assert not claim_worker(pool, other, spec).early  # released: the check starts its own
    finally:
        pool.stop_isolated_worker("isoearly")
        forget(run)
        forget(other)
    assert "isoearly" not in [w.name for w in pool.workers()]


def test_rerun_converges_without_restarting(cluster):
    sub = cluster["sub"]
    before = {n: sub.cluster.node(n).record().pid for n in ("ctl", "login", "worker1", "worker2")}
    t0 = time.monotonic()
    target = sub.up()
    print(f"idempotent rerun: {time.monotonic() - t0:.2f}s")
    after = {n: sub.cluster.node(n).record().pid for n in ("ctl", "login", "worker1", "worker2")}
    assert before == after and target == cluster["target"]


def test_forged_pid_record_is_not_trusted(cluster, login):
    """A pid file pointing at a process that is not ours: never signalled, the node is cleared and restarted."""
    sub = cluster["sub"]
    node = sub.cluster.node("worker2")
    real = node.record()
    decoy = subprocess.Popen(["sleep", "300"])
    try:
        forged = proc.PidRecord(decoy.pid, proc.starttime(decoy.pid), "unshare", real.markers, real.netns_inode)
        forged.write(node.pid_file)
        assert not node.running()
        sub.up()
        assert decoy.poll() is None, "a process that is not ours was signalled"
        assert node.running() and node.record().pid != real.pid
        assert not proc.alive(real.pid), "the lost node was left running beside its replacement"
        res = _ok(login.run("srun -N2 -n2 hostname", timeout=120))
        assert sorted(res.stdout.split()) == ["worker1", "worker2"]
    finally:
        decoy.kill()
        decoy.wait()


def test_status_reports_every_node(cluster):
    text = cluster["sub"].status()
    for name in ("ctl", "login", "worker1", "worker2"):
        assert re.search(rf"^\s+{name}\s+up\s+pid \d+\s+running", text, re.M), text
    assert "forwarded" in text and "idle" in text


def test_login_port_taken_is_refused_before_anything_changes(cluster, tmp_path):
    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    sub = cluster["sub"]
    settings = sub.cluster.settings.replace(workdir=tmp_path / "other")
    other = LocalSubstrate(LocalCluster(settings, Workdir(tmp_path / "other"), _progress))
    with pytest.raises(SubstrateUnavailable, match="LOGIN_SSH_PORT"):
        other.up()
    assert not other.cluster.fabric.ours() and not (tmp_path / "other" / "local").exists()


def test_apply_replaces_the_cohort(cluster, login):
    sub = cluster["sub"]
    pool = sub.pool()
    old = pool.desired_revision()
    new_settings = sub.cluster.settings.replace(worker_flox_generation=2, worker_cpus=3)
    before = yaml.safe_load((cluster["workdir"] / "target.yaml").read_text())
    rev = pool.apply(new_settings)
    assert rev != old and rev == pool.desired_revision()
    # the target file follows the runtime (target.write_runtime), everything else stays as `up` wrote it
    after = yaml.safe_load((cluster["workdir"] / "target.yaml").read_text())
    assert after["expect"]["revision"] == rev and after["expect"]["settings"]["WORKER_FLOX_GENERATION"] == "2"
    assert after["deployment"]["settings"]["WORKER_CPUS"] == "3"
    assert after["login"] == before["login"] and after["expect"]["replicas"] == before["expect"]["replicas"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ws = pool.workers()
        if all(w.ready and w.revision == rev for w in ws):
            break
        time.sleep(0.2)
    assert all(w.ready and w.revision == rev and w.environment == "local/demo:2" for w in pool.workers())
    # The replacement keeps slurmctld's node records, as a NodeSet pod replacement does. With a changed CPU count
    # those dynamic records are stale until deleted and registered again: the lifecycle barrier's repair step,
    # done here by hand through the same two calls it makes.
    for name in ("worker1", "worker2"):
        sub.cluster.node_runner("ctl").run(f"scontrol delete nodename={name}", timeout=15)
        pool.restart(name)
    for _ in range(100):
        res = login.run("sinfo -h -N -o '%N %T %c'")
        rows = [line.split() for line in res.stdout.splitlines()]
        if len(rows) == 2 and all(r[1] == "idle" and r[2] == "3" for r in rows):
            break
        time.sleep(0.2)
    assert all(r[1] == "idle" and r[2] == "3" for r in rows), res.describe()
    res = _ok(login.run("srun -N2 -n2 slurmflox-demo", timeout=60))
    assert res.stdout.split("\n")[:2] == ["slurmflox-demo generation 2"] * 2


def test_apply_gatk_exports_and_nested_path(cluster, login):
    sub = cluster["sub"]
    rev = sub.pool().apply(
        sub.cluster.settings.replace(
            worker_flox_env="local/gatk", worker_flox_generation=1, worker_env_exports=("GATK_CONDAENV_PREFIX",)
        )
    )
    for _ in range(150):
        if all(w.ready and w.revision == rev for w in sub.pool().workers()):
            states = login.run("sinfo -h -N -o '%T'").stdout.split()
            if states == ["idle", "idle"]:
                break
        time.sleep(0.2)
    realized = sub.cluster.node("worker1").annotations()["realized_path"]
    res = _ok(
        login.run("srun -N1 -w worker1 --export=NONE /bin/bash -c 'echo $GATK_CONDAENV_PREFIX; echo $PATH; gatk'")
    )
    prefix, path, gatk = res.stdout.splitlines()
    assert prefix == f"{realized}/opt/conda/envs/gatk"
    assert path.split(":")[:2] == [f"{prefix}/bin", f"{realized}/bin"]
    assert gatk == f"gatk (local stand-in) prefix={prefix}"


def test_up_with_other_runtime_settings_leaves_the_cohort_to_the_lifecycle(cluster):
    """`up` repairs the cluster but never swaps the runtime: that is pool.apply inside the barrier."""
    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    sub = cluster["sub"]
    pool = sub.pool()
    deployed = pool.desired_revision()
    pids = {n: sub.cluster.node(n).record().pid for n in ("worker1", "worker2")}
    settings = sub.cluster.settings.replace(
        worker_flox_env="local/demo", worker_flox_generation=1, worker_env_exports=()
    )
    other = LocalSubstrate(LocalCluster(settings, sub.cluster.workdir, _progress))
    target = other.up()
    assert {n: sub.cluster.node(n).record().pid for n in pids} == pids
    assert pool.desired_revision() == deployed
    assert all(w.environment == "local/gatk:1" and w.revision == deployed for w in pool.workers())
    assert target["expect"]["revision"] == other.pool().revision_for(other.cluster.settings) != deployed
    sub.up()  # the module's substrate object still describes the deployed runtime: restore its target file


def test_replicas_grow_and_shrink_without_touching_the_rest(cluster, login):
    sub = cluster["sub"]
    before = {n: sub.cluster.node(n).record().pid for n in ("ctl", "login", "worker1", "worker2")}
    base = sub.cluster.settings
    try:
        sub.cluster.settings = base.replace(compute_replicas=3)
        sub.up()
        res = _ok(login.run("srun -N3 -n3 hostname", timeout=120))
        assert sorted(res.stdout.split()) == ["worker1", "worker2", "worker3"]
        assert [w.name for w in sub.pool().workers()] == ["worker1", "worker2", "worker3"]
    finally:
        sub.cluster.settings = base
        sub.up()
    assert (
        not sub.cluster.node("worker3").dir.exists()
        and sub.cluster.fabric.node_ns("worker3") not in sub.cluster.fabric.ours()
    )
    assert "worker3" not in _ok(login.run("sinfo -h -N -o '%N'")).stdout.split()
    assert {n: sub.cluster.node(n).record().pid for n in before} == before


def test_down_then_up_keeps_state(cluster, login):
    sub = cluster["sub"]
    marker = f"/home/{sub.cluster.settings.test_user}/kept-{os.getpid()}"
    _ok(login.run(f"echo kept > {marker}"))
    login.close()
    sub.down()
    assert not sub.cluster.fabric.ours()
    assert cgroups.leftovers(sub.cluster.prefix) == [], "down removes every cgroup of the cluster"
    assert all(not sub.cluster.node(n).running() for n in ("ctl", "login", "worker1", "worker2"))
    t0 = time.monotonic()
    sub.up()
    print(f"up after down: {time.monotonic() - t0:.2f}s")
    assert _ok(login.run(f"cat {marker}")).stdout.strip() == "kept"


def test_zz_destroy_leaves_nothing(cluster):
    sub = cluster["sub"]
    workdir = str(cluster["workdir"])
    sub.destroy()
    cluster["destroyed"] = True
    assert not sub.cluster.fabric.ours(), "network namespaces left behind"
    assert cgroups.leftovers(sub.cluster.prefix) == [], "cgroups left behind"
    mounts = Path("/proc/mounts").read_text()
    assert sub.cluster.prefix not in mounts and workdir not in mounts, "mounts left behind"
    leftovers = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if workdir in cmd:
                leftovers.append((entry.name, cmd.replace("\0", " ")))
    assert not leftovers, f"processes left behind: {leftovers}"
    assert not (cluster["workdir"] / "local").exists() and not (cluster["workdir"] / "target.yaml").exists()
    from pytest_slurmflox.substrates.local import image

    assert image.cached_image(sub.cluster.settings.local_suite) is not None, "destroy must keep the image cache"
