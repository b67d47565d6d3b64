"""One SSH route with paramiko: through zero or more jump hosts to a destination, host keys checked at every hop.

Contract of :func:`open_route`:

- Each hop is connected through a ``direct-tcpip`` channel of the previous hop's transport, handed to paramiko as
  ``sock=`` (how Fabric's ``Connection.open_gateway`` in fabric/connection.py tunnels to a host behind a gateway,
  and what OpenSSH's ProxyJump does with ``ssh -W``).
- Host keys are strict at every hop: ``RejectPolicy`` against that hop's known_hosts; an unknown or changed key is
  :class:`HostKeyRefused` naming the hop and the file, and nothing is ever added to a known_hosts.
- Credentials: a hop's key file when it has one (only that key); none: the SSH agent's keys (``paramiko.Agent``,
  ``SSH_AUTH_SOCK``). A passphrase-protected key file is used through the agent when the agent holds keys, and is
  otherwise :class:`KeyUnusable` saying so, with the fix (``ssh-add <path>``), in one line.
- A refused forward or an unreachable hop is :class:`RouteRefused` naming the hop that refused; every client opened
  so far is closed before it is raised.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class HostKeyRefused(RuntimeError):
    """The SSH server presented a host key that is not pinned in known_hosts."""


class KeyUnusable(RuntimeError):
    """No usable credential for a hop: the key file is not a key or needs a passphrase, or no agent holds a key."""


class RouteRefused(RuntimeError):
    """A jump host would not forward to the next hop, or a hop did not answer."""


@dataclass(frozen=True)
class Hop:
    """One SSH server of a route: where, as whom, with which key (None: the agent's) and known_hosts."""

    host: str
    port: int
    user: str
    key_file: Path | None
    known_hosts: Path | None

    @property
    def name(self) -> str:
        return f"{self.user}@[{self.host}]:{self.port}"


def open_route(hops: Sequence[Hop], timeout: float) -> list[Any]:
    """Connected ``paramiko.SSHClient`` objects, one per hop in order; the last is the destination's."""
    import paramiko

    clients: list[Any] = []
    try:
        for hop in hops:
            sock = None
            if clients:
                previous = hops[len(clients) - 1]
                try:
                    sock = (
                        clients[-1]
                        .get_transport()
                        .open_channel("direct-tcpip", dest_addr=(hop.host, hop.port), src_addr=("", 0), timeout=timeout)
                    )
                except (paramiko.SSHException, OSError) as exc:
                    raise RouteRefused(
                        f"jump host {previous.name} did not forward to [{hop.host}]:{hop.port}: {exc}"
                    ) from None
            clients.append(_connect(hop, sock, timeout))
    except BaseException:
        for client in reversed(clients):
            client.close()
        raise
    return clients


def _connect(hop: Hop, sock: Any, timeout: float) -> Any:
    import paramiko

    client = paramiko.SSHClient()
    if hop.known_hosts is not None and hop.known_hosts.exists():
        client.load_host_keys(str(hop.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    pkey = load_key(hop.key_file) if hop.key_file is not None else None
    if pkey is None and not agent_has_keys():
        client.close()
        raise KeyUnusable(_no_key(hop))
    try:
        client.connect(
            hop.host,
            port=hop.port,
            username=hop.user,
            pkey=pkey,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=pkey is None,
            look_for_keys=False,
        )
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc) or isinstance(exc, paramiko.BadHostKeyException):
            raise HostKeyRefused(
                f"host key of [{hop.host}]:{hop.port} is not pinned in {hop.known_hosts}: {exc}"
            ) from None
        raise
    except OSError as exc:
        client.close()
        raise RouteRefused(f"{hop.name} did not answer: {_why(exc)}") from None
    return client


def _why(exc: OSError) -> str:
    """The operating system's words for a failed connect (paramiko's NoValidConnectionsError keeps them per
    address in ``errors``; its own text is "[Errno None] Unable to connect ...")."""
    errors = getattr(exc, "errors", None) or {}
    words = sorted({e.strerror or str(e) for e in errors.values() if isinstance(e, OSError)})
    return "; ".join(words) or str(exc)


def _no_key(hop: Hop) -> str:
    sock = os.environ.get("SSH_AUTH_SOCK")
    agent = f"the ssh-agent at {sock} holds no key" if sock else "no ssh-agent (SSH_AUTH_SOCK is not set)"
    return f"no key for {hop.name}: the target and ssh_config name none and {agent}; load one: ssh-add <key>"


def agent_has_keys() -> bool:
    """Whether the SSH agent of ``SSH_AUTH_SOCK`` answers with at least one key."""
    import paramiko

    if not os.environ.get("SSH_AUTH_SOCK"):
        return False
    try:
        agent = paramiko.Agent()
    except paramiko.SSHException:
        return False
    try:
        return bool(agent.get_keys())
    finally:
        agent.close()


def load_key(path: Path) -> Any:
    """The private key in ``path``; None when it is passphrase-protected and the agent holds keys (the agent then
    signs, as ``ssh`` uses an agent's copy of an ``IdentityFile``). :class:`KeyUnusable` otherwise, one line."""
    import paramiko

    encrypted = False
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key_file(str(path))
        except paramiko.PasswordRequiredException:
            encrypted = True
        except (paramiko.SSHException, ValueError):
            continue
        except OSError as exc:
            raise KeyUnusable(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if encrypted:
        if agent_has_keys():
            return None
        raise KeyUnusable(
            f"{path}: the private key is protected by a passphrase; load it into ssh-agent: ssh-add {path}"
        )
    raise KeyUnusable(f"{path}: not an ed25519, ecdsa or rsa private key")
