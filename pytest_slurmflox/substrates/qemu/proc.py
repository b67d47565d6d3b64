"""Proof that a pidfile names the process we started, before anything acts on that PID.

A pidfile can outlive its process (QEMU leaves it behind on SIGKILL, a host reboot leaves every pidfile), and
the kernel reuses PIDs, so a bare PID may now belong to someone else's process. Killing or trusting it would be
wrong. A PID is trusted only if /proc/PID exists, its executable has an expected name, its command line holds
the path that makes it *ours* (the overlay disk, the switch socket) and, when given, its comm matches.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessProof:
    pidfile: Path
    exe_names: tuple[str, ...]  #: accepted basenames of /proc/PID/exe; a trailing '*' is a prefix match
    cmdline_contains: str  #: one argv element must contain this (e.g. the overlay path)
    comm: str | None = None  #: expected /proc/PID/comm (QEMU sets it with -name X,process=...)
    proc: Path = Path("/proc")

    def read_pid(self) -> int | None:
        try:
            text = self.pidfile.read_text().strip()
        except (FileNotFoundError, PermissionError):
            return None
        return int(text) if text.isdigit() and int(text) > 0 else None

    def why_not(self, pid: int) -> str | None:
        """None if ``pid`` is proven ours, else the reason it is not (for messages and tests)."""
        base = self.proc / str(pid)
        try:
            exe = os.readlink(base / "exe")
            argv = (base / "cmdline").read_bytes().split(b"\0")
            comm = (base / "comm").read_text().strip()
        except FileNotFoundError:
            return f"no process {pid}"
        except (PermissionError, ProcessLookupError, OSError) as exc:
            return f"process {pid} cannot be inspected ({exc})"
        name = os.path.basename(exe.removesuffix(" (deleted)"))
        if not any(name.startswith(e[:-1]) if e.endswith("*") else name == e for e in self.exe_names):
            return f"process {pid} runs {exe}, not {'/'.join(self.exe_names)}"
        needle = self.cmdline_contains.encode()
        if not any(needle in arg for arg in argv):
            return f"process {pid}'s command line does not name {self.cmdline_contains}"
        if self.comm is not None and comm != self.comm[:15]:
            return f"process {pid} is named {comm!r}, not {self.comm!r}"
        return None

    def trusted_pid(self) -> int | None:
        pid = self.read_pid()
        if pid is None or self.why_not(pid) is not None:
            return None
        return pid

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # a zombie child of ours still answers kill(0); it has no exe any more
        return Path(f"/proc/{pid}/exe").exists()

    @staticmethod
    def terminate(pid: int, timeout: float = 10) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; only ever called with a proven PID. True if it ended."""
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not ProcessProof.alive(pid):
                return True
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
        return not ProcessProof.alive(pid)
