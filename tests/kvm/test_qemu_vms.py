"""The qemu substrate's VM layer, really booted: three VMs from a Debian test image built from the host's mirror.

One module-scoped cluster serves every check (booting is the expensive part: TCG on this host). The tests
run in file order and build on each other: boot, isolation, fabric, the offline stop of ``up`` together with
the shared home, pidfile proof across ``down``/``up``, then destroy and strip-secrets.

The guests are started with ``restrict=on``: nothing in here sends traffic anywhere but to 127.0.0.1 and to
the VMs' own QEMU-internal networks.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_slurmflox.model.settings import resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SubstrateUnavailable
from pytest_slurmflox.substrates import proc as pidproof
from pytest_slurmflox.substrates.qemu import QemuSubstrate, addons, fabric, kubeadm
from pytest_slurmflox.substrates.qemu.images import BootSpec
from pytest_slurmflox.substrates.qemu.vm import choose_accel, find_qemu

pytestmark = pytest.mark.kvm

CACHE = Path(os.environ.get("SLURMFLOX_CACHE_DIR", "~/.cache/pytest-slurmflox")).expanduser() / "qemu"
NODES = 3


@pytest.fixture(scope="module")
def say(request):
    """Progress and measurements straight to the terminal, past pytest's output capture."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    lock = threading.Lock()  # the substrate reports from its SSH-wait threads too

    def write(message: str) -> None:
        line = f"[qemu {time.strftime('%H:%M:%S')}] {message}"
        if reporter is None or capture is None:
            print(line)
            return
        with lock, capture.global_and_fixture_disabled():
            reporter.write_line(line)
            reporter.flush()

    return write


def _free_port_base() -> int:
    """A port base whose SSH ports and node1's two extra forwards are free on 127.0.0.1."""
    for base in range(22240, 30000, 20):
        ports = [base + n for n in range(1, NODES + 1)] + [base + 18, base + 19]
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free loopback port range")


@pytest.fixture(scope="module")
def test_image(say) -> BootSpec:
    try:
        find_qemu()
        choose_accel()
    except SubstrateUnavailable as exc:
        pytest.skip(f"cannot boot VMs here: {exc}")
    if os.geteuid() != 0:
        pytest.skip("building the Debian test image needs root (mmdebstrap, mkfs.ext4 -d)")
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed: cannot build the Debian test image")
    from pytest_slurmflox.substrates.qemu.testimage import build_debian_test_image

    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".build.lock")):
        return build_debian_test_image(CACHE, say)


@pytest.fixture(scope="module")
def cluster(test_image, tmp_path_factory, say):
    base = _free_port_base()
    settings = resolve(
        cli={
            "NODES": str(NODES),
            "VCPUS": "2",
            "MEM": "1536",
            "DISK_SIZE": "8G",
            "SSH_PORT_BASE": str(base),
            "K8S_API_PORT": str(base + 18),
            "LOGIN_SSH_PORT": str(base + 19),
        }
    ).settings
    wd = Workdir(tmp_path_factory.mktemp("qemu") / "operator")
    sub = QemuSubstrate(settings, wd, say, image=test_image.image, restrict=True, ssh_timeout=900)
    try:
        t0 = time.monotonic()
        sub.up_vms()
        say(f"VM layer up in {time.monotonic() - t0:.0f}s")
        yield sub
    finally:
        for n in range(NODES, 0, -1):  # never leave a QEMU behind, whatever failed
            vm = sub.vm(n)
            pid = vm.pid()
            if pid is not None:
                vm.powerdown(timeout=30)
        sub.fabric.stop()


def _ok(sub: QemuSubstrate, n: int, command: str, timeout: float = 120) -> str:
    result = sub.ssh(n, command, timeout=timeout)
    assert result.ok, result.describe()
    return result.stdout


def test_three_vms_boot_and_answer_ssh_on_loopback(cluster, say):
    times = {bt.node: bt for bt in cluster.boot_times}
    assert sorted(times) == [1, 2, 3] and all(bt.started for bt in times.values())
    for n in range(1, NODES + 1):
        say(f"node{n}: launch to SSH-ready {times[n].seconds:.0f}s")
        assert _ok(cluster, n, "hostname").strip() == f"node{n}"
        assert _ok(cluster, n, "cat /etc/slurmflox/nodes").strip() == str(NODES)
        pid = cluster.vm(n).pid()
        assert pid is not None
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert any(b"restrict=on" in a and f"127.0.0.1:{cluster.vm(n).spec.ssh_port}-:22".encode() in a for a in argv)
    status = cluster.status()
    assert all(f"node{n}: running (overlay present" in status for n in range(1, NODES + 1)), status
    assert "fabric switch: running" in status
    guest = cluster.guest(1)
    try:  # the primitive provisioning uses to place files as root (atomically, with a mode)
        guest.put("/etc/slurmflox/probe.yaml", "a: 1\n", mode="0600").check()
        assert guest.root("stat -c '%a %U' /etc/slurmflox/probe.yaml").check().stdout.strip() == "600 root"
        assert guest.root("cat /etc/slurmflox/probe.yaml").check().stdout == "a: 1\n"
    finally:
        guest.close()


def test_guests_cannot_reach_out(cluster):
    """restrict=on: even the QEMU gateway (the host) is unreachable from inside, except via the forwards."""
    result = cluster.ssh(1, "timeout 5 bash -c 'echo > /dev/tcp/10.0.2.2/22' && echo reached")
    assert "reached" not in result.stdout and not result.ok


def test_node1_reaches_the_others_on_the_fabric(cluster):
    for n in (2, 3):
        out = _ok(cluster, 1, f"ping -c 3 -i 0.3 -W 2 {fabric.fabric_ip(n)}")
        assert " 0% packet loss" in out, out
    assert _ok(cluster, 2, "ip -4 -br addr show fabric0").split()[2] == f"{fabric.fabric_ip(2)}/24"


def test_up_stops_at_the_internet_with_one_offline_message(cluster):
    """up() converges the VM layer and the shared home, then refuses the Kubernetes stage: the guests are
    isolated. Nothing it leaves behind claims a provisioned cluster."""
    wd = cluster.workdir
    with pytest.raises(SubstrateUnavailable) as info:
        cluster.up()
    message = str(info.value)
    assert message.startswith("offline:") and "restrict=on" in message and "Kubernetes" in message
    assert "\n" not in message
    for path in (wd.kubeconfig, wd.root / "target.yaml", wd.root / "k8s" / "provisioned.json"):
        assert not path.exists(), path


#: Guest scripts with a network fetch, each with what it must have done before it (checked in the guest), and
#: the host its first download goes to. The arguments are the plan's own (kubeadm.cluster_steps and addons).
OFFLINE_SCRIPTS = {
    "k8s-node-prep.sh": (
        lambda s: (kubeadm.k8s_minor(s.kubernetes_version), s.kubernetes_version, fabric.fabric_ip(2)),
        "test -s /etc/sysctl.d/90-slurmflox-k8s.conf && grep -qw br_netfilter /proc/modules && "
        "test $(cat /proc/sys/net/ipv4/ip_forward) = 1",
        "download.docker.com",
    ),
    "flox-runtime.sh": (
        lambda s: (s.flox_version, s.flox_shim_installer, addons.SHIM_PATH),
        "! command -v flox",
        "downloads.flox.dev",
    ),
    "install-helm.sh": (lambda s: (addons.HELM_VERSION,), "! test -e /usr/local/bin/helm", "get.helm.sh"),
    "flannel.sh": (
        lambda s: (s.flannel_version, s.pod_cidr, kubeadm.FABRIC_IFACE),
        "true",
        "github.com",
    ),
}


@pytest.mark.parametrize("script", sorted(OFFLINE_SCRIPTS))
def test_guest_script_runs_for_real_up_to_its_first_download_and_stops_offline(cluster, say, script):
    """The real script, as provisioning sends it (shared library first), on a real Debian guest: everything before
    the first download happens, the download finds no network, and the script stops with exactly one
    ``slurmflox-offline:`` line (exit 75) that the executor turns into one ``offline:`` message."""
    from pytest_slurmflox.substrates.qemu.guest import OFFLINE_EXIT, OFFLINE_PREFIX
    from pytest_slurmflox.substrates.qemu.kubeadm import Step
    from pytest_slurmflox.substrates.qemu.provision import run_step

    args_of, before, host = OFFLINE_SCRIPTS[script]
    args = args_of(cluster.settings)
    guest = cluster.guest(2)
    t0 = time.monotonic()
    try:
        result = guest.script(script, *args, timeout=600)
    finally:
        guest.close()
    say(f"{script} on node2: exit {result.exit_status} after {time.monotonic() - t0:.0f}s")
    assert result.exit_status == OFFLINE_EXIT, result.describe()
    offline_lines = [line for line in result.stderr.splitlines() if line.startswith(OFFLINE_PREFIX)]
    assert len(offline_lines) == 1 and f"https://{host}/" in offline_lines[0], result.stderr
    assert "command not found" not in result.stderr and "Traceback" not in result.stderr
    _ok(cluster, 2, f"sudo bash -c {shlex.quote(before)}")  # what precedes the download really happened

    with pytest.raises(SubstrateUnavailable) as info:
        run_step(cluster, Step(2, f"{script} (offline probe)", script=script, args=args, timeout=600))
    message = str(info.value)
    assert message.startswith("offline:") and host in message and "\n" not in message


def test_file_written_on_node2_home_is_read_on_node3(cluster):
    token = secrets.token_hex(8)
    _ok(cluster, 2, f"echo {token} > ~/probe && sync")
    assert _ok(cluster, 3, "cat ~/probe").strip() == token
    assert _ok(cluster, 1, "cat /home/slurmflox/probe").strip() == token
    assert "nfs" in _ok(cluster, 3, "findmnt -n -t nfs,nfs4 -o FSTYPE /home")


def test_down_in_reverse_order_then_up_reuses_overlays_and_distrusts_stale_pidfiles(cluster, say):
    token = secrets.token_hex(8)
    for n in range(1, NODES + 1):
        _ok(cluster, n, f"echo {token} | sudo tee /var/tmp/state-marker >/dev/null && sync")
    overlays = {n: cluster.vm(n).spec.overlay for n in range(1, NODES + 1)}
    t0 = time.monotonic()
    order = cluster.down()
    say(f"down (reverse order {order}) took {time.monotonic() - t0:.0f}s")
    assert order == [3, 2, 1]
    assert all(cluster.vm(n).pid() is None for n in range(1, NODES + 1))
    assert all(p.exists() for p in overlays.values())

    # node3: a foreign pidfile (a live process that is not QEMU, even naming the overlay); node2: a stale one.
    foreign = subprocess.Popen(["bash", "-c", "sleep 900; :", str(overlays[3])], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        cluster.vm(3).spec.pidfile.write_text(f"{foreign.pid}\n")
        cluster.vm(2).spec.pidfile.write_text(f"{dead.pid}\n")
        assert cluster.vm(3).pid() is None and cluster.vm(2).pid() is None
        status = cluster.status()
        assert status.count(": stopped (overlay present") == NODES, status
        cluster.up_vms()
        for bt in cluster.boot_times:
            say(f"node{bt.node}: relaunch to SSH-ready {bt.seconds:.0f}s")
        assert all(bt.started for bt in cluster.boot_times)
        assert foreign.poll() is None, "the process named by a foreign pidfile was signalled"
    finally:
        os.killpg(foreign.pid, signal.SIGKILL)  # bash and its sleep: the group this test started
        foreign.wait()
    for n in range(1, NODES + 1):
        assert _ok(cluster, n, "cat /var/tmp/state-marker").strip() == token  # overlay state kept
        pid = cluster.vm(n).pid()
        assert pid is not None and pidproof.alive(pid)
    for n in range(1, NODES + 1):  # one console log per node, appended across boots
        assert cluster.vm(n).spec.console.read_bytes().count(b"Linux version") == 2
    # the shared home comes back on its own (automount) after node1 restarted
    assert len(_ok(cluster, 3, "cat ~/probe").strip()) == 16


def test_destroy_and_strip_secrets_leave_none_of_the_listed_files(cluster):
    wd = cluster.workdir
    with pytest.raises(SubstrateUnavailable, match="run down before strip-secrets"):
        cluster.strip_secrets()
    pids = [cluster.vm(n).pid() for n in range(1, NODES + 1)]
    cluster.destroy()
    assert all(not pidproof.alive(p) for p in pids if p)
    assert not wd.nodes.exists()
    assert (wd.seed / "topology.json").exists()  # destroy keeps seeds (and caches)
    removed = cluster.strip_secrets()
    assert wd.ssh_key in removed and wd.seed in removed
    for path in (wd.ssh_key, wd.ssh_pubkey, wd.munge_key, wd.kubeconfig, wd.seed, wd.nodes, wd.known_hosts):
        assert not path.exists(), path
    assert cluster.fabric.proof().trusted_pid() is None
