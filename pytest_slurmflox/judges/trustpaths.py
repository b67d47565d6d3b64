"""Who may change what every task trusts: the task profile, the TaskProlog and the realized runtime, and every
directory and symlink on their way from ``/`` (T10).

Why: the TaskProlog runs before every task and the profile and the runtime decide what every task executes. Whoever
can write any of them, or any directory above one (a directory's writer can replace the entry below it), or a
symlink on the way (its owner can point it elsewhere), changes every task of every user. So each of them must be
owned by root and writable by no one else: not by its group or others (mode bits), not by a named user or group of
its ACL (``getfacl``, where the worker has it: an entry's write counts only within the ACL mask, as the kernel
counts it). The expectation is the reference's own contract (the init container and the TaskProlog are installed
by root; provision/README.md) and POSIX's rule for who may replace a directory entry (rename(2): write on the
directory; with the sticky bit (``S_ISVTX``) only the entry's or the directory's owner, so a root-owned entry in a
sticky directory, such as Nix's ``/nix/store`` (root:nixbld 1775), stays root's), never anything a worker wrote.

What is walked, per worker: the literal path and each of its parents (``lstat``: a symlink as itself), then the
path every symlink resolves to (``readlink -f``) and each of its parents, and, for a directory, the entries in it
(the profile's files; the runtime's top level). The probe is read-only and runs as the
task's user: ``stat`` and ``getfacl`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..base.run import quoted
from .taskprolog import IN_FORCE_SH, resolved_sh

#: What a task trusts, by the name a verdict uses.
TRUSTED = ("task profile", "TaskProlog", "realized runtime")
#: Mode bits: group- or other-writable, and the sticky bit.
GROUP_OTHER_WRITE, STICKY = 0o022, 0o1000


def probe_script(paths: Mapping[str, str], profile_dir: str) -> str:
    """Shell text for one worker: for each ``label -> path`` (an empty path: the one this worker has in force:
    ``TaskProlog`` from its slurm.conf, ``realized runtime`` from the profile's ``realized-path``; a relative
    TaskProlog beside slurm.conf, as slurmd resolves it: taskprolog.py), every entry on the way as
    ``entry=<label>|<path>|<type>|<uid>|<mode octal>``, ``acl=<label>|<path>|<entry>`` for each ACL entry that grants
    write (its effective rights), and ``missing=<label>|<path>`` for what does not exist."""
    lines = [
        IN_FORCE_SH,  # the TaskProlog in force, resolved as slurmd resolves it (taskprolog.py)
        f"realized=$(cat {quoted('%s', profile_dir + '/realized-path')} 2>/dev/null)",
        "acls=$(command -v getfacl)",
        _WALK,
    ]
    for label, path in paths.items():
        given = quoted("%s", path) if path else '"$realized"'
        if label == "TaskProlog":  # declared or named, resolved as slurmd resolves it
            given = f'"{resolved_sh(path)}"'
        lines.append(f"walk {quoted('%s', label)} {given}")
    return "\n".join(lines)


_WALK = r"""show() {
  stat -c "entry=$1|%n|%F|%u|%a" -- "$2" 2>/dev/null || { echo "missing=$1|$2"; return; }
  [ -n "$acls" ] && getfacl -p -c -e -- "$2" 2>/dev/null | while IFS= read -r e; do
    case $e in user::*|group::*|other::*|mask::*|default:*|'') ;;
      *'#effective:'?w?*) echo "acl=$1|$2|${e%%#*}";; *'#effective:'*) ;; ?*:?*:?w?*) echo "acl=$1|$2|$e";; esac
  done
}
up() { p=$2; while :; do show "$1" "$p"; [ "$p" = / ] && break; p=$(dirname -- "$p"); done; }
walk() {
  [ -n "$2" ] || { echo "missing=$1|(none in force)"; return; }
  up "$1" "$2"; r=$(readlink -f -- "$2" 2>/dev/null) || return 0
  [ "$r" != "$2" ] && up "$1" "$r"
  [ -d "$r" ] && for f in "$r"/*; do { [ -e "$f" ] || [ -L "$f" ]; } && show "$1" "$f"; done
  return 0
}"""


@dataclass(frozen=True)
class Entry:
    """One entry on the way to something a task trusts, as ``stat`` showed it."""

    label: str
    path: str
    kind: str
    uid: int
    mode: int

    def problem(self, owners: frozenset[int]) -> str | None:
        """Who besides root may change this entry, or None."""
        if self.uid not in owners:
            return f"owned by uid {self.uid}, not root"
        if self.kind != "symbolic link" and self.mode & GROUP_OTHER_WRITE:
            if self.kind == "directory" and self.mode & STICKY:
                return None  # only an entry's or the directory's owner may replace it: root's entries stay root's
            who = " and ".join(w for bit, w in ((0o020, "its group"), (0o002, "everyone")) if self.mode & bit)
            return f"mode {self.mode:04o}: writable by {who}"
        return None


def parse(lines: list[str]) -> tuple[list[Entry], list[str], list[str]]:
    """A worker's probe lines -> (entries, ACL grants ``label|path|entry``, missing ``label|path``)."""
    entries, grants, missing = [], [], []
    for line in lines:
        key, _, value = line.partition("=")
        parts = value.split("|")
        if key == "entry" and len(parts) == 5 and parts[3].isdigit():
            try:
                entries.append(Entry(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4], 8)))
            except ValueError:
                continue
        elif key == "acl" and len(parts) == 3:
            grants.append("|".join(part.strip() for part in parts))  # getfacl's entry, its comment cut off
        elif key == "missing" and len(parts) == 2:
            missing.append(value)
    return entries, grants, missing


def trust_problems(
    lines: list[str], owners: frozenset[int] = frozenset({0}), required: frozenset[str] = frozenset(TRUSTED)
) -> str | None:
    """What one worker's probe lines show anyone but root may change (path, owner, mode), or None. A worker that
    printed nothing for one of :data:`TRUSTED` could not be checked and is named for it. Something absent is a
    problem here only where ``required`` names it (the target declared its path): whether the reference's profile,
    a TaskProlog or a realized runtime exists at all is T3's and T2's to judge, not who may change it."""
    entries, grants, missing = parse(lines)
    found = [f"{e.label} {e.path} ({e.kind}, uid {e.uid}, mode {e.mode:04o}): {p}" for e in entries
             if (p := e.problem(owners))]  # fmt: skip
    found += [f"{label} {path}: its ACL lets {entry} write" for label, path, entry in (g.split("|") for g in grants)]
    found += [f"{label} {path} does not exist" for label, path in (m.split("|") for m in missing) if label in required]
    shown = {e.label for e in entries}
    found += [f"{label}: nothing on its way was shown" for label in TRUSTED if label not in shown and not missing]
    return "; ".join(dict.fromkeys(found)) or None
