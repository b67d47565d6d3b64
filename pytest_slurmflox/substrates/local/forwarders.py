"""The supervisors of the loopback forwarders: start, prove, check and stop them.

The forwarder program itself is ``forward_program.py`` (standalone, copied into ``<workdir>/local/scripts`` and run
there); this module supervises it. :class:`LoginForwarder`: one process per cluster to the login node's sshd on
127.0.0.1:LOGIN_SSH_PORT, recorded in ``<workdir>/local/forward.pid.json`` with the login namespace as its proof;
:class:`RestForwarder`: the same for slurmrestd; :class:`Forwarders`: both, over one cluster.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...base.waits import WaitTimedOut, poll
from .. import SubstrateUnavailable, proc
from .cluster import LocalCluster
from .network import Fabric, address_for, ns_inode

LOGIN = "login"


class LoginForwarder:
    #: the node, its address and the port inside its namespace; the file stem of the pid record and log
    node, address, inner_port, stem = LOGIN, address_for(3), 22, "forward"

    def __init__(self, local: Path, fabric: Fabric, port: int) -> None:
        self.local = local
        self.fabric = fabric
        self.port = port

    @property
    def pid_file(self) -> Path:
        return self.local / f"{self.stem}.pid.json"

    @property
    def log_file(self) -> Path:
        return self.local / f"{self.stem}.log"

    def _markers(self) -> tuple[str, ...]:
        return (str(self.local / "scripts" / "forward_program.py"), str(Fabric.ns_path(self.fabric.node_ns(self.node))))

    def _ours_on_port(self) -> bool:
        rec = proc.PidRecord.read(self.pid_file)
        return proc.proven(rec) and rec is not None and f"\0{self.port}\0" in "\0".join(proc.cmdline(rec.pid)) + "\0"

    def running(self) -> bool:
        return proc.proven(proc.PidRecord.read(self.pid_file))

    def ensure(self) -> None:
        """Keep our forwarder on LOGIN_SSH_PORT, else (re)start it and record it once it listens."""
        if self._ours_on_port():
            return
        self.stop()
        argv = [
            sys.executable,
            str(self.local / "scripts" / "forward_program.py"),
            "127.0.0.1",
            str(self.port),
            str(Fabric.ns_path(self.fabric.node_ns(self.node))),
            self.address,
            str(self.inner_port),
        ]
        with self.log_file.open("ab") as log:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        exe = Path(f"/proc/{popen.pid}/exe").readlink().name
        self._wait_listening(popen)
        # the forwarder moved itself into the login namespace: record that namespace as its proof
        rec = proc.record_for(popen.pid, exe, self._markers(), ns_inode(self.fabric.node_ns(self.node)))
        rec.write(self.pid_file)

    def _wait_listening(self, popen: subprocess.Popen[bytes]) -> None:

        def listening() -> bool | None:
            if popen.poll() is not None:
                tail = self.log_file.read_text()[-600:]
                if "Address already in use" in tail:
                    raise SubstrateUnavailable(
                        f"local: 127.0.0.1:{self.port} (LOGIN_SSH_PORT) is taken by another program; choose another "
                        "port with --slurmflox-login-ssh-port"
                    )
                raise SubstrateUnavailable(f"local: the login port forwarder exited: {tail}")
            return ("forwarding" in self.log_file.read_text()) or None

        # as before: a forwarder still silent after 10 s is not an error here; whoever waits for the endpoint
        # behind it (the login's SSH banner, slurmrestd) names one that does not answer
        with contextlib.suppress(WaitTimedOut):
            poll(listening, what="the login port forwarder", timeout=10, interval=0.02)

    def check_port(self) -> None:
        """Refuse before changing anything if LOGIN_SSH_PORT is held by something other than our forwarder."""
        rec = proc.PidRecord.read(self.pid_file)
        if proc.proven(rec) and rec is not None and str(self.port) in proc.cmdline(rec.pid):
            return
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise SubstrateUnavailable(
                    f"local: 127.0.0.1:{self.port} (LOGIN_SSH_PORT) is taken by another program ({exc.strerror}); "
                    "choose another port with --slurmflox-login-ssh-port (nothing was changed)"
                ) from None

    def stop(self) -> None:
        rec = proc.PidRecord.read(self.pid_file)
        if rec is not None and proc.signal_proven(rec):
            proc.wait_gone(rec.pid, 5)
        self.pid_file.unlink(missing_ok=True)

    def ssh_banner(self) -> bool:
        """True once an SSH server answers through the forwarder."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                sock.settimeout(2)
                return sock.recv(64).startswith(b"SSH-")
        except OSError:
            return False


class RestForwarder(LoginForwarder):
    """The same forwarder for slurmrestd in the controller's namespace. Its loopback port is chosen once
    (a free port, recorded in the state by the substrate) and kept across `up`s."""

    node, address, inner_port, stem = "ctl", address_for(2), 6820, "rest-forward"

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        """True once an HTTP server answers through the forwarder (any status: slurmrestd refuses tokenless
        requests, which is an answer)."""
        import httpx

        try:
            httpx.get(self.url() + "/openapi/v3", timeout=2)
            return True
        except httpx.HTTPError:
            return False


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Forwarders:
    """The cluster's two loopback forwarders: to the login node's sshd on LOGIN_SSH_PORT, and to slurmrestd on the
    port recorded in the cluster's state. The substrate and its pool share one: the pool restarts the controller,
    whose namespace slurmrestd's forwarder lives in, and brings it back (no probe of what the pool was given)."""

    cluster: LocalCluster

    def login(self) -> LoginForwarder:
        c = self.cluster
        return LoginForwarder(c.local, c.fabric, c.settings.login_ssh_port)

    def rest(self, port: int | None = None) -> RestForwarder:
        """slurmrestd's forwarder, on ``port`` or the one recorded in the state (0 when none is recorded yet)."""
        c = self.cluster
        return RestForwarder(c.local, c.fabric, port or int(c.read_state().get("rest_port") or 0))

    def ensure_rest(self) -> int:
        """Keep the recorded REST port when it is ours or free; otherwise take a free one (recorded by the caller)."""
        port = int(self.cluster.read_state().get("rest_port") or 0)
        if port:
            try:
                self.rest(port).check_port()
            except SubstrateUnavailable:
                port = 0
        fwd = self.rest(port or free_loopback_port())
        fwd.ensure()
        return fwd.port
