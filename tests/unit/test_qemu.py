"""Unit tests of the qemu substrate's pure parts and its small host-side pieces (real files, real processes)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pytest_slurmflox.model.settings import SettingsError, resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SubstrateUnavailable
from pytest_slurmflox.substrates import proc as pidproof
from pytest_slurmflox.substrates.proc import ProcessProof
from pytest_slurmflox.substrates.qemu import QemuSubstrate, fabric, seed
from pytest_slurmflox.substrates.qemu.guest import guest_script_dir
from pytest_slurmflox.substrates.qemu.images import BootSpec, ImageError, local_image, parse_checksum_file
from pytest_slurmflox.substrates.qemu.network import offline_reason
from pytest_slurmflox.substrates.qemu.render.cloudinit import SeedSpec, render_seed
from pytest_slurmflox.substrates.qemu.testimage import host_debian_mirror
from pytest_slurmflox.substrates.qemu.vm import TCG_ARGS, Accel, Vm, VmSpec, choose_accel, qemu_argv


def settings(**raw: str):
    return resolve(cli={k.upper(): v for k, v in raw.items()}).settings


# ------------------------------------------------------------------------------------------ fabric
def test_addresses_and_macs_derive_from_the_node_number():
    assert [fabric.fabric_ip(n) for n in (1, 2, 9)] == ["10.20.0.11", "10.20.0.12", "10.20.0.19"]
    macs = {fabric.fabric_mac(n) for n in range(1, 10)} | {fabric.mgmt_mac(n) for n in range(1, 10)}
    assert len(macs) == 18
    assert all(m.startswith("52:54:00:") for m in macs)
    assert fabric.ssh_port(2240, 3) == 2243
    for bad in (0, 10):
        with pytest.raises(ValueError, match=r"outside 1\.\.9"):
            fabric.fabric_ip(bad)


def test_hosts_file_names_every_node_on_the_fabric():
    text = fabric.hosts_file(3)
    assert "10.20.0.11 node1" in text and "10.20.0.13 node3" in text and "node4" not in text


# ------------------------------------------------------------------------------------------ accelerator
def test_accel_falls_back_to_tcg_with_a_warning_on_nested_pvm(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_text("")
    (tmp_path / "mod" / "kvm_pvm").mkdir(parents=True)
    accel = choose_accel("auto", dev_kvm=dev, sys_module=tmp_path / "mod")
    assert accel.name == "tcg" and accel.args == TCG_ARGS and "kvm_pvm" in accel.warning
    with pytest.raises(SubstrateUnavailable, match="nested PVM"):
        choose_accel("kvm", dev_kvm=dev, sys_module=tmp_path / "mod")


def test_accel_prefers_kvm_where_it_works_and_refuses_missing_kvm(tmp_path):
    dev = tmp_path / "kvm"
    dev.write_text("")
    (tmp_path / "mod").mkdir()
    assert choose_accel("auto", dev_kvm=dev, sys_module=tmp_path / "mod").name == "kvm"
    with pytest.raises(SubstrateUnavailable, match="does not exist: the qemu substrate needs KVM"):
        choose_accel("auto", dev_kvm=tmp_path / "absent", sys_module=tmp_path / "mod")
    assert choose_accel("tcg", dev_kvm=tmp_path / "absent").name == "tcg"
    with pytest.raises(SubstrateUnavailable, match="not one of"):
        choose_accel("hvf")


def test_this_host_gets_a_decision_not_a_traceback():
    """On this machine (/dev/kvm from kvm_pvm) the answer is TCG with a warning; elsewhere KVM or a message."""
    try:
        accel = choose_accel()
    except SubstrateUnavailable as exc:
        assert "/dev/kvm" in str(exc)
        return
    if Path("/sys/module/kvm_pvm").exists():
        assert accel.name == "tcg" and accel.warning
    else:
        assert accel.name == "kvm"


# ------------------------------------------------------------------------------------------ QEMU argv
def _spec(tmp_path, **kw) -> VmSpec:
    boot = BootSpec(
        image=tmp_path / "base.qcow2",
        sha256="0" * 64,
        family="debian",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd",
        append="root=LABEL=root ro",
    )
    base = dict(
        node=2,
        dir=tmp_path / "node2",
        boot=boot,
        seed_iso=tmp_path / "node2.iso",
        vcpus=2,
        mem_mib=1536,
        ssh_port=2242,
        mgmt_mac=fabric.mgmt_mac(2),
        fabric_mac=fabric.fabric_mac(2),
        fabric_netdev=f"vde,id=fabric,sock={tmp_path}/switch",
    )
    base.update(kw)
    return VmSpec(**base)


def test_qemu_command_line_isolates_the_guest_and_proves_itself(tmp_path):
    spec = _spec(tmp_path)
    argv = qemu_argv(spec, Accel("tcg", TCG_ARGS))
    line = " ".join(argv)
    assert "user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:2242-:22" in line
    assert argv[argv.index("-name") + 1] == "node2,process=qemu-node2"
    assert argv[argv.index("-pidfile") + 1] == str(spec.pidfile)
    assert f"file={spec.overlay},if=virtio,format=qcow2" in line
    assert f"file={spec.seed_iso},if=virtio,format=raw,readonly=on" in line
    assert f"path={spec.console},append=on" in line
    assert "-kernel" in argv and argv[argv.index("-append") + 1] == "root=LABEL=root ro"
    assert "mcast" not in line and "0.0.0.0" not in line
    assert "-daemonize" in argv and "-accel" in argv and "tcg,thread=multi,tb-size=256" in argv


def test_node1_forwards_api_and_login_on_loopback_only(tmp_path):
    wd = Workdir(tmp_path / "op")
    sub = QemuSubstrate(settings(k8s_api_port="6444", login_ssh_port="2222"), wd, print, restrict=False)
    argv = qemu_argv(sub.vm(1).spec, Accel("kvm", ("-accel", "kvm")))
    line = " ".join(argv)
    assert "restrict=off" in line
    assert "hostfwd=tcp:127.0.0.1:6444-:6443" in line and "hostfwd=tcp:127.0.0.1:2222-:32222" in line
    assert "hostfwd=tcp:127.0.0.1:6444" not in " ".join(qemu_argv(sub.vm(2).spec, Accel("kvm", ())))


# ------------------------------------------------------------------------------------------ pidfile proof
@pytest.fixture
def bash_process(tmp_path):
    marker = str(tmp_path / "disk.qcow2")
    # two commands, so bash stays the process (a single command would be exec'ed in place of bash)
    proc = subprocess.Popen(["bash", "-c", "sleep 300; :", marker], start_new_session=True)
    # Popen returns once the child is forked, maybe before it has exec'ed bash: wait for the exec (bounded)
    comm = Path(f"/proc/{proc.pid}/comm")
    deadline = time.monotonic() + 10
    while comm.read_text().strip() != "bash" and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc, marker
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # bash and its sleep: the group we started
    proc.wait()


def test_pidfile_of_our_process_is_trusted(tmp_path, bash_process):
    proc, marker = bash_process
    pidfile = tmp_path / "p.pid"
    pidfile.write_text(f"{proc.pid}\n")
    assert ProcessProof(pidfile, ("bash",), marker, comm="bash").trusted_pid() == proc.pid


def test_foreign_pidfile_is_not_trusted(tmp_path, bash_process):
    proc, _ = bash_process
    pidfile = tmp_path / "p.pid"
    pidfile.write_text(f"{proc.pid}\n")
    # right PID of a live process, but not a QEMU, not our overlay
    proof = ProcessProof(pidfile, ("qemu-system-*",), str(tmp_path / "other.qcow2"))
    assert proof.trusted_pid() is None and "not qemu-system-*" in proof.why_not(proc.pid)
    proof = ProcessProof(pidfile, ("bash",), str(tmp_path / "other.qcow2"))
    assert proof.trusted_pid() is None and "does not name" in proof.why_not(proc.pid)
    assert ProcessProof(pidfile, ("bash",), "disk.qcow2", comm="qemu-node1").trusted_pid() is None


def test_stale_pidfile_is_not_trusted(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    pidfile = tmp_path / "p.pid"
    pidfile.write_text(f"{proc.pid}\n")
    proof = ProcessProof(pidfile, ("true",), "true")
    assert proof.trusted_pid() is None
    pidfile.write_text("garbage\n")
    assert proof.read_pid() is None and proof.trusted_pid() is None


def test_a_gone_vm_says_why_and_what_its_console_said_last(tmp_path, bash_process):
    proc, _ = bash_process
    vm = Vm(_spec(tmp_path), Accel("tcg", TCG_ARGS), "qemu-system-x86_64")
    vm.spec.dir.mkdir()
    assert vm.gone() == f"no pid in {vm.spec.pidfile}"
    vm.spec.pidfile.write_text(f"{proc.pid}\n")  # a live process, but not this VM's QEMU
    vm.spec.console.write_text("Linux version 6.1\nreboot: Power down\n")
    why = vm.gone()
    assert why.startswith(f"process {proc.pid} runs ") and "not qemu-system-*" in why
    assert why.endswith("console ends: Linux version 6.1 | reboot: Power down")


def test_terminate_ends_a_proven_process(tmp_path, bash_process):
    proc, _ = bash_process
    assert pidproof.terminate(proc.pid, timeout=5)
    assert proc.wait(timeout=5) is not None


# ------------------------------------------------------------------------------------------ cloud-init
def _seed_spec(**kw) -> SeedSpec:
    base = dict(
        node=2,
        nodes=3,
        deployment_id="abcd1234",
        hostname="node2",
        fabric_address="10.20.0.12/24",
        fabric_mac=fabric.fabric_mac(2),
        mgmt_mac=fabric.mgmt_mac(2),
        admin_pubkey="ssh-ed25519 AAAA k",
        host_key_private="-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n",
        host_key_public="ssh-ed25519 BBBB root@node2",
        hosts=fabric.hosts_file(3),
    )
    base.update(kw)
    return SeedSpec(**base)


def test_seed_documents_bake_identity_address_and_node_count():
    docs = render_seed(_seed_spec())
    assert docs["user-data"].startswith("#cloud-config\n")
    user = yaml.safe_load(docs["user-data"])
    assert user["hostname"] == "node2" and user["manage_etc_hosts"] is False
    assert user["users"][0]["ssh_authorized_keys"] == ["ssh-ed25519 AAAA k"]
    assert user["ssh_keys"]["ed25519_public"] == "ssh-ed25519 BBBB root@node2"
    files = {f["path"]: f["content"] for f in user["write_files"]}
    assert files["/etc/slurmflox/nodes"] == "3\n" and "10.20.0.11 node1" in files["/etc/hosts"]
    meta = yaml.safe_load(docs["meta-data"])
    assert meta["instance-id"] == "slurmflox-abcd1234-n3-node2"
    net = yaml.safe_load(docs["network-config"])
    assert net["version"] == 2
    assert net["ethernets"]["fabric0"] == {
        "match": {"macaddress": "52:54:00:20:00:02"},
        "set-name": "fabric0",
        "dhcp4": False,
        "addresses": ["10.20.0.12/24"],
    }
    assert net["ethernets"]["mgmt0"]["match"]["macaddress"] == "52:54:00:10:00:02"


def test_another_node_count_changes_the_instance_id():
    assert _seed_spec(nodes=3).instance_id != _seed_spec(nodes=4).instance_id


@pytest.mark.skipif(
    not (shutil.which("ssh-keygen") and shutil.which("cloud-localds")),
    reason="needs ssh-keygen and cloud-localds (openssh-client, cloud-image-utils)",
)
def test_seeds_are_made_once_and_a_changed_node_count_is_refused(tmp_path):
    wd = Workdir(tmp_path / "op")
    topo = seed.ensure_seeds(wd, 2, 2240)
    assert topo.nodes == 2 and seed.node_iso(wd, 1).is_file() and seed.node_iso(wd, 2).is_file()
    assert oct(wd.ssh_key.stat().st_mode & 0o777) == "0o600"
    assert oct(seed.node_iso(wd, 1).stat().st_mode & 0o777) == "0o600"
    known = wd.known_hosts.read_text()
    assert f"[127.0.0.1]:2241 {seed.host_public_key(wd, 1)}" in known
    before = {p: p.stat().st_mtime_ns for p in wd.seed.rglob("*")}
    assert seed.ensure_seeds(wd, 2, 2240) == topo  # rerun: nothing regenerated
    with pytest.raises(SettingsError, match=r"made for NODES=2.*destroy"):
        seed.ensure_seeds(wd, 3, 2240)
    assert {p: p.stat().st_mtime_ns for p in wd.seed.rglob("*")} == before  # refused: nothing changed
    assert not (wd.seed / "node3").exists()


# ------------------------------------------------------------------------------------------ images
def test_image_checksum_is_verified(tmp_path):
    image = tmp_path / "img.qcow2"
    image.write_bytes(b"base image bytes")
    spec = local_image(image)
    spec.save()
    assert BootSpec.load(image).verify().sha256 == spec.sha256
    image.write_bytes(b"tampered image bytes")
    with pytest.raises(ImageError, match="expected"):
        local_image(image)
    with pytest.raises(ImageError, match="does not exist"):
        local_image(tmp_path / "missing.qcow2")


def test_checksum_file_formats():
    h = "a" * 64
    assert parse_checksum_file(f"# comment\nSHA256 (Alma.qcow2) = {h}\n", "Alma.qcow2") == h
    assert parse_checksum_file(f"{h}  Alma.qcow2\n", "Alma.qcow2") == h
    assert parse_checksum_file(f"{h}  Other.qcow2\n", "Alma.qcow2") is None


def test_mirror_is_read_from_apt_configuration(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert host_debian_mirror(tmp_path) == ("http://mirror.example/debian", "bookworm")
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://m.example/debian trixie main\n")
    assert host_debian_mirror(tmp_path) == ("http://m.example/debian", "trixie")


# ------------------------------------------------------------------------------------------ offline
def test_restricted_guests_are_offline_without_any_probe(tmp_path):
    assert "restrict=on" in offline_reason(True)


def test_host_without_a_resolver_is_offline(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("# nothing\nsearch example\n")
    assert "no nameserver" in offline_reason(False, resolv_conf=conf)
    assert offline_reason(False, host_check=False) is None


# ------------------------------------------------------------------------------------------ substrate
def test_preflight_errors_are_messages_not_tracebacks(tmp_path):
    wd = Workdir(tmp_path / "op")
    sub = QemuSubstrate(settings(), wd, print, image=tmp_path / "missing.qcow2", accel="tcg")
    if shutil.which("qemu-system-x86_64") is None:
        with pytest.raises(SubstrateUnavailable, match="qemu-system-x86_64 is not installed"):
            sub.preflight()
        return
    with pytest.raises(SubstrateUnavailable, match=r"missing\.qcow2 does not exist"):
        sub.preflight()
    assert not wd.root.exists()  # refused before anything was written


def test_strip_secrets_removes_every_listed_file(tmp_path):
    wd = Workdir(tmp_path / "op")
    for path in (
        wd.ssh_key,
        wd.ssh_pubkey,
        wd.munge_key,
        wd.kubeconfig,
        wd.known_hosts,
        wd.seed / "node1" / "user-data",
        wd.nodes / "node1" / "disk.qcow2",
        wd.root / "target.yaml",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("secret")
    (wd.base).mkdir()
    (wd.base / "cached.qcow2").write_text("cache")
    sub = QemuSubstrate(settings(), wd, print)
    sub.strip_secrets()
    for path in (
        wd.ssh_key,
        wd.ssh_pubkey,
        wd.munge_key,
        wd.kubeconfig,
        wd.known_hosts,
        wd.seed,
        wd.nodes,
        wd.root / "target.yaml",
    ):
        assert not path.exists(), path
    assert (wd.base / "cached.qcow2").exists()  # caches are kept


# ------------------------------------------------------------------------------------------ scripts
GUEST_SCRIPTS = sorted(guest_script_dir().glob("*.sh"))


def test_guest_scripts_are_shipped():
    names = {p.name for p in GUEST_SCRIPTS}
    assert {
        "nfs-server.sh",
        "nfs-client.sh",
        "ensure-packages.sh",
        "k8s-node-prep.sh",
        "kubeadm-init.sh",
        "kubeadm-join.sh",
        "flannel.sh",
        "flox-runtime.sh",
        "flox-prewarm.sh",
        "install-helm.sh",
    } <= names


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", GUEST_SCRIPTS, ids=lambda p: p.name)
def test_guest_script_passes_shellcheck(script):
    proc = subprocess.run(["shellcheck", "-x", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script.read_text()


def test_ensure_packages_installs_nothing_that_is_present():
    """Run the real script on this Debian host with packages it has: no apt-get, exit 0."""
    if shutil.which("dpkg-query") is None:
        pytest.skip("needs a dpkg-based host")
    script = guest_script_dir() / "ensure-packages.sh"
    env = {**os.environ, "PATH": os.environ["PATH"]}
    proc = subprocess.run(
        ["bash", str(script), "bash", "coreutils"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "installing" not in proc.stdout and "packages present: bash coreutils" in proc.stdout


def test_status_and_destructive_verbs_follow_the_topology_on_disk(tmp_path):
    wd = Workdir(tmp_path / "op")
    (wd.seed).mkdir(parents=True)
    (wd.seed / "topology.json").write_text('{"nodes": 2, "deployment_id": "x"}\n')
    sub = QemuSubstrate(settings(nodes="3"), wd, print)
    assert sub.node_count() == 2
    status = sub.status()
    assert "node1: stopped (no overlay" in status and "node2: stopped" in status and "node3" not in status
    assert "running" not in status.split()
    assert sub.down() == []  # nothing runs: nothing is signalled
