"""Proving that a PID is really one of our processes before trusting or signalling it: one module for every substrate.

A pid file outlives its process (QEMU leaves it behind on SIGKILL, a reboot leaves every one) and the kernel reuses
PIDs, so a bare PID may now belong to someone else's process. A PID is trusted only if the process still exists and
is not a zombie, runs an expected executable, carries the markers that make it *ours* on its command line (the
overlay disk, the switch socket, the node name), and, where recorded, started at the recorded time (``/proc/PID/stat``
field 22), sits in the recorded network namespace and has the expected comm. Anything else is treated as gone and
is never signalled.

Two ways of recording the PID share that one proof: the local substrate's JSON :class:`PidRecord` (written by us
when we start the process, so it can carry the start time and namespace) and the QEMU substrate's
:class:`ProcessProof` over a pidfile the program writes itself (QEMU's ``-pidfile``, ``vde_switch --pidfile``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from ..base.waits import WaitTimedOut, poll
from ..model.workdir import atomic_write

PROC = Path("/proc")


# ----------------------------------------------------------------------------------------------- /proc primitives
def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens: split after the last ')'; rest[0] is state (field 3), rest[19] starttime (22)
    return raw[raw.rfind(")") + 2 :].split()


def starttime(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie child of ours has exited: it no longer counts)."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] not in ("Z", "X")


def netns_inode_of(pid: int) -> int | None:
    try:
        return os.stat(PROC / str(pid) / "ns" / "net").st_ino
    except OSError:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def children(pid: int) -> list[int]:
    try:
        text = (PROC / str(pid) / "task" / str(pid) / "children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def pids_in_netns(inodes: set[int]) -> list[int]:
    """Every process whose network namespace is one of ``inodes`` (i.e. lives inside our namespaces)."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            ino = netns_inode_of(int(entry.name))
            if ino is not None and ino in inodes and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


# ------------------------------------------------------------------------------------------------ the one proof
def why_not(
    pid: int,
    exe_names: tuple[str, ...],
    markers: tuple[str, ...],
    *,
    started: int | None = None,
    netns_inode: int | None = None,
    comm: str | None = None,
) -> str | None:
    """None if ``pid`` is proven ours, else the reason it is not (for messages and tests).

    ``exe_names`` are accepted basenames of /proc/PID/exe (a trailing ``*`` is a prefix match); every marker must
    occur in one argument of the command line; ``started``, ``netns_inode`` and ``comm`` are checked when given."""
    if not alive(pid):
        return f"no process {pid}"
    if started is not None and starttime(pid) != started:
        return f"process {pid} started at another time (a reused PID)"
    try:
        exe = os.readlink(PROC / str(pid) / "exe")
    except OSError as exc:
        return f"process {pid} cannot be inspected ({exc})"
    name = os.path.basename(exe.removesuffix(" (deleted)"))
    if not any(name.startswith(e[:-1]) if e.endswith("*") else name == e for e in exe_names):
        return f"process {pid} runs {exe}, not {'/'.join(exe_names)}"
    argv = cmdline(pid)
    for marker in markers:
        if not any(marker in arg for arg in argv):
            return f"process {pid}'s command line does not name {marker}"
    if netns_inode is not None and netns_inode_of(pid) != netns_inode:
        return f"process {pid} is in another network namespace"
    if comm is not None:
        try:
            actual = (PROC / str(pid) / "comm").read_text().strip()
        except OSError as exc:
            return f"process {pid} cannot be inspected ({exc})"
        if actual != comm[:15]:
            return f"process {pid} is named {actual!r}, not {comm!r}"
    return None


# ------------------------------------------------------------------------------ recorded by us: the local substrate
@dataclass(frozen=True)
class PidRecord:
    pid: int
    starttime: int
    exe: str  #: basename of /proc/PID/exe
    markers: tuple[str, ...]  #: strings that must appear in the command line
    netns_inode: int | None = None

    def write(self, path: Path) -> None:
        doc = {
            "pid": self.pid,
            "starttime": self.starttime,
            "exe": self.exe,
            "markers": list(self.markers),
            "netns_inode": self.netns_inode,
        }
        atomic_write(path, json.dumps(doc) + "\n")

    @classmethod
    def read(cls, path: Path) -> PidRecord | None:
        try:
            doc = json.loads(path.read_text())
            return cls(
                int(doc["pid"]), int(doc["starttime"]), str(doc["exe"]), tuple(doc["markers"]), doc.get("netns_inode")
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def record_for(pid: int, exe: str, markers: tuple[str, ...], netns_inode: int | None = None) -> PidRecord:
    st = starttime(pid)
    if st is None:
        raise ProcessLookupError(pid)
    return PidRecord(pid, st, exe, markers, netns_inode)


def proven(rec: PidRecord | None) -> bool:
    """True only if ``rec`` still describes the very process we started."""
    if rec is None:
        return False
    return why_not(rec.pid, (rec.exe,), rec.markers, started=rec.starttime, netns_inode=rec.netns_inode) is None


def signal_proven(rec: PidRecord, sig: int = signal.SIGTERM) -> bool:
    if not proven(rec):
        return False
    try:
        os.kill(rec.pid, sig)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------------- written by the program: the QEMU substrate
@dataclass(frozen=True)
class ProcessProof:
    pidfile: Path
    exe_names: tuple[str, ...]  #: accepted basenames of /proc/PID/exe; a trailing '*' is a prefix match
    cmdline_contains: str  #: one argv element must contain this (e.g. the overlay path)
    comm: str | None = None  #: expected /proc/PID/comm (QEMU sets it with -name X,process=...)

    def read_pid(self) -> int | None:
        try:
            text = self.pidfile.read_text().strip()
        except (FileNotFoundError, PermissionError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def why_not(self, pid: int) -> str | None:
        return why_not(pid, self.exe_names, (self.cmdline_contains,), comm=self.comm)

    def trusted_pid(self) -> int | None:
        pid = self.read_pid()
        if pid is None or self.why_not(pid) is not None:
            return None
        return pid


# ------------------------------------------------------------------------------------------------ ending processes
def reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (so it does not linger as a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_gone(pid: int, timeout: float) -> bool:
    def gone() -> bool | None:
        reap(pid)
        return (not alive(pid)) or None

    try:
        return poll(gone, what=f"pid {pid} to end", timeout=timeout, interval=0.05)
    except WaitTimedOut:
        return bool(gone())


def terminate(pid: int, timeout: float = 10) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; only ever called with a proven PID. True if it ended."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        if wait_gone(pid, wait):
            return True
    return False
