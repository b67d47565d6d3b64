"""The ``directory`` capability of a target (groups TD and TDC): how to reach the directory service that names
the login endpoint's users, and what it says about one user, read by our code.

Target file::

    directory:
      uri: ldap://ldap.example/     # queried with ldapsearch on the admin endpoint (the login endpoint without one)
      base: dc=example,dc=org
      user: alice                   # a directory user: the login user, with no local account on any worker
      groups: [hpc]                 # supplementary groups the directory gives it (checked by name and number)
      bind_dn: cn=reader,dc=example,dc=org         # optional (anonymous otherwise)
      bind_password_file: /etc/ldap/reader.secret  # optional: a file ON THE ADMIN ENDPOINT (ldapsearch -y)
      modify: ldapmodify -x -H ldap://ldap.example/ -D cn=admin,dc=example,dc=org -y /root/admin.secret
                                    # optional: a command on the admin endpoint applying LDIF from stdin (TDC)

The directory is read with ``ldapsearch`` (rfc2307: posixAccount, posixGroup with ``memberUid``; ``member`` and
``uniqueMember`` DNs are also matched), never through NSS: what the login endpoint or a worker resolves is what
the checks compare with it. The bind secret stays on the admin endpoint; only its path is in the target file.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.run import Result, Runner, command_line


@dataclass(frozen=True)
class Directory:
    """How to reach the directory (``directory`` in the target file), and whom to check."""

    uri: str
    base: str
    user: str
    groups: tuple[str, ...] = ()
    bind_dn: str | None = None
    bind_password_file: str | None = None  #: a path on the admin endpoint, never the secret itself
    modify: str | None = None  #: command on the admin endpoint that applies LDIF from stdin


def parse_directory(doc: Any) -> Directory | None:
    """``directory`` of a target document; ValueError naming the field when it is malformed."""
    if not doc:
        return None
    if not isinstance(doc, Mapping):
        raise ValueError("target.directory must be a mapping (uri, base, user, groups, ...)")
    for key in ("uri", "base", "user"):
        if doc.get(key) in (None, ""):
            raise ValueError(f"directory.{key} is required")
    groups = doc.get("groups") or []
    if not isinstance(groups, list):
        raise ValueError("directory.groups must be a list of group names")
    if bool(doc.get("bind_dn")) != bool(doc.get("bind_password_file")):
        raise ValueError("directory.bind_dn and directory.bind_password_file go together")
    optional = {k: str(doc[k]) if doc.get(k) else None for k in ("bind_dn", "bind_password_file", "modify")}
    return Directory(str(doc["uri"]), str(doc["base"]), str(doc["user"]), tuple(str(g) for g in groups), **optional)


@dataclass(frozen=True)
class DirectoryIdentity:
    """What the directory says about one user: numbers, names, and the DNs an edit needs."""

    user: str
    dn: str
    uid: int
    gid: int
    groups: dict[int, str] = field(default_factory=dict)  #: every group the user is in (primary too): gid -> name
    group_dns: dict[str, str] = field(default_factory=dict)  #: group name -> DN

    @property
    def primary(self) -> str:
        return self.groups.get(self.gid, str(self.gid))

    def id_fields(self) -> dict[str, str]:
        """What ``id`` prints for this user, as ``uid``, ``gid`` and the set of ``groups`` entries."""
        return {
            "uid": f"{self.uid}({self.user})",
            "gid": f"{self.gid}({self.primary})",
            "groups": ",".join(f"{g}({n})" for g, n in sorted(self.groups.items())),
        }


def escape_filter(value: str) -> str:
    """RFC 4515 escaping of an assertion value."""
    return "".join(f"\\{ord(c):02x}" if c in "*()\\\0" else c for c in value)


def ldapsearch(d: Directory, filter_: str, *attrs: str, scope: str = "sub") -> str:
    """The shell command that reads the directory (simple bind with the secret file, or anonymous)."""
    auth = ["-D", d.bind_dn, "-y", d.bind_password_file] if d.bind_dn and d.bind_password_file else []
    argv = ["ldapsearch", "-x", "-LLL", "-o", "ldif-wrap=no", "-H", d.uri, "-b", d.base, "-s", scope, *auth]
    return command_line("ldapsearch", [*argv[1:], filter_, *attrs])


def parse_ldif(text: str) -> list[dict[str, list[str]]]:
    """Entries of unwrapped ``ldapsearch -LLL`` output; attribute names lower-cased, ``::`` values decoded."""
    entries: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] = {}
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if current:
                entries.append(current)
            current = {}
            continue
        if line.startswith("#") or ":" not in line:
            continue
        name, _, value = line.partition(":")
        if value.startswith(":"):
            value = base64.b64decode(value[1:].strip()).decode(errors="replace")
        current.setdefault(name.strip().lower(), []).append(value.strip())
    return entries


def probe(runner: Runner, d: Directory) -> str | None:
    """None when the directory answers a base search with the declared credentials, else why not."""
    res = runner.run(ldapsearch(d, "(objectClass=*)", "1.1", scope="base"), timeout=30)
    if res.ok:
        return None
    detail = (res.stderr or res.stdout).strip().splitlines()
    return f"ldapsearch of {d.base} at {d.uri} exited {res.exit_status}: {detail[-1] if detail else ''}".strip()


def lookup(runner: Runner, d: Directory) -> tuple[DirectoryIdentity | str, list[Result]]:
    """What the directory says about ``d.user`` (or why it cannot say), with the queries as evidence."""
    user_filter = f"(&(objectClass=posixAccount)(uid={escape_filter(d.user)}))"
    res = runner.run(ldapsearch(d, user_filter, "uid", "uidNumber", "gidNumber"), timeout=30)
    evidence = [res]
    if not res.ok:
        return f"the user query failed (exit {res.exit_status})", evidence
    users = [e for e in parse_ldif(res.stdout) if "uidnumber" in e and "gidnumber" in e]
    if len(users) != 1:
        return f"the directory holds {len(users)} posixAccount entries for uid={d.user} (want exactly one)", evidence
    entry = users[0]
    dn, uid, gid = entry["dn"][0], int(entry["uidnumber"][0]), int(entry["gidnumber"][0])
    dn_q = escape_filter(dn)
    member = f"(memberUid={escape_filter(d.user)})(member={dn_q})(uniqueMember={dn_q})"
    res = runner.run(ldapsearch(d, f"(&(objectClass=posixGroup)(|(gidNumber={gid}){member}))", "cn", "gidNumber"))
    evidence.append(res)
    if not res.ok:
        return f"the group query failed (exit {res.exit_status})", evidence
    groups, dns = {}, {}
    for group in parse_ldif(res.stdout):
        if "cn" in group and "gidnumber" in group:
            groups[int(group["gidnumber"][0])] = group["cn"][0]
            dns[group["cn"][0]] = group["dn"][0]
    return DirectoryIdentity(d.user, dn, uid, gid, groups, dns), evidence


def membership_ldif(group_dn: str, user: str, *, add: bool) -> str:
    """The rfc2307 edit that adds ``user`` to (or removes it from) the group ``group_dn``."""
    op = "add" if add else "delete"
    return f"dn: {group_dn}\nchangetype: modify\n{op}: memberUid\nmemberUid: {user}\n"
