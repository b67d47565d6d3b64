"""A real OpenSSH sshd and ssh-agent of a test's own, on loopback: the SSH layer is tested against the real thing.

``running_sshd`` starts ``sshd -D`` on 127.0.0.1:<free port> with a fresh host key, logging to a file (``LogLevel
VERBOSE`` unless the test asks for more), letting root in with the keys given; ``running_agent`` starts
``ssh-agent -D`` on a socket in the test's directory. Both end by their own PID when the ``with`` block ends. A
test SKIPs (naming what is missing) without an sshd binary or without root, as tests/skipguard.py expects.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)


def keygen(path: Path, passphrase: str = "") -> Path:
    """A fresh ed25519 key pair at ``path`` (and ``path.pub``)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Sshd:
    port: int
    host_pub: str  #: "ssh-ed25519 AAAA..."
    dir: Path
    log: Path

    def known_hosts_line(self, host: str = "127.0.0.1") -> str:
        return f"[{host}]:{self.port} {self.host_pub}\n"


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def running_sshd(d: Path, authorized: str, extra: str = "") -> Iterator[Sshd]:
    """An sshd on 127.0.0.1 letting root in with the public keys ``authorized`` (authorized_keys text); ``extra``
    is appended to its sshd_config (e.g. ``AllowTcpForwarding yes``)."""
    if SSHD is None:
        pytest.skip("no sshd binary (Debian package openssh-server) on this host")
    if os.geteuid() != 0:
        pytest.skip("needs root: sshd must switch to the logged-in user")
    d.mkdir(parents=True, exist_ok=True)
    host_key = keygen(d / "host_ed25519")
    (d / "authorized_keys").write_text(authorized)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege-separation directory sshd insists on
    port = free_port()
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\nStrictModes no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n" + extra
    )
    log = d / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-E", str(log), "-f", str(config)])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not come up: {log.read_text() if log.exists() else 'no log'}")
            time.sleep(0.1)
        fields = (d / "host_ed25519.pub").read_text().split()
        yield Sshd(port, f"{fields[0]} {fields[1]}", d, log)
    finally:
        _stop(proc)


@dataclass(frozen=True)
class Agent:
    sock: Path
    pid: int

    def add(self, key: Path) -> None:
        """``ssh-add key`` into this agent."""
        env = {**os.environ, "SSH_AUTH_SOCK": str(self.sock)}
        subprocess.run(["ssh-add", "-q", str(key)], env=env, check=True, capture_output=True, timeout=30)

    def keys(self) -> list[str]:
        """``ssh-add -l``: the fingerprints the agent holds."""
        env = {**os.environ, "SSH_AUTH_SOCK": str(self.sock)}
        listed = subprocess.run(["ssh-add", "-l"], env=env, capture_output=True, text=True, timeout=30, check=False)
        return listed.stdout.splitlines() if listed.returncode == 0 else []


@contextmanager
def running_agent(d: Path) -> Iterator[Agent]:
    """An ``ssh-agent -D`` of this test's own, its socket in ``d``; killed by its PID at the end."""
    d.mkdir(parents=True, exist_ok=True)
    sock = d / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ssh-agent did not come up (exit {proc.poll()})")
            time.sleep(0.05)
        yield Agent(sock, proc.pid)
    finally:
        _stop(proc)
