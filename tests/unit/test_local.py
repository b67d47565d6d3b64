"""Unit tests of the local substrate's pure parts and of its runtime provider (real files, no mocks)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_slurmflox.substrates import SubstrateUnavailable, proc
from pytest_slurmflox.substrates.local import apt, keys, runtime, slurmconf
from pytest_slurmflox.substrates.local.cluster import cluster_prefix

# ------------------------------------------------------------------------------------------------ apt sources


def test_deb822_picks_the_debian_archive_not_security_or_third_party():
    text = """Types: deb
URIs: http://deb.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
Components: main
"""
    third = """Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
"""
    sources = apt.parse_deb822(third) + apt.parse_deb822(text)
    assert apt.debian_mirror(sources) == "http://deb.example.org/debian"


def test_one_line_sources_and_disabled_stanzas():
    one = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main contrib\n"
    assert apt.debian_mirror(apt.parse_sources_list(one)) == "http://mirror.example/debian"
    disabled = "Types: deb\nURIs: http://x.example/debian\nSuites: trixie\nComponents: main\nEnabled: no\n"
    with pytest.raises(SubstrateUnavailable, match="names no Debian archive"):
        apt.debian_mirror(apt.parse_deb822(disabled))


def test_host_sources_reads_both_formats(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://a.example/debian trixie main\n")
    (tmp_path / "sources.list.d" / "x.sources").write_text(
        "Types: deb\nURIs: http://b.example/debian\nSuites: trixie\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "y.list.disabled").write_text("deb http://c.example/debian trixie main\n")
    uris = [s.uris[0] for s in apt.host_sources(tmp_path)]
    assert uris == ["http://a.example/debian", "http://b.example/debian"]


def test_missing_packages_names_the_package_of_a_missing_command():
    assert apt.missing_packages({"sh": "dash", "no-such-command-xyz": "xyz-pkg"}) == ["xyz-pkg"]


def test_refusal_on_a_non_debian_host(tmp_path):
    if os.geteuid() != 0:
        with pytest.raises(SubstrateUnavailable, match="needs root"):
            apt.require_root_debian()
        return
    release = tmp_path / "os-release"
    release.write_text('ID=fedora\nID_LIKE="rhel centos"\n')
    with pytest.raises(SubstrateUnavailable, match="Debian or Ubuntu"):
        apt.require_root_debian(release)
    release.write_text("ID=ubuntu\nID_LIKE=debian\n")
    apt.require_root_debian(release)


# ------------------------------------------------------------------------------------------------ slurm.conf


def test_slurm_conf_has_the_worker_contract():
    text = slurmconf.render_slurm_conf(slurmconf.ClusterConf("c", "ctl", "10.77.0.2"))
    lines = set(text.splitlines())
    assert "TaskProlog=/etc/slurm/flox-task-prolog/task-prolog.sh" in lines
    assert "LaunchParameters=enable_nss_slurm" in lines
    assert "MpiDefault=none" in lines
    assert "SlurmctldHost=ctl(10.77.0.2)" in lines
    assert f"Nodeset=workers Feature={slurmconf.WORKER_FEATURE}" in lines
    assert any(line.startswith("PartitionName=all Nodes=workers") for line in lines)
    auth = {"AuthType=auth/slurm", "CredType=cred/munge", "AuthInfo=use_client_ids,socket=/run/munge/munge.socket.2"}
    assert auth <= lines
    assert {"ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity"} <= lines
    with pytest.raises(ValueError):
        slurmconf.render_slurm_conf(slurmconf.ClusterConf("c", "ctl", "10.77.0.2", auth="none"))


def test_worker_conf_declares_runtime_capacity():
    assert slurmconf.worker_conf(2, 1024) == f"CPUs=2 RealMemory=1024 Feature={slurmconf.WORKER_FEATURE}"


def test_hosts_lists_nodes():
    text = slurmconf.render_hosts([("ctl", "10.77.0.2"), ("worker1", "10.77.0.10")])
    assert "10.77.0.2\tctl" in text and "10.77.0.10\tworker1" in text and text.startswith("127.0.0.1")


def test_cluster_prefix_is_stable_and_short(tmp_path):
    a, b = cluster_prefix(tmp_path / "a"), cluster_prefix(tmp_path / "b")
    assert a == cluster_prefix(tmp_path / "a") and a != b
    assert a.startswith("sfx") and len(a) == 9


# ------------------------------------------------------------------------------------------------ runtime


def test_shipped_environments_are_listed():
    refs = runtime.available()
    for ref in ("local/demo:1", "local/demo:2", "local/gatk:1", "local/broken:1"):
        assert ref in refs


def test_realize_is_content_addressed_read_only_and_idempotent(tmp_path):
    store = tmp_path / "store"
    one = runtime.realize("local/demo:1", store)
    again = runtime.realize("local/demo:1", store)
    two = runtime.realize("local/demo:2", store)
    assert one.path == again.path and one.path != two.path
    assert one.path.name.endswith("-demo-1") and one.path.name.split("-")[0] == one.content_hash[:32]
    assert (one.path / ".slurmflox-realized").is_file()
    assert not os.access(one.path, os.W_OK) or os.geteuid() == 0  # root ignores modes
    assert stat.S_IMODE(one.path.stat().st_mode) == 0o555
    assert stat.S_IMODE((one.path / "bin" / "slurmflox-demo").stat().st_mode) == 0o555
    out = subprocess.run([one.path / "bin" / "slurmflox-demo"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "slurmflox-demo generation 1"


def test_broken_environment_fails_to_realize(tmp_path):
    with pytest.raises(runtime.RealizationError, match="broken-tool"):
        runtime.realize("local/broken:1", tmp_path / "store")
    assert not any((tmp_path / "store").glob("*-broken-1"))


@pytest.mark.parametrize(
    ("ref", "message"),
    [("flox/echoip:2", "serves only local"), ("local/nope:1", "no such environment"), ("demo", "not an env")],
)
def test_unrealizable_references(tmp_path, ref, message):
    with pytest.raises(runtime.RealizationError, match=message):
        runtime.realize(ref, tmp_path / "store")


def test_manifest_must_match_its_directory(tmp_path):
    envs = tmp_path / "envs"
    (envs / "x" / "1").mkdir(parents=True)
    (envs / "x" / "1" / "manifest.json").write_text('{"format": 1, "name": "y", "generation": 1}')
    with pytest.raises(runtime.RealizationError, match="not its directory"):
        runtime.realize("local/x:1", tmp_path / "store", envs_root=envs)


def _activate(realized: runtime.Realized, tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "flox-activate"
    script.write_text(runtime.ACTIVATE_SH)
    return subprocess.run(
        [
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            "bash",
            str(script),
            str(realized.path),
            "run",
            "--",
            "bash",
            "-c",
            command,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_gatk_activation_exports_prefix_and_nested_bin(tmp_path):
    realized = runtime.realize("local/gatk:1", tmp_path / "store")
    res = _activate(realized, tmp_path, 'echo "$GATK_CONDAENV_PREFIX"; echo "$PATH"; gatk; flox-probe')
    assert res.returncode == 0, res.stderr
    prefix, path, gatk, probe = res.stdout.splitlines()
    assert prefix == f"{realized.path}/opt/conda/envs/gatk"
    assert path.split(":")[:2] == [f"{prefix}/bin", f"{realized.path}/bin"]
    assert gatk == f"gatk (local stand-in) prefix={prefix}" and probe == "flox"


def test_activation_refuses_an_unrealized_directory(tmp_path):
    fake = runtime.Realized("local/demo:1", tmp_path, "0" * 64)
    res = _activate(fake, tmp_path, "true")
    assert res.returncode == 1 and "not a realized environment" in res.stderr


# ------------------------------------------------------------------------------------------------ proc, keys


def test_pid_proof_accepts_our_process_and_rejects_changes(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "marker-xyz"])
    try:
        exe = Path(f"/proc/{child.pid}/exe").readlink().name
        rec = proc.record_for(child.pid, exe, ("marker-xyz",))
        rec.write(tmp_path / "pid.json")
        assert proc.proven(proc.PidRecord.read(tmp_path / "pid.json"))
        assert not proc.proven(proc.PidRecord(rec.pid, rec.starttime + 1, exe, ("marker-xyz",)))
        assert not proc.proven(proc.PidRecord(rec.pid, rec.starttime, "bash", ("marker-xyz",)))
        assert not proc.proven(proc.PidRecord(rec.pid, rec.starttime, exe, ("other",)))
    finally:
        child.kill()
        child.wait()
    time.sleep(0.05)
    assert not proc.proven(rec)
    assert proc.PidRecord.read(tmp_path / "missing.json") is None


def test_keys_are_0600_reused_and_pinnable(tmp_path):
    line = keys.ensure_ed25519(tmp_path / "id", tmp_path / "id.pub", "c")
    assert stat.S_IMODE((tmp_path / "id").stat().st_mode) == 0o600
    assert line.startswith("ssh-ed25519 ") and keys.ensure_ed25519(tmp_path / "id", tmp_path / "id.pub", "c") == line
    assert keys.known_hosts_line("127.0.0.1", 2222, line) == f"[127.0.0.1]:2222 {' '.join(line.split()[:2])}\n"
    keys.ensure_shared_key(tmp_path / "munge.key")
    assert (tmp_path / "munge.key").stat().st_size == 1024
    assert stat.S_IMODE((tmp_path / "munge.key").stat().st_mode) == 0o600
    import paramiko

    assert paramiko.Ed25519Key.from_private_key_file(str(tmp_path / "id")).get_name() == "ssh-ed25519"


def test_dpkg_lock_is_waited_for_not_failed(tmp_path):
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX);"
            "print('held', flush=True); time.sleep(1.0)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    said: list[str] = []
    t0 = time.monotonic()
    apt.wait_for_dpkg_lock(said.append, timeout=30, locks=(str(lock),), poll=0.05)
    assert time.monotonic() - t0 >= 0.5 and said and "waiting for the dpkg lock" in said[0]
    holder.wait()
    holder2 = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX);"
            "print('held', flush=True); time.sleep(5)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder2.stdout.readline().strip() == "held"
        with pytest.raises(SubstrateUnavailable, match="stayed locked"):
            apt.wait_for_dpkg_lock(lambda _l: None, timeout=0.3, locks=(str(lock),), poll=0.05)
    finally:
        holder2.kill()
        holder2.wait()


def test_suite_without_a_recipe_is_refused_before_building(tmp_path):
    from pytest_slurmflox.substrates.local import image

    with pytest.raises(SubstrateUnavailable, match="bullseye"):
        image.ensure_image("bullseye", "http://mirror.invalid/debian", lambda _l: None, cache=tmp_path)
    assert not any(tmp_path.iterdir())


def test_bookworm_image_has_no_sackd_and_its_cluster_authenticates_with_munge():
    """22.05 has neither sackd nor auth/slurm (both 23.11): bookworm's recipe leaves sackd out, checks munged
    instead, and its cluster runs auth/munge; trixie's recipe text is what it was (its cached image stays valid)."""
    from pytest_slurmflox.substrates.local import image

    assert "sackd" not in image.node_packages("bookworm") and "munge" in image.node_packages("bookworm")
    assert "sackd" in image.node_packages("trixie") and "nix-bin" in image.node_packages("bookworm")
    assert image.node_customize("trixie") == image.NODE_CUSTOMIZE
    assert "command -v munged" in image.node_customize("bookworm")
    assert "sackd" not in image.node_customize("bookworm")
    assert (image.suite_auth("bookworm"), image.suite_auth("trixie"), image.suite_auth("sid")) == (
        "munge",
        "slurm",
        "slurm",
    )
    assert image.recipe_key("bookworm") != image.recipe_key("trixie")


@pytest.mark.parametrize(
    ("state", "ready"),
    [
        ("idle", True),
        ("drained", True),
        ("draining", True),
        ("mixed", True),
        ("allocated+", True),
        ("idle*", False),
        ("down", False),
        ("down*", False),
        ("unknown", False),
        ("", False),
        ("future", False),
    ],
)
def test_worker_registration_states(state, ready):
    from pytest_slurmflox.substrates.local.cluster import registered as _registered

    assert _registered(state) is ready


# ------------------------------------------------------------------------------------------------ cgroups


def test_own_cgroup_and_v1_mounts_are_read_from_proc_text():
    from pytest_slurmflox.substrates.local import cgroups

    text = "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n"
    assert cgroups.own_cgroup("memory", text) == "/process_api/abc"
    assert cgroups.own_cgroup("cpuacct", text) == "/"
    assert cgroups.own_cgroup("freezer", text) is None
    mounts = (
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
    )
    found = cgroups.v1_mounts(mounts)
    assert found["memory"] == Path("/sys/fs/cgroup/memory") and found["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert "freezer" not in found


def test_unusable_controllers_weaken_the_conf_and_name_the_limitation(tmp_path):
    from pytest_slurmflox.model.settings import resolve
    from pytest_slurmflox.model.workdir import Workdir
    from pytest_slurmflox.substrates.local import cgroups
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    cluster = LocalCluster(
        resolve(cli={"WORKDIR": str(tmp_path)}, substrate="local").settings, Workdir(tmp_path), print
    )
    full = cgroups.Support(("freezer", "cpuset", "memory"))
    assert full.limitations() == {}
    conf = slurmconf.render_slurm_conf(cluster.cluster_conf(full))
    assert "ProctrackType=proctrack/cgroup" in conf and "SelectTypeParameters=CR_CPU_Memory" in conf
    assert "ConstrainCores=yes" in slurmconf.render_cgroup_conf(cluster.cgroup_conf(full))
    no_memory = cgroups.Support(("freezer", "cpuset"), {"memory": "creating x failed: Permission denied"})
    assert set(no_memory.limitations()) == {"memory-limits"}
    assert "Permission denied" in no_memory.limitations()["memory-limits"]
    conf = slurmconf.render_slurm_conf(cluster.cluster_conf(no_memory))
    assert "SelectTypeParameters=CR_CPU" in conf.splitlines() and "DefMemPerCPU" not in conf
    assert "ConstrainRAMSpace=no" in slurmconf.render_cgroup_conf(cluster.cgroup_conf(no_memory))
    none = cgroups.Support((), {c: "not mounted" for c in cgroups.CONTROLLERS})
    assert set(none.limitations()) == {"process-tracking", "cpu-binding", "memory-limits"}
    assert "ProctrackType=proctrack/pgid" in slurmconf.render_slurm_conf(cluster.cluster_conf(none))
    assert slurmconf.render_cgroup_conf(cluster.cgroup_conf(none)).splitlines()[-1] == "CgroupPlugin=disabled"


def test_cgroup_tree_is_made_and_removed_deepest_first(tmp_path):
    """On a plain directory tree (the removal order and the cpuset inheritance are file operations)."""
    from pytest_slurmflox.substrates.local import cgroups

    base = tmp_path / "slurmflox-sfxtest"
    tree = cgroups.ClusterCgroups({"freezer": base})
    procs = tree.ensure_node("worker1")
    assert procs == [base / "worker1" / "cgroup.procs"] and (base / "worker1").is_dir()
    (base / "worker1" / "slurm" / "uid_1").mkdir(parents=True)
    assert cgroups.leftovers("sfxtest", roots=(tmp_path,)) == [base]
    tree.remove_node("worker1")
    assert not (base / "worker1").exists()
    tree.remove_all()
    assert cgroups.leftovers("sfxtest", roots=(tmp_path,)) == []


def test_a_silent_image_stage_says_which_stage_it_is_in(tmp_path, caplog, monkeypatch):
    """While mmdebstrap is silent (minutes of package installs), the build says its last stage (waits.Status); here
    a real process stands in for mmdebstrap, and the first status line is due at once."""
    import logging

    from pytest_slurmflox.base import waits
    from pytest_slurmflox.substrates.local import image

    caplog.set_level(logging.INFO, logger=waits.WAIT_LOGGER)
    monkeypatch.setattr(waits, "FIRST_STATUS", 0.0)
    monkeypatch.setattr(image, "STAGE_LOOK", 0.05)
    progress: list[str] = []
    argv = ["sh", "-c", "echo 'I: installing remaining packages inside the chroot...'; sleep 0.5; echo 'I: done'"]
    image._mmdebstrap(argv, tmp_path / "node.log", progress.append, "node")
    assert progress == [
        "image[node]: I: installing remaining packages inside the chroot...",
        "image[node]: I: done",
    ]
    said = [r.getMessage() for r in caplog.records]
    stage = "the node image's node stage (mmdebstrap): last said: I: installing remaining packages inside the chroot"
    assert said and re.fullmatch(rf"waiting \d+ s for {re.escape(stage)}\.\.\.", said[0]), said
    assert "I: done" in (tmp_path / "node.log").read_text()
