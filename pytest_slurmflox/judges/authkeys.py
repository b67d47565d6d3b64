"""Where a cluster keeps its secrets, read from the cluster's own configuration, wherever the site put them.

A site whose JWT key, Munge key or Slurm key lives at a path of its own is probed there: the places come from
``scontrol show config`` (what slurmctld runs with) and, for Munge, from munged's own arguments on each worker;
``%n``/``%h`` are resolved per worker as slurmd resolves them.

Sources (Slurm's slurm.conf(5), sackd(8), munged(8), jwt.html):

- ``AuthAltParameters`` ``jwt_key=<path>``: the HS256 key auth/jwt signs tokens with (a secret).
- ``AuthType``/``CredType`` ``auth/slurm``/``cred/slurm``: ``slurm.key`` and ``slurm.jwks`` in the directory of
  slurm.conf (``SLURM_CONF`` in the output; sackd(8): "Default value is slurm.key located in the same directory as
  slurm.conf"), and in slurmd's configless cache.
- ``AuthType``/``CredType`` ``auth/munge``/``cred/munge``: munged's ``--key-file`` (munged(8)), by default
  ``/etc/munge/munge.key``.
- ``AuthInfo``: any option naming an absolute path other than munge's ``socket=``.
- ``JobCredentialPrivateKey`` (Slurm before 23.11): the job credential's private key.
- ``SlurmdSpoolDir``: slurmd's credential state (``cred_state*``); slurm.conf(5): "%h" is replaced by the hostname
  and "%n" by the node name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.run import quoted

#: munged's default key (munged(8), --key-file).
MUNGE_DEFAULT_KEY = "/etc/munge/munge.key"
#: Where the reference's clusters keep keys, probed whatever the configuration says (never less than before).
KNOWN_KEYS = ("/etc/munge/munge.key", "/etc/slurm/slurm.key", "/etc/slurm/slurm.jwks")

_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_\[\]]*)\s*=\s?(.*)$")


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` output -> key -> value; ``(null)`` is empty. The first occurrence of a key wins (the
    main block comes first; plugin sections such as ``Cgroup Support Configuration:`` follow a blank line)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            value = m.group(2).strip()
            out.setdefault(m.group(1), "" if value == "(null)" else value)
    return out


def options(value: str) -> dict[str, str]:
    """A comma-separated ``key=value`` list (``AuthInfo``, ``AuthAltParameters``) -> dict; a bare word maps to ''."""
    out: dict[str, str] = {}
    for item in value.split(","):
        key, _, val = item.strip().partition("=")
        if key:
            out[key] = val
    return out


@dataclass(frozen=True)
class KeyPlace:
    """A place a secret lives: ``template`` (may hold ``%n``/``%h`` and a trailing glob), why it is probed, and
    whether it is an authentication key every worker must hold (as opposed to state or a controller-only key)."""

    template: str
    why: str
    auth: bool = False


def _dirname(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path.rstrip("/") else ""


def key_places(config: dict[str, str]) -> list[KeyPlace]:
    """Every place the configuration names a secret in (the Munge key is per worker: :func:`munged_key_file`)."""
    places = [KeyPlace(p, "known location", auth=True) for p in KNOWN_KEYS]
    jwt = options(config.get("AuthAltParameters", "")).get("jwt_key", "")
    if jwt.startswith("/"):
        places.append(KeyPlace(jwt, "AuthAltParameters jwt_key"))
    for key, val in options(config.get("AuthInfo", "")).items():
        if val.startswith("/") and key != "socket":
            places.append(KeyPlace(val, f"AuthInfo {key}"))
    spool = config.get("SlurmdSpoolDir", "")
    plugins = {config.get("AuthType", ""), config.get("CredType", "")}
    if plugins & {"auth/slurm", "cred/slurm"}:
        conf_dir = _dirname(config.get("SLURM_CONF", ""))
        for name in ("slurm.key", "slurm.jwks"):
            if conf_dir:
                places.append(KeyPlace(f"{conf_dir}/{name}", f"auth/slurm {name} beside SLURM_CONF", auth=True))
            if spool:
                places.append(KeyPlace(f"{spool}/conf-cache/{name}", f"auth/slurm {name} in slurmd's configless cache"))
    private = config.get("JobCredentialPrivateKey", "")
    if private.startswith("/"):
        places.append(KeyPlace(private, "JobCredentialPrivateKey"))
    if spool:
        places.append(KeyPlace(f"{spool}/cred_state*", "SlurmdSpoolDir credential state"))
    first: dict[str, KeyPlace] = {}
    for place in places:
        first.setdefault(place.template, place)  # a known place the configuration names too: probed once
    return list(first.values())


def uses_munge(config: dict[str, str]) -> bool:
    return bool({config.get("AuthType", ""), config.get("CredType", "")} & {"auth/munge", "cred/munge"})


def munged_key_file(argv: list[str]) -> str:
    """The key munged reads, from its argument vector (munged(8): ``--key-file=PATH`` or ``--key-file PATH``)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--key-file="):
            return arg.split("=", 1)[1]
        if arg == "--key-file" and i + 1 < len(argv):
            return argv[i + 1]
    return MUNGE_DEFAULT_KEY


def resolve(template: str, node: str, host: str) -> str:
    """``template`` with ``%n`` -> the node name and ``%h`` -> the (short) hostname, as slurmd resolves
    SlurmdSpoolDir (slurm.conf(5))."""
    return template.replace("%n", node).replace("%h", host)


def probe_script(places: list[KeyPlace], munge: bool) -> str:
    """Bash run by one task on each worker: prints ``host|<short hostname>``, ``munged|<base64 argv>`` for each
    munged it sees, then for each place ``probe|<template>|<resolved>`` and, per file the (globbed) path names,
    ``READABLE|<file>`` or ``unreachable|<file>|<error>``; ``checked`` last. The task resolves ``%n``/``%h`` and
    munged's key itself; :func:`key_problems` recomputes both from the printed facts, so a probe that skipped or
    mis-resolved a place is a problem, not a pass."""

    templates = " ".join(quoted("%s", p.template) for p in places)
    lines = [
        'h=$(uname -n); h=${h%%.*}; printf "host|%s\\n" "$h"',
        "probe() { printf 'probe|%s|%s\\n' \"$1\" \"$2\"; local IFS=$'\\n' f; for f in $2; do "
        'if head -c1 "$f" >/dev/null 2>/tmp/.sfx-err.$$; then printf "READABLE|%s\\n" "$f"; '
        'else printf "unreachable|%s|%s\\n" "$f" "$(cat /tmp/.sfx-err.$$)"; fi; done; rm -f /tmp/.sfx-err.$$; }',
        f'for t in {templates}; do r=${{t//\\%n/$SLURMD_NODENAME}}; probe "$t" "${{r//\\%h/$h}}"; done',
    ]
    if munge:
        lines.append(
            'keys=; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = munged ] || continue; '
            'printf "munged|%s\\n" "$(base64 -w0 < $p/cmdline)"; k=' + MUNGE_DEFAULT_KEY + "; prev=; "
            "while IFS= read -r -d '' a; do [ \"$prev\" = --key-file ] && k=$a; "
            'case $a in --key-file=*) k=${a#*=};; esac; prev=$a; done < $p/cmdline; keys="$keys $k"; done; '
            f'for k in ${{keys:-{MUNGE_DEFAULT_KEY}}}; do probe munge "$k"; done'
        )
    lines.append("echo checked")
    return "\n".join(lines)


def _munged_keys(lines: list[str]) -> set[str]:
    import base64

    keys = set()
    for line in lines:
        if line.startswith("munged|"):
            argv = base64.b64decode(line.split("|", 1)[1]).decode(errors="replace").split("\0")
            keys.add(munged_key_file([a for a in argv if a]))
    return keys or {MUNGE_DEFAULT_KEY}


def key_problems(node: str, lines: list[str], places: list[KeyPlace], munge: bool) -> list[str]:
    """What one worker's :func:`probe_script` lines show: each secret a task can read (naming its path and why it
    is probed), and each place the probe did not cover as the configuration resolves it on this worker."""
    if "checked" not in lines:
        return ["the probe did not finish"]
    host = next((line.split("|", 1)[1] for line in lines if line.startswith("host|")), "")
    probed = {tuple(line.split("|", 2)[1:]) for line in lines if line.startswith("probe|")}
    wanted = [(p.template, resolve(p.template, node, host), p.why) for p in places]
    if munge:
        wanted += [("munge", key, "munged's key") for key in sorted(_munged_keys(lines))]
    problems = [
        f"{why} {template!r} was not probed at {path!r}"
        for template, path, why in wanted
        if (template, path) not in probed
    ]
    why_of = {path: why for _, path, why in wanted}
    for line in lines:
        if line.startswith("READABLE|"):
            path = line.split("|", 1)[1]
            why = next((w for p, w in why_of.items() if path == p or path.startswith(p.rstrip("*"))), "")
            problems.append(f"a task can read {path} ({why})")
    return problems
