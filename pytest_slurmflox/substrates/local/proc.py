"""Proving that a recorded PID is really one of our processes before trusting or signalling it.

A pid file outlives its process; the kernel reuses PIDs. So a recorded PID is trusted only if the process still
exists (and is not a zombie), started at the recorded time (``/proc/PID/stat`` field 22), runs the expected
executable, carries the expected markers on its command line, and, where given, sits in the expected network
namespace. Anything else is treated as gone, and is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ...state import atomic_write


@dataclass(frozen=True)
class PidRecord:
    pid: int
    starttime: int
    exe: str  #: basename of /proc/PID/exe
    markers: tuple[str, ...]  #: strings that must appear in the command line
    netns_inode: int | None = None

    def write(self, path: Path) -> None:
        atomic_write(
            path,
            json.dumps(
                {
                    "pid": self.pid,
                    "starttime": self.starttime,
                    "exe": self.exe,
                    "markers": list(self.markers),
                    "netns_inode": self.netns_inode,
                }
            )
            + "\n",
        )

    @classmethod
    def read(cls, path: Path) -> PidRecord | None:
        try:
            doc = json.loads(path.read_text())
            return cls(
                int(doc["pid"]), int(doc["starttime"]), str(doc["exe"]), tuple(doc["markers"]), doc.get("netns_inode")
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens: split after the last ')'
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest  # rest[0] is state (field 3), rest[19] is starttime (field 22)


def starttime(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] not in ("Z", "X")


def netns_inode_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def record_for(pid: int, exe: str, markers: tuple[str, ...], netns_inode: int | None = None) -> PidRecord:
    st = starttime(pid)
    if st is None:
        raise ProcessLookupError(pid)
    return PidRecord(pid, st, exe, markers, netns_inode)


def proven(rec: PidRecord | None) -> bool:
    """True only if ``rec`` still describes the very process we started."""
    if rec is None or not alive(rec.pid) or starttime(rec.pid) != rec.starttime:
        return False
    try:
        exe = os.path.basename(os.readlink(f"/proc/{rec.pid}/exe"))
    except OSError:
        return False
    if exe != rec.exe:
        return False
    line = "\0".join(cmdline(rec.pid))
    if not all(m in line for m in rec.markers):
        return False
    return not (rec.netns_inode is not None and netns_inode_of(rec.pid) != rec.netns_inode)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (so it does not linger as a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if not alive(pid):
            return True
        time.sleep(0.05)
    reap(pid)
    return not alive(pid)


def signal_proven(rec: PidRecord, sig: int = signal.SIGTERM) -> bool:
    if not proven(rec):
        return False
    try:
        os.kill(rec.pid, sig)
    except ProcessLookupError:
        return False
    return True


def pids_in_netns(inodes: set[int]) -> list[int]:
    """Every process whose network namespace is one of ``inodes`` (i.e. lives inside our namespaces)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            ino = netns_inode_of(int(entry.name))
            if ino is not None and ino in inodes and alive(int(entry.name)):
                found.append(int(entry.name))
    return found
