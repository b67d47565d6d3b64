"""The starter file (``--slurmflox-init-target=FILE --slurmflox-init-login=[user@]host[:port]``): a commented target
file written from what the cluster reports.

Contract of :func:`init_target`: an existing ``FILE``, a missing directory for it, a login that is not
``[user@]host[:port]`` or that cannot be resolved (endpoint.py) is one line and exit 4, before any connection. Then
the login is connected once, the way the doctor does (connection.py, reach.py): unreachable, or Slurm not answering
from it, is one line (``user@host:port`` and the stage) and exit 1. Otherwise the cluster is asked read-only
(:data:`STARTER_FACTS`: the doctor's facts, the cluster name and the login user's default account; nothing is
submitted) and ``FILE`` is written once (never over a file that appeared meanwhile), exit 0.

What the file holds (:func:`document`, :func:`render`, both pure): only what the user passed (the login) or the
cluster reported (its name, Slurm version, default partition, and an ``accounting`` section when slurmdbd answers
with the user's default account). Every other key of the schema stays commented. Expectations (``expect``,
``identity``, ``runtime``, ...) are never filled from the cluster: an expectation never comes from the thing under
test. Each key carries its schema ``description`` as a comment (schemas/target.json is the one source of those
words, as for docs/target-schema.md). The rendered text is checked against the schema before it is written.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from ..model import targetschema
from .doctor import FACTS, answers, show

if TYPE_CHECKING:
    from ..model.target import TargetSpec

#: What the starter asks, read-only: the doctor's facts, the cluster's name, the login user's default account.
STARTER_FACTS: dict[str, str] = {
    **FACTS,
    "cluster": "scontrol show config | grep -E '^ClusterName '",
    "account": 'sacctmgr -n -P show user "$(id -un)" format=defaultaccount',
}
#: Sections only a substrate writes: one commented line each, their keys not listed.
SUBSTRATE_ONLY = ("deployment",)
INIT_FLAG, LOGIN_FLAG = "--slurmflox-init-target", "--slurmflox-init-login"


@dataclass(frozen=True)
class Facts:
    """What the cluster reported (None: it did not say), and each answer as shown in the file's header."""

    slurm_version: str | None = None
    cluster_name: str | None = None
    default_partition: str | None = None
    default_account: str | None = None
    shown: tuple[str, ...] = ()


def parse_facts(found: Mapping[str, tuple[bool, str]]) -> Facts:
    """The facts in the answers to :data:`STARTER_FACTS` (label -> (answered, text)); an unanswered one is None."""

    def text(label: str) -> str | None:
        ok, out = found.get(label, (False, ""))
        return out.strip() if ok and out.strip() else None

    version = (text("slurm") or "").split()  # "slurm 24.11.5", Debian's "slurm-wlm 24.11.5"
    cluster = (text("cluster") or "").partition("=")[2].strip()
    partitions = [line.split()[0] for line in (text("partitions") or "").splitlines() if line.split()]
    default = next((p.rstrip("*") for p in partitions if p.endswith("*")), None)
    account = (text("account") or "").splitlines()
    shown = tuple(f"{label}: {' | '.join(out.splitlines()[:8]) or '(none)'}" for label, (_, out) in found.items())
    return Facts(
        slurm_version=version[-1] if len(version) == 2 and re.fullmatch(r"\d+(\.\d+)+", version[-1]) else None,
        cluster_name=cluster if cluster and cluster != "(null)" else None,
        default_partition=default or None,
        default_account=account[0].strip() if account and account[0].strip() else None,
        shown=shown,
    )


def login_section(text: str) -> dict[str, Any]:
    """The ``login`` section ``[user@]host[:port]`` gives (what the user passed, nothing more); ValueError in one
    line when it is not of that form."""
    from ..model.endpoint import split_hop

    hop = split_hop(text) if text and "," not in text else None
    if hop is None:
        raise ValueError(f"{LOGIN_FLAG} {text!r}: expected [user@]host[:port]")
    user, host, port = hop
    section: dict[str, Any] = {"host": host}
    if port is not None:
        section["port"] = port
    if user:
        section["user"] = user
    return section


def document(facts: Facts, login: Mapping[str, Any]) -> dict[str, Any]:
    """The keys the starter fills: what the user passed (``login``) and what the cluster reported (``facts``)."""
    doc: dict[str, Any] = {"version": 1}
    if facts.cluster_name:
        doc["name"] = facts.cluster_name
    doc["substrate"] = "existing"
    doc["login"] = dict(login)
    slurm = {"partition": facts.default_partition, "version": facts.slurm_version}
    if any(slurm.values()):
        doc["slurm"] = {k: v for k, v in slurm.items() if v}
    if facts.default_account:
        doc["accounting"] = {"account": facts.default_account}
    return doc


def render(doc: Mapping[str, Any], facts: Facts, where: str) -> str:
    """The starter file: a header (where it came from, what the cluster answered), then every key of the schema in
    its order: those in ``doc`` with their value, the rest commented; each with its description."""
    lines = [
        f"# slurmflox target file: a starter, written by {INIT_FLAG} from what {where} reported",
        f"# on {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. Filled in: what you passed and what the cluster reported.",
        "# Commented out: what it cannot tell (your expectations among them: an expectation never comes from the",
        "# cluster under test). Declare them, then check the file: pytest --slurmflox-check-target=<this file>",
        "# (every key: docs/target-schema.md).",
        "#",
        "# The cluster answered:",
        *(f"#   {' '.join(line.split())[:200]}" for line in facts.shown),
        "",
    ]
    lines += _keys(targetschema.schema(), doc, "", commented=False)
    return "\n".join(lines) + "\n"


def _keys(node: Mapping[str, Any], values: Any, prefix: str, *, commented: bool) -> list[str]:
    """One line per key of ``node`` (and its keys below), each followed by its description as a comment."""
    out: list[str] = []
    for key, sub in node.get("properties", {}).items():
        about = " ".join(str(sub.get("description", "")).split())
        filled = not commented and isinstance(values, Mapping) and key in values
        inner = sub if key not in SUBSTRATE_ONLY else {}
        if filled and isinstance(values[key], Mapping):
            out.append(f"{prefix}{key}:  # {about}")
            out += _keys(inner, values[key], prefix + "  ", commented=False)
        elif filled:
            out.append(f"{prefix}{key}: {_scalar(values[key])}  # {about}")
        else:
            lead = prefix if commented else prefix + "# "
            out.append(f"{lead}{key}:  # {about}")
            out += _keys(inner, None, lead + "  ", commented=True)
    return out


def _scalar(value: Any) -> str:
    """``value`` as YAML flow text, quoted only where YAML needs it."""
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 20).strip()[1:-1]


def _refusal(path: Path, login: str | None) -> str | None:
    """Why the starter must not start (one line), before any connection; None when it may."""
    if not login:
        return f"slurmflox: {INIT_FLAG} needs {LOGIN_FLAG}=[user@]host[:port]; nothing was written"
    if path.exists() or path.is_symlink():
        return f"slurmflox: {INIT_FLAG} {path}: the file exists; it is not overwritten (nothing was written)"
    if not path.parent.is_dir():
        return f"slurmflox: {INIT_FLAG} {path}: no directory {path.parent}; nothing was written"
    return None


def _write_new(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` only if nothing is there (a hard link of a complete temporary file: never a
    partial file, never over one); False when something appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _prepare(path: Path, login: str | None) -> tuple[dict[str, Any], TargetSpec] | str:
    """The login section and the target to connect with, or the one-line refusal (nothing connected)."""
    from ..model.target import parse_target

    refused = _refusal(path, login)
    if refused is not None:
        return refused
    try:
        section = login_section(str(login))
        return section, parse_target({"version": 1, "substrate": "existing", "login": section}, path=path)
    except ValueError as exc:  # TargetError is one: the schema's or the ssh_config's line
        return f"slurmflox: {exc}; nothing was written"


def init_target(path: Path, login: str | None, say: Callable[[str], None] = print) -> int:
    """Write the starter file at ``path`` for the login ``[user@]host[:port]``; the exit status (see the module)."""
    from .connection import connect

    prepared = _prepare(path.expanduser(), login)
    if isinstance(prepared, str):
        say(prepared)
        return pytest.ExitCode.USAGE_ERROR
    section, spec = prepared
    target = connect(spec)
    try:
        why = target.unreachable or target.why_missing("slurm")
        found = answers(target.login, STARTER_FACTS) if why is None else {}
    finally:
        target.close()
    if why is not None:
        say(f"slurmflox: {' '.join(why.split())}; nothing was written")
        return pytest.ExitCode.TESTS_FAILED
    return _finish(path.expanduser(), section, parse_facts(found), found, say)


def _finish(
    path: Path, login: Mapping[str, Any], facts: Facts, found: dict[str, tuple[bool, str]], say: Callable[[str], None]
) -> int:
    """Render, check against the schema and write; say what was filled."""
    doc = document(facts, login)
    user, port = (f"{login['user']}@" if "user" in login else ""), (f":{login['port']}" if "port" in login else "")
    text = render(doc, facts, f"{user}{login['host']}{port}")
    targetschema.check(yaml.safe_load(text))  # the file the doctor reads: a bug here is ours, loudly
    if not _write_new(path, text):
        say(f"slurmflox: {INIT_FLAG} {path}: the file appeared meanwhile; it is not overwritten")
        return pytest.ExitCode.USAGE_ERROR
    show(found, say)
    filled = ", ".join(p for p, _ in targetschema.leaf_paths() if _has(doc, p))
    say(f"wrote {path}: filled {filled}; every other key is commented. Next: pytest --slurmflox-check-target={path}")
    return pytest.ExitCode.OK


def _has(doc: Mapping[str, Any], dotted: str) -> bool:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return not isinstance(node, Mapping)
