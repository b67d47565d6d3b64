"""Talking to a guest over SSH: readiness, root commands, shipped provisioning scripts, file placement.

Everything goes through :class:`~pytest_slurmflox.base.run.SSHRunner` on the node's loopback port with the
deployment key; host keys are pinned from the seeds, so an unexpected key is refused, never accepted.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from ...base.run import HostKeyRefused, Result, SSHRunner, quoted
from ...base.waits import WaitTimedOut, poll_missing
from ...model.workdir import Workdir
from .. import SubstrateUnavailable
from . import fabric
from .render.cloudinit import ADMIN_USER

#: Sent ahead of every guest script (``fetch``, ``offline``, ``apt_or_offline``, ``dnf_or_offline``).
GUEST_LIB = "_lib.sh"
#: The exit status and first word of a guest script that stopped because the network is missing.
OFFLINE_EXIT = 75
OFFLINE_PREFIX = "slurmflox-offline:"


def guest_script(name: str) -> str:
    """The text of ``provision/guest/<name>`` as shipped in the package, with the shared library ahead of it."""
    guest = resources.files("pytest_slurmflox.provision").joinpath("guest")
    return guest.joinpath(GUEST_LIB).read_text() + "\n" + guest.joinpath(name).read_text()


def guest_script_dir() -> Path:
    return Path(str(resources.files("pytest_slurmflox.provision").joinpath("guest")))


class Guest:
    """One VM reached over SSH as the cloud-init administrator (passwordless sudo)."""

    def __init__(self, workdir: Workdir, node: int, ssh_port_base: int, *, user: str = ADMIN_USER) -> None:
        self.node = node
        self.port = fabric.ssh_port(ssh_port_base, node)
        self.runner = SSHRunner(
            host="127.0.0.1",
            port=self.port,
            user=user,
            key_file=workdir.ssh_key,
            known_hosts=workdir.known_hosts,
            where=fabric.hostname(node),
            connect_timeout=10,
        )

    def wait_ready(self, timeout: float, gone: Callable[[], str | None] = lambda: None) -> None:
        """Block until a command runs over SSH. ``gone`` (e.g. the VM's process proof) says why the VM can no
        longer answer, or None; the wait ends early only when it says so twice, a second apart, so one
        unlucky read of /proc never ends a boot."""

        def missing() -> str | None:
            if (why := gone()) is not None:
                time.sleep(1)
                if (why := gone()) is not None:
                    raise SubstrateUnavailable(f"{self.runner.where}: QEMU is gone while waiting for SSH: {why}")
            if not self._banner():
                return "no SSH banner yet"
            try:
                return None if self.runner.run("true", timeout=20).ok else "command failed"
            except HostKeyRefused:
                raise
            except Exception as exc:  # auth/EOF while cloud-init is still writing keys: keep polling
                self.runner.close()
                return f"{type(exc).__name__}: {exc}"

        try:
            poll_missing(missing, what="SSH", timeout=timeout, interval=2)
        except WaitTimedOut as exc:
            raise SubstrateUnavailable(
                f"{self.runner.where}: SSH on 127.0.0.1:{self.port} not ready after {timeout:.0f}s ({exc.last})"
            ) from None

    def _banner(self) -> bool:
        """True once sshd itself answers. Checked on a raw socket first: QEMU's port forward accepts TCP
        connections even before the guest listens, and paramiko would log a traceback for each early try."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=3) as conn:
                conn.settimeout(5)
                return conn.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def run(self, command: str, *, timeout: float = 120, input: str | None = None) -> Result:
        return self.runner.run(command, timeout=timeout, input=input)

    def root(self, command: str, *, timeout: float = 120, input: str | None = None) -> Result:
        """``command`` as root through passwordless sudo."""
        return self.runner.run(quoted("sudo -n bash -c %s", command), timeout=timeout, input=input)

    def script(self, name: str, *args: str, timeout: float = 600) -> Result:
        """Run a shipped guest script as root, its text on stdin (nothing is left behind in the guest)."""
        return self.runner.run("sudo -n bash -s --", *args, input=guest_script(name), timeout=timeout)

    def put(self, path: str, content: str, mode: str = "0644") -> Result:
        """Write a file as root atomically (install from stdin to a temp name, then rename)."""
        tmp = f"{path}.slurmflox-tmp"
        command = quoted("install -D -m %s /dev/stdin %s && mv -f %s %s", mode, tmp, tmp, path)
        return self.runner.run(quoted("sudo -n bash -c %s", command), input=content, timeout=60)

    def close(self) -> None:
        self.runner.close()
