"""Endpoint: where an SSH login of a target is and how it is reached, resolved through the site's ssh_config.

A target file's ``login`` (and ``admin``) section names an endpoint the way a site's users name it to ``ssh``::

    login: {host: login, ssh_config: ~/.ssh/config}      # everything else from ssh_config's "Host login"
    login: {host: login.example, port: 22, user: alice, key: ~/.ssh/id_ed25519, known_hosts: ~/.ssh/known_hosts,
            proxy_jump: "alice@bastion.example:22", ssh_config: none}

Contract of :func:`parse_endpoint`:

- ``ssh_config``: the file to resolve through (OpenSSH syntax, read with ``paramiko.SSHConfig``); ``none`` reads
  none (as ``ssh -F none``); absent: ``~/.ssh/config`` when it exists. A named file that does not exist is an error.
- ``host`` is the name looked up (``Host`` patterns); the address connected to is that entry's ``HostName``.
- A value the target file gives wins over ssh_config's: ``port`` (else ``Port``, else 22), ``user`` (else ``User``;
  one of them is required), ``key`` (else the first ``IdentityFile`` that exists, else none: the SSH agent's keys),
  ``known_hosts`` (else the first ``UserKnownHostsFile``, else ``~/.ssh/known_hosts`` when it exists), and
  ``proxy_jump`` (else ``ProxyJump``; ``none`` for no jump).
- ProxyJump is one or more hops, comma-separated, outermost first, each ``[user@]host[:port]`` (or
  ``ssh://[user@]host[:port]``), each resolved through the same ssh_config (``HostName``, ``Port``, ``User``,
  ``IdentityFile``, ``UserKnownHostsFile``; a hop without a user anywhere is the local user, as with ``ssh``). A hop's
  host keys are checked against its own ``UserKnownHostsFile``, else the endpoint's known_hosts. The first hop's own
  ``ProxyJump`` is followed (as ``ssh -J`` does), at most :data:`MAX_HOPS` deep.
- Every problem is an :class:`EndpointError`, one line naming the key (``login.user``, ``login.proxy_jump``).

Pure: reads the ssh_config file, opens no connection. The connection itself is ``sshconnect.py``'s.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How many jump hosts one route may have (a ProxyJump loop in an ssh_config ends here, named).
MAX_HOPS = 8
_HOP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@\s/]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s/\[\]]+)(?::(?P<port>\d{1,5}))?/?$")


class EndpointError(ValueError):
    """An endpoint cannot be resolved; the message names the key."""


@dataclass(frozen=True)
class Endpoint:
    """An SSH login as resolved: ``host``/``port`` the address connected to, ``key`` None for the agent's keys,
    ``jumps`` the ProxyJump hops (outermost first, each an :class:`Endpoint` without jumps of its own).
    ``ssh_config``, ``name`` (the name the target gave, when ssh_config's HostName replaced it) and ``proxy_jump``
    (as the target gave it) are what :func:`endpoint_document` writes back, so a re-read resolves the same."""

    host: str
    port: int
    user: str
    key: Path | None
    known_hosts: Path | None
    jumps: tuple[Endpoint, ...] = ()
    ssh_config: Path | None = None
    name: str = ""
    proxy_jump: str | None = None


def _path(value: Any, base: Path) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _config(value: Any, base: Path, where: str) -> tuple[Path | None, Any]:
    """(the ssh_config path, its parsed form) or (None, None) for none."""
    import paramiko

    if value in (None, ""):
        default = Path("~/.ssh/config").expanduser()
        path = default if default.is_file() else None
    elif str(value) == "none":
        path = None
    else:
        path = _path(value, base)
        if not path.is_file():
            raise EndpointError(f"{where}.ssh_config: {path} does not exist")
    if path is None:
        return None, None
    try:
        return path, paramiko.SSHConfig.from_path(str(path))
    except Exception as exc:  # paramiko raises ConfigParseError and others: one line naming the file
        raise EndpointError(f"{where}.ssh_config: {path} cannot be read: {exc}") from None


def _lookup(config: Any, name: str, path: Path | None, where: str) -> Mapping[str, Any]:
    """ssh_config's options for ``name`` ({} without a config); a lookup paramiko cannot do (``Match exec`` without
    the invoke package, a bad token) is one line naming the section."""
    if config is None:
        return {}
    try:
        return config.lookup(name)
    except Exception as exc:
        raise EndpointError(f"{where}.ssh_config{f' {path}' if path else ''}: cannot resolve {name}: {exc}") from None


def _first_file(values: Any, base: Path) -> Path | None:
    """The first of ssh_config's paths (a list, or one space-separated string) that exists."""
    items = values.split() if isinstance(values, str) else list(values or ())
    for item in items:
        path = _path(item, base)
        if path.is_file():
            return path
    return None


def _default_known_hosts() -> Path | None:
    path = Path("~/.ssh/known_hosts").expanduser()
    return path if path.is_file() else None


def _port(value: Any, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise EndpointError(f"{where}: port {value!r} is not a TCP port (1-65535)")
    return port


def parse_endpoint(doc: Mapping[str, Any], base: Path, where: str) -> Endpoint:
    """The endpoint a target file's section ``where`` (``login``, ``admin``) names; see the module's contract."""
    if not isinstance(doc, Mapping) or doc.get("host") in (None, ""):
        raise EndpointError(f"{where}.host is required")
    config_path, config = _config(doc.get("ssh_config"), base, where)
    cfg_base = config_path.parent if config_path else base
    name = str(doc["host"])
    looked = _lookup(config, name, config_path, where)
    user = doc.get("user") or looked.get("user")
    if not user:
        named = f" (or a User for {name} in {config_path})" if config_path else ""
        raise EndpointError(f"{where}.user is required{named}")
    known = _path(doc["known_hosts"], base) if doc.get("known_hosts") else None
    known = known or _first_file(looked.get("userknownhostsfile"), cfg_base) or _default_known_hosts()
    declared_jump = str(doc["proxy_jump"]) if doc.get("proxy_jump") else None
    hops = declared_jump or looked.get("proxyjump")
    hostname = str(looked.get("hostname") or name)
    return Endpoint(
        host=hostname,
        port=_port(doc.get("port") or looked.get("port") or 22, f"{where}.port"),
        user=str(user),
        key=_path(doc["key"], base) if doc.get("key") else _first_file(looked.get("identityfile"), cfg_base),
        known_hosts=known,
        jumps=_jumps(hops, config, cfg_base, known, f"{where}.proxy_jump", 0),
        ssh_config=config_path,
        name=name if hostname != name else "",
        proxy_jump=declared_jump,
    )


def split_hop(text: str) -> tuple[str | None, str, int | None] | None:
    """``[user@]host[:port]`` (or ``ssh://...``, ``[v6]:port``) as (user or None, host, port or None); None when
    ``text`` is not of that form. The port is not range-checked here (:func:`parse_endpoint` does)."""
    match = _HOP.match(text.strip())
    if match is None:
        return None
    return match["user"], match["host"].strip("[]"), int(match["port"]) if match["port"] else None


def _jumps(text: Any, config: Any, base: Path, known: Path | None, where: str, depth: int) -> tuple[Endpoint, ...]:
    """The hops of a ProxyJump value, outermost first; the first hop's own ProxyJump in front of it."""
    if not text or str(text).strip() == "none":
        return ()
    hops: list[Endpoint] = []
    for i, spec in enumerate(str(text).split(",")):
        hop = split_hop(spec)
        if hop is None:
            raise EndpointError(f"{where}: {spec.strip()!r} is not [user@]host[:port]")
        user, name, port = hop
        looked = _lookup(config, name, None, where)
        if i == 0 and looked.get("proxyjump") and looked["proxyjump"] != "none":
            if depth >= MAX_HOPS:
                raise EndpointError(f"{where}: more than {MAX_HOPS} jump hosts (a ProxyJump loop at {name}?)")
            hops += _jumps(looked["proxyjump"], config, base, known, where, depth + 1)
        hops.append(
            Endpoint(
                host=str(looked.get("hostname") or name),
                port=_port(port if port is not None else looked.get("port") or 22, f"{where} ({name})"),
                user=str(user or looked.get("user") or pwd.getpwuid(os.getuid()).pw_name),
                key=_first_file(looked.get("identityfile"), base),
                known_hosts=_first_file(looked.get("userknownhostsfile"), base) or known,
            )
        )
    if len(hops) > MAX_HOPS:
        raise EndpointError(f"{where}: more than {MAX_HOPS} jump hosts")
    return tuple(hops)


def endpoint_document(endpoint: Endpoint) -> dict[str, Any]:
    """What a target file holds for ``endpoint``: read back by :func:`parse_endpoint` into an equal one (the
    ssh_config it was resolved through is named, ``none`` when none was: a re-read never picks one up)."""
    doc: dict[str, Any] = {
        "host": endpoint.name or endpoint.host,
        "port": endpoint.port,
        "user": endpoint.user,
        "key": str(endpoint.key) if endpoint.key else None,
        "known_hosts": str(endpoint.known_hosts) if endpoint.known_hosts else None,
        "ssh_config": str(endpoint.ssh_config) if endpoint.ssh_config else "none",
    }
    if endpoint.proxy_jump:
        doc["proxy_jump"] = endpoint.proxy_jump
    return doc
