"""Runners: one way to run a shell command somewhere as someone, and one record of what happened.

Suites never care *how* a command reaches a machine; they care about the evidence: the command, where and as
whom it ran, exit status, output and duration. Every runner returns a :class:`Result` carrying exactly that,
and hands it to an optional observer (the evidence recorder) before returning it.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .sshconnect import Hop, open_route
from .sshconnect import HostKeyRefused as HostKeyRefused

Observer = Callable[["Result"], None]


@dataclass(frozen=True)
class Result:
    """What one command did. ``where`` names the machine/node/pod, ``user`` the identity it ran as."""

    command: str
    where: str
    user: str
    exit_status: int
    stdout: str
    stderr: str
    duration: float
    started: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self) -> Result:
        """Return self if the command succeeded, else raise :class:`CommandFailed` with the evidence."""
        if not self.ok:
            raise CommandFailed(self)
        return self

    def describe(self, limit: int = 2000) -> str:
        def cut(text: str) -> str:
            return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"

        return (
            f"$ {self.command}\n  [{self.user}@{self.where}, exit {self.exit_status}, {self.duration:.2f}s]\n"
            f"  stdout: {cut(self.stdout.rstrip())}\n  stderr: {cut(self.stderr.rstrip())}"
        )


class CommandFailed(RuntimeError):
    def __init__(self, result: Result) -> None:
        self.result = result
        super().__init__("command failed:\n" + result.describe())


@runtime_checkable
class Runner(Protocol):
    """Runs a shell command line (interpreted by ``bash -c`` on the far side). Extra ``args`` are appended to
    ``command`` shell-quoted, so a value never becomes shell syntax: ``run("id -u", user)``."""

    where: str
    user: str

    def run(
        self,
        command: str,
        *args: str,
        input: str | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Result: ...

    def close(self) -> None:
        """Release what the runner holds (a kept connection); a runner that holds nothing does nothing. A closed
        runner may run again (it reconnects); closing twice is harmless."""


class RunnerUnavailable(RuntimeError):
    """The place a runner runs in does not exist right now (e.g. a stopped node); the result is exit 255."""


def command_line(command: str, args: Sequence[object] = ()) -> str:
    """``command`` followed by each of ``args`` shell-quoted: what every runner records and runs."""
    return " ".join([command, *(quoted("%s", arg) for arg in args)])


def quoted(template: str, *values: object) -> str:
    """``template`` with each ``%s`` replaced by one of ``values`` shell-quoted: the one way a value goes *inside*
    a shell line, where :func:`command_line` appends. ``template`` is a ``%`` format, so a literal ``%`` in it is
    written ``%%`` (``quoted("date +%%s -d %s", when)``); a ``%`` inside a value is never formatted. One value is
    one shell word whatever it holds (``quoted("%s", value)``). The model is testinfra's ``host.run("ls %s",
    path)`` (``BaseBackend.quote`` in pytest-testinfra's ``testinfra/backend/base.py``). The only quoting in the
    package and the suites: tests/unit/test_structure_quoting.py fails on a ``.run(f"...{value}...")`` whose value
    did not pass through here, and on any other quoting helper."""
    return template % tuple(shlex.quote(str(value)) for value in values)


def with_env(line: str, env: Mapping[str, str] | None) -> str:
    """``line`` preceded by ``export K=V;`` for each variable (values quoted): the one env prefix of every runner,
    so the far side's shell sees the same variables however the command got there."""
    if not env:
        return line
    return " ".join(f"export {key}={quoted('%s', value)};" for key, value in env.items()) + " " + line


@dataclass(frozen=True)
class Invocation:
    """One ``run(command, *args, env=...)`` as every runner starts it: ``line`` is the command line the evidence
    records (``args`` quoted onto ``command``), ``script`` what ``bash -c`` runs on the far side (``line`` behind
    the exports of ``env``), ``t0`` when the runner started it (``time.monotonic``)."""

    line: str
    script: str
    t0: float

    @classmethod
    def start(cls, command: str, args: Sequence[object], env: Mapping[str, str] | None) -> Invocation:
        line = command_line(command, args)
        return cls(line, with_env(line, env), time.monotonic())

    @property
    def argv(self) -> list[str]:
        """``bash -c <script>``: what a runner with an argv interface (a process, a pod exec) runs."""
        return ["bash", "-c", self.script]

    def result(self, observer: Observer | None, where: str, user: str, rc: int, out: str, err: str) -> Result:
        """The :class:`Result` of this invocation (see :func:`finish`)."""
        return finish(observer, self.line, where, user, rc, out, err, self.t0)


def finish(
    observer: Observer | None, command: str, where: str, user: str, rc: int, out: str, err: str, t0: float
) -> Result:
    """The one way a runner turns an outcome into a :class:`Result` and hands it to the observer."""
    took = time.monotonic() - t0
    # when it started, on the wall clock (the evidence's and the timeline's), not when it finished
    result = Result(command, where, user, rc, out, err, took, started=time.time() - took)
    if observer is not None:
        observer(result)
    return result


@dataclass
class LocalRunner:
    """Commands on this host, via ``bash -c``. :meth:`argv_prefix` wraps them (a subclass enters a node)."""

    where: str = field(default_factory=socket.gethostname)
    user: str = field(default_factory=lambda: _whoami())
    prefix: tuple[str, ...] = ()
    observer: Observer | None = None
    cwd: Path | None = None

    def argv_prefix(self) -> list[str]:
        """What runs ``bash -c``; raises :class:`RunnerUnavailable` when there is nowhere to run."""
        return list(self.prefix)

    def run(
        self,
        command: str,
        *args: str,
        input: str | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        call = Invocation.start(command, args, env)
        try:
            argv = [*self.argv_prefix(), *call.argv]
        except RunnerUnavailable as exc:
            return call.result(self.observer, self.where, self.user, 255, "", str(exc))
        rc, out, err = run_process(argv, input=input, timeout=timeout, cwd=self.cwd)
        return call.result(self.observer, self.where, self.user, rc, out, err)

    def close(self) -> None:
        """Nothing to release: each command is its own process."""


def run_process(
    argv: list[str],
    *,
    input: str | None = None,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a local process; a timeout is exit 124 with what it printed so far."""
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=None if env is None else dict(env),
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return 124, _text(exc.stdout), _text(exc.stderr) + f"\n[timed out after {timeout}s]"
    return proc.returncode, proc.stdout, proc.stderr


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


@dataclass
class SSHRunner:
    """Commands over one kept SSH connection (paramiko), through ``jumps`` (ProxyJump hops, outermost first) when
    given; ``key_file`` None authenticates with the SSH agent's keys. Unknown host keys are refused at every hop,
    never auto-added (sshconnect.py)."""

    host: str
    port: int
    user: str
    key_file: Path | None
    known_hosts: Path | None = None
    observer: Observer | None = None
    where: str = ""
    connect_timeout: float = 15.0
    jumps: tuple[Hop, ...] = ()
    _client: Any = field(default=None, init=False, repr=False)
    _via: list[Any] = field(default_factory=list, init=False, repr=False)  #: the jump hosts' clients
    #: Commands may run from several threads (connection.py asks the login and admin endpoints at once): one
    #: connection per runner, made under this lock; paramiko multiplexes the channels over it.
    _connecting: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.where:
            self.where = f"{self.host}:{self.port}"

    def connect(self):  # -> paramiko.SSHClient
        """The kept connection, opened now when there is none (sshconnect.py's errors when it cannot be)."""
        with self._connecting:
            if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            self.close()
            here = Hop(self.host, self.port, self.user, self.key_file, self.known_hosts)
            *self._via, self._client = open_route([*self.jumps, here], self.connect_timeout)
            return self._client

    def run(
        self,
        command: str,
        *args: str,
        input: str | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        client = self.connect()
        call = Invocation.start(command, args, env)
        channel = client.get_transport().open_session(timeout=self.connect_timeout)
        channel.settimeout(timeout)
        start = "sfx-start-" + secrets.token_hex(6)
        # The login shell may print before our command (a site .bashrc or profile that echoes): everything
        # before the start marker is the site's, never part of what a check reads.
        started = f"printf '%s\\n' {start}; printf '%s\\n' {start} >&2; "
        channel.exec_command(quoted("bash -c %s", started + call.script))
        if input is not None:
            channel.sendall(input.encode())
        channel.shutdown_write()
        out, err = bytearray(), bytearray()
        # not a waits.poll: it drains the channel until EOF, and a timeout is a result (rc 124), not an error
        deadline = time.monotonic() + timeout
        rc = 124
        exited: float | None = None
        while True:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if exited is None and channel.exit_status_ready():
                exited = time.monotonic()
            # sshd may send the exit status before the last of the output (RFC 4254 allows data after it; measured
            # on the bookworm cluster: an `echo` read back empty with exit 0): done at EOF, or a short grace after
            # the exit when a background process keeps the output open
            drained = channel.eof_received or (exited is not None and time.monotonic() - exited > EOF_GRACE_S)
            if exited is not None and drained and not channel.recv_ready() and not channel.recv_stderr_ready():
                rc = channel.recv_exit_status()
                break
            if time.monotonic() > deadline:
                err += f"\n[timed out after {timeout}s]".encode()
                break
            time.sleep(0.005)
        channel.close()
        return call.result(
            self.observer,
            self.where,
            self.user,
            rc,
            after_start(out.decode(errors="replace"), start),
            after_start(err.decode(errors="replace"), start),
        )

    def close(self) -> None:
        """Close the connection and then each jump host's, innermost first."""
        for client in [self._client, *reversed(self._via)]:
            if client is not None:
                client.close()
        self._client, self._via = None, []


#: How long a finished command's output may still arrive after its exit status (see SSHRunner.run).
EOF_GRACE_S = 2.0


def after_start(text: str, start: str) -> str:
    """``text`` after the line ``start`` (whatever the login shell printed before our command is dropped); all
    of ``text`` when the marker never came (the shell failed before it: then its output is the evidence)."""
    _, sep, tail = text.partition(start + "\n")
    return tail if sep else text
