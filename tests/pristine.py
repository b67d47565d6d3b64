"""A pristine Debian host for the newcomer's test (issue 25): a minimal rootfs, entered in a private mount namespace.

The rootfs is what a cloud image has and nothing of ours: mmdebstrap ``minbase`` plus ``python3`` and
``ca-certificates``, from the mirror the host's apt names. It is cached as a tarball keyed by its inputs and unpacked
afresh for every run. What is carried over from this machine is only its network configuration, which any machine
on this network has: the resolver and the CA certificates of its egress (``/usr/local/share/ca-certificates``) with
pip's pointer to the system CA bundle. Every step of a run enters one long-lived mount namespace (held by a
``sleep`` we start and end by PID), so the namespaces and mounts the local substrate makes in one step are there
for the next; the host's /proc, /sys and /dev are bound in, as a real machine has them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_slurmflox.substrates.local import apt, cgroups

CACHE = Path(os.environ.get("SLURMFLOX_PRISTINE_CACHE", "/var/cache/slurmflox-tests/pristine"))
INCLUDE = ("python3", "ca-certificates")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def rootfs_tarball(suite: str) -> Path:
    """The cached minimal rootfs of ``suite`` (built once per key: suite, mirror, packages, mmdebstrap's version)."""
    mirror = apt.debian_mirror(apt.host_sources())
    version = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True, check=True).stdout
    key = hashlib.sha256(json.dumps([suite, mirror, INCLUDE, version.strip()]).encode()).hexdigest()[:16]
    tarball = CACHE / f"{suite}-minbase-{key}.tar"
    if tarball.is_file():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    subprocess.run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--include=" + ",".join(INCLUDE),
            "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg",
            suite,
            str(partial),
            f"deb {mirror} {suite} main",
        ],
        check=True,
        capture_output=True,
        timeout=1200,
    )
    partial.rename(tarball)
    return tarball


@dataclass
class Step:
    command: str
    rc: int
    output: str
    seconds: float


class PristineHost:
    """A fresh rootfs under ``root``, one mount namespace for all its steps, and a clean environment for each."""

    def __init__(self, root: Path, tarball: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        subprocess.run(["tar", "-xpf", str(tarball), "-C", str(root), "--numeric-owner"], check=True)
        # The root is a mount point, as on any machine (``ip -n`` remounts / as a slave and fails on a plain
        # directory), then the host's /proc, /sys and /dev below it; with SLURMFLOX_PRISTINE_SHARE_CACHE=1 (a
        # development aid only, never in CI) the host's node image cache too, so an iteration skips the image build.
        binds = [f"mount --bind {root} {root}"]
        binds += [f"mount --rbind /{d} {root}/{d} && mount --make-rslave {root}/{d}" for d in ("proc", "sys", "dev")]
        if os.environ.get("SLURMFLOX_PRISTINE_SHARE_CACHE") == "1":
            binds.append(
                f"mkdir -p {root}/var/cache/slurmflox && mount --bind /var/cache/slurmflox {root}/var/cache/slurmflox"
            )
        script = " && ".join(binds)
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f"{script} && exec sleep infinity"],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self._mounted("dev"):
            assert self.holder.poll() is None and time.monotonic() < deadline, "the pristine namespace did not start"
            time.sleep(0.05)
        self._carry_network_config()

    def _carry_network_config(self) -> None:
        etc = self.root / "etc"
        shutil.copy("/etc/resolv.conf", etc / "resolv.conf")
        egress = Path("/usr/local/share/ca-certificates")
        if egress.is_dir() and any(egress.glob("*.crt")):
            target = self.root / "usr/local/share/ca-certificates"
            target.mkdir(parents=True, exist_ok=True)
            for crt in egress.glob("*.crt"):
                shutil.copy(crt, target / crt.name)
            (etc / "pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
            self.run("update-ca-certificates >/dev/null")

    def _mounted(self, name: str) -> bool:
        try:
            text = Path(f"/proc/{self.holder.pid}/mountinfo").read_text()
        except OSError:
            return False
        return f" {self.root}/{name} " in text

    def run(self, command: str, cwd: str = "/root", timeout: float = 3600) -> Step:
        """``command`` by ``sh -c`` as root inside the host, with a login-like clean environment."""
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                *("nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--"),
                *("chroot", str(self.root), "/usr/bin/env", "-i", f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8"),
                *("sh", "-c", f"cd {cwd} && {command}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream in the order it was written: the tail is where it ended
            text=True,
            timeout=timeout,
            check=False,
        )
        return Step(command, proc.returncode, proc.stdout, time.monotonic() - t0)

    def processes(self) -> list[str]:
        """Processes whose root is this host (ours, started by its steps), but for the namespace holder."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            try:
                root = os.readlink(entry / "root")
                if root == str(self.root) or root.startswith(f"{self.root}/"):
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{entry.name} {cmdline}")
            except OSError:
                continue
        return found

    def mounts(self) -> list[str]:
        """Mounts below the root other than the host's /proc, /sys and /dev trees bound in by us."""
        ours = tuple(f"{self.root}/{d}" for d in ("proc", "sys", "dev", "var/cache/slurmflox"))
        text = Path(f"/proc/{self.holder.pid}/mountinfo").read_text()
        points = [line.split()[4] for line in text.splitlines()]
        # /run/netns itself stays a mount point once `ip netns add` made it one (iproute2 does that on any
        # machine); what would be ours is a namespace mounted below it
        return [
            p
            for p in points
            if p.startswith(f"{self.root}/") and not p.startswith(ours) and p != f"{self.root}/run/netns"
        ]

    def close(self, workdir_inside: str) -> None:
        """End what the steps left running (a commit under test may leave its nodes: they are ours, started by this
        test), the cluster's cgroups, the namespace holder (by PID), and remove the rootfs."""
        for line in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        for path in cluster_cgroups(workdir_inside):
            cgroups.remove_tree(path)
        if self.holder.poll() is None:
            os.kill(self.holder.pid, signal.SIGKILL)
            self.holder.wait(timeout=30)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.root)], check=False)


def cluster_cgroups(workdir_inside: str) -> list[Path]:
    """The cgroups of the local cluster whose work dir is ``workdir_inside`` (a path inside the pristine host: the
    cluster's prefix hashes the path as the substrate saw it). Other clusters on this machine are not ours to judge."""
    prefix = "sfx" + hashlib.sha256(workdir_inside.encode()).hexdigest()[:6]
    return cgroups.leftovers(prefix)
