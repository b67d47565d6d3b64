"""One QEMU virtual machine: accelerator choice, command line, overlay disk, start and orderly stop.

Plain QEMU, no libvirt. Each VM lives in ``<workdir>/nodes/nodeN/``: ``disk.qcow2`` (overlay over the base
image), ``qemu.pid``, ``qmp.sock``, ``console.log`` (appended across boots). The pidfile is only believed after
:class:`~..proc.ProcessProof` has matched the live process (qemu-system-* executable, this overlay on its
command line, comm ``qemu-nodeN``).

Accelerator: KVM wherever it really works. A nested PVM KVM (module ``kvm_pvm``) accepts ``/dev/kvm`` but stops
stock guest kernels at once, so it is detected and QEMU falls back to TCG with a warning. No /dev/kvm (or no
write access) is refused with a clear message unless TCG was asked for explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...base.waits import WaitTimedOut, poll
from .. import SubstrateUnavailable
from .. import proc as pidproof
from ..proc import ProcessProof
from .images import BootSpec

TCG_ARGS = ("-accel", "tcg,thread=multi,tb-size=256", "-cpu", "max")
KVM_ARGS = ("-accel", "kvm", "-cpu", "host")


@dataclass(frozen=True)
class Accel:
    name: str  #: "kvm" or "tcg"
    args: tuple[str, ...]
    warning: str | None = None


def choose_accel(
    requested: str = "auto", *, dev_kvm: Path = Path("/dev/kvm"), sys_module: Path = Path("/sys/module")
) -> Accel:
    """KVM if usable, TCG for a nested PVM host (warning), an error if KVM is missing and TCG was not asked for.

    ``requested``: ``auto`` (default), ``kvm`` (never fall back) or ``tcg`` (always emulate).
    """
    if requested == "tcg":
        return Accel("tcg", TCG_ARGS, "TCG was requested: guests are emulated and run several times slower")
    if requested not in ("auto", "kvm"):
        raise SubstrateUnavailable(f"accelerator {requested!r} is not one of auto, kvm, tcg")
    if not dev_kvm.exists():
        raise SubstrateUnavailable(
            f"{dev_kvm} does not exist: the qemu substrate needs KVM (load kvm_intel or "
            "kvm_amd, or ask for accel=tcg to emulate slowly)"
        )
    if not os.access(dev_kvm, os.R_OK | os.W_OK):
        raise SubstrateUnavailable(
            f"{dev_kvm} is not writable by uid {os.getuid()}: add the user to the kvm "
            "group (or ask for accel=tcg to emulate slowly)"
        )
    if (sys_module / "kvm_pvm").exists():
        if requested == "kvm":
            raise SubstrateUnavailable(
                f"{dev_kvm} is a nested PVM KVM (kvm_pvm), which stock guest kernels "
                "cannot run on; use accel=auto or tcg"
            )
        return Accel(
            "tcg",
            TCG_ARGS,
            f"{dev_kvm} is a nested PVM KVM (module kvm_pvm) that stock guest "
            "kernels cannot run on: falling back to TCG emulation (slow)",
        )
    return Accel("kvm", KVM_ARGS)


def find_qemu() -> str:
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        raise SubstrateUnavailable("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)")
    if shutil.which("qemu-img") is None:
        raise SubstrateUnavailable("qemu-img is not installed (apt-get install qemu-utils)")
    return path


@dataclass(frozen=True)
class VmSpec:
    """What one VM is: pure data, turned into a QEMU command line by :func:`qemu_argv`."""

    node: int
    dir: Path
    boot: BootSpec
    seed_iso: Path
    vcpus: int
    mem_mib: int
    ssh_port: int
    mgmt_mac: str
    fabric_mac: str
    fabric_netdev: str  #: e.g. "vde,id=fabric,sock=/.../switch"
    restrict: bool = True  #: guest cut off from everything but the port forwards
    forwards: tuple[tuple[int, int], ...] = ()  #: extra (host port, guest port) TCP forwards on 127.0.0.1
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", f"node{self.node}")

    @property
    def overlay(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def pidfile(self) -> Path:
        return self.dir / "qemu.pid"

    @property
    def qmp(self) -> Path:
        return self.dir / "qmp.sock"

    @property
    def console(self) -> Path:
        return self.dir / "console.log"

    @property
    def comm(self) -> str:
        return f"qemu-{self.name}"


def qemu_argv(spec: VmSpec, accel: Accel, qemu: str = "qemu-system-x86_64") -> list[str]:
    """The full QEMU command line (daemonizing, with pidfile, QMP socket and appended console log)."""
    fwd = [f"hostfwd=tcp:127.0.0.1:{spec.ssh_port}-:22"]
    fwd += [f"hostfwd=tcp:127.0.0.1:{host}-:{guest}" for host, guest in spec.forwards]
    user = ",".join(["user", "id=mgmt", f"restrict={'on' if spec.restrict else 'off'}", *fwd])
    argv = [
        qemu,
        "-name",
        f"{spec.name},process={spec.comm}",
        "-machine",
        "q35",
        *accel.args,
        "-smp",
        str(spec.vcpus),
        "-m",
        str(spec.mem_mib),
        "-nodefaults",
        "-display",
        "none",
        "-daemonize",
        "-pidfile",
        str(spec.pidfile),
        "-qmp",
        f"unix:{spec.qmp},server=on,wait=off",
        "-chardev",
        f"file,id=console,path={spec.console},append=on",
        "-serial",
        "chardev:console",
        "-object",
        "rng-random,id=rng0,filename=/dev/urandom",
        "-device",
        "virtio-rng-pci,rng=rng0",
        "-drive",
        f"file={spec.overlay},if=virtio,format=qcow2,discard=unmap",
        "-drive",
        f"file={spec.seed_iso},if=virtio,format=raw,readonly=on",
        "-netdev",
        user,
        "-device",
        f"virtio-net-pci,netdev=mgmt,mac={spec.mgmt_mac}",
        "-netdev",
        spec.fabric_netdev,
        "-device",
        f"virtio-net-pci,netdev=fabric,mac={spec.fabric_mac}",
    ]
    if spec.boot.kernel is not None:
        argv += ["-kernel", str(spec.boot.kernel)]
        if spec.boot.initrd is not None:
            argv += ["-initrd", str(spec.boot.initrd)]
        argv += ["-append", spec.boot.append]
    return argv


def qmp(sock: Path, command: str, arguments: dict | None = None, timeout: float = 5.0) -> dict:
    """One QMP command over the VM's unix socket; returns the ``return`` member (raises on error)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(sock))
        reader = conn.makefile("r")
        json.loads(reader.readline())  # greeting
        for cmd, args in (("qmp_capabilities", None), (command, arguments)):
            msg = {"execute": cmd, **({"arguments": args} if args else {})}
            conn.sendall(json.dumps(msg).encode() + b"\n")
            while True:
                reply = json.loads(reader.readline())
                if "return" in reply or "error" in reply:
                    break  # skip asynchronous events
            if "error" in reply:
                raise RuntimeError(f"QMP {cmd}: {reply['error']}")
        return reply["return"]


class Vm:
    """A VM's lifecycle on this host."""

    def __init__(self, spec: VmSpec, accel: Accel, qemu: str) -> None:
        self.spec, self.accel, self.qemu = spec, accel, qemu

    def proof(self) -> ProcessProof:
        return ProcessProof(
            self.spec.pidfile,
            exe_names=("qemu-system-*",),
            cmdline_contains=str(self.spec.overlay),
            comm=self.spec.comm,
        )

    def pid(self) -> int | None:
        """The proven PID of this VM's QEMU, or None (no pidfile, stale, or someone else's process)."""
        return self.proof().trusted_pid()

    def gone(self) -> str | None:
        """None while this VM's QEMU is proven to run; else why not, with the console's last lines (what the
        guest said before it went: a panic, a power-off)."""
        proof = self.proof()
        pid = proof.read_pid()
        why = f"no pid in {self.spec.pidfile}" if pid is None else proof.why_not(pid)
        if why is None:
            return None
        try:
            tail = self.spec.console.read_bytes()[-4096:].decode(errors="replace").splitlines()[-5:]
        except OSError:
            tail = []
        return why + ("; console ends: " + " | ".join(line.strip() for line in tail) if tail else "")

    def ensure_overlay(self, size: str) -> bool:
        """Create the overlay over the base image unless it exists; True if created."""
        if self.spec.overlay.exists():
            return False
        self.spec.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self.spec.dir / ".disk.qcow2.partial"
        subprocess.run(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "qcow2",
                "-b",
                str(self.spec.boot.image),
                str(partial),
                size,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        partial.chmod(0o600)
        partial.replace(self.spec.overlay)
        return True

    def start(self) -> int:
        """Start QEMU unless this VM already runs; returns the proven PID."""
        pid = self.pid()
        if pid is not None:
            return pid
        self.spec.pidfile.unlink(missing_ok=True)  # stale or foreign: never trusted, never signalled
        self.spec.qmp.unlink(missing_ok=True)
        proc = subprocess.run(
            qemu_argv(self.spec, self.accel, self.qemu), capture_output=True, text=True, timeout=120, check=False
        )
        if proc.returncode != 0:
            raise SubstrateUnavailable(f"QEMU for {self.spec.name} did not start: {proc.stderr.strip()}")
        pid = self.pid()
        if pid is None:
            raise SubstrateUnavailable(f"QEMU for {self.spec.name} started but its pidfile is not proven")
        return pid

    def status(self) -> str:
        """``stopped`` or QEMU's run state (``running``, ``internal-error``, ...)."""
        if self.pid() is None:
            return "stopped"
        try:
            return str(qmp(self.spec.qmp, "query-status").get("status", "unknown"))
        except (OSError, RuntimeError, ValueError):
            return "running (QMP unreachable)"

    def powerdown(self, timeout: float = 90.0) -> float:
        """ACPI power-off through QMP, waiting for QEMU to exit; escalates to quit, then SIGTERM (and SIGKILL) of
        the proven PID. Returns the seconds it took (0 if it was not running). Raises if QEMU still runs after
        all of it: a process in uninterruptible I/O (its overlay's last writes on a loaded host) outlives even
        SIGKILL until the I/O ends, and a power-off that returned then would let destroy remove the disks of a
        VM still running (seen in CI: a QEMU PID alive after destroy)."""
        pid = self.pid()
        if pid is None:
            return 0.0
        t0 = time.monotonic()
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            qmp(self.spec.qmp, "system_powerdown")
        if self._wait_exit(pid, timeout):
            return time.monotonic() - t0
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            qmp(self.spec.qmp, "quit")
        if not self._wait_exit(pid, 10) and not pidproof.terminate(pid, 10) and not pidproof.wait_gone(pid, 60):
            raise SubstrateUnavailable(f"{self.spec.name}: QEMU (pid {pid}) still runs a minute after SIGKILL")
        self.spec.pidfile.unlink(missing_ok=True)
        return time.monotonic() - t0

    @staticmethod
    def _wait_exit(pid: int, timeout: float) -> bool:
        try:
            return poll(lambda: (not pidproof.alive(pid)) or None, what=f"pid {pid} to exit", timeout=timeout)
        except WaitTimedOut:
            return False
