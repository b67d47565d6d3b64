"""Whether the login endpoint can be reached at all, asked once before anything else is asked of it.

Contract of :func:`reach`: one SSH connection is opened through the runner (kept by it for every later command);
None when it opens, otherwise one line naming ``user@host:port``, the stage that failed (name resolution, TCP
connect, host key, credentials, authentication, SSH handshake) and what to check. This is "the login is
unreachable", distinct from "slurmctld is unreachable from the login" (the Slurm probe, once the login answers).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ..base.run import SSHRunner
from ..base.sshconnect import HostKeyRefused, KeyUnusable, RouteRefused
from ..reporting.signoff import NOT_RUN_PREFIX


@dataclass(frozen=True)
class Unreachable:
    """Why the login endpoint could not be reached: who, at which stage, the error, and what to check."""

    who: str
    stage: str
    error: str
    check: str

    def line(self) -> str:
        return f"login {self.who} unreachable ({self.stage}): {self.error}; check {self.check}"


def unreachable_reason(reason: str) -> bool:
    """Whether a check's skip reason is the login's :meth:`Unreachable.line` (the check never reached the login)."""
    return reason.startswith(NOT_RUN_PREFIX + "login ") and " unreachable (" in reason


def _who(runner: SSHRunner) -> str:
    return f"{runner.user}@{runner.host}:{runner.port}"


def _resolves(host: str, port: int) -> str | None:
    """None when the name resolves here, else the resolver's error."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return str(exc)
    return None


def _stage(exc: BaseException, runner: SSHRunner) -> tuple[str, str]:
    """(stage, what to check) for an exception the first connection raised."""
    import paramiko

    where = f"{runner.host}:{runner.port}"
    if isinstance(exc, HostKeyRefused):
        return "host key", f"the host key pinned in {runner.known_hosts} for {where} (login.known_hosts)"
    if isinstance(exc, KeyUnusable):
        return "credentials", "login.key or the ssh-agent's keys (ssh-add <key>)"
    if isinstance(exc, paramiko.AuthenticationException):
        return "authentication", f"login.user and login.key: the key must be in {runner.user}'s authorized_keys"
    if isinstance(exc, RouteRefused):
        via = " and the jump hosts (login.proxy_jump)" if runner.jumps else ""
        return "TCP connect", f"that sshd listens on {where}{via} and no firewall is in between"
    return "SSH handshake", f"that {where} is an SSH server (login.port)"


def reach(runner: SSHRunner) -> Unreachable | None:
    """None when the login endpoint accepts an SSH session (the connection stays open on ``runner``), otherwise
    why not, in one line (:meth:`Unreachable.line`)."""
    first = runner.jumps[0] if runner.jumps else None
    host, port = (first.host, first.port) if first else (runner.host, runner.port)
    unresolved = _resolves(host, port)
    if unresolved is not None:
        return Unreachable(
            _who(runner), "name resolution", f"{host!r} does not resolve: {unresolved}", "login.host (or ssh_config)"
        )
    try:
        runner.connect()
    except Exception as exc:  # every way a first connection fails is a reason, told in one line
        stage, check = _stage(exc, runner)
        return Unreachable(_who(runner), stage, str(exc) or type(exc).__name__, check)
    return None
