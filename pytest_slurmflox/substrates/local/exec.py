"""NamespaceRunner: run a command inside a local node, as root or as a user, with the node's own environment.

Enters the node's mount, UTS, IPC, network and PID namespaces and its root (``nsenter -t <node PID 1> ... -r
-w``), starts from an empty environment (nothing of the host's leaks in), and switches user with ``setpriv``
(the target user must exist on that node: workers deliberately have no test user).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...run import Observer, Result, finish, run_process

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class NodeNotRunning(RuntimeError):
    pass


@dataclass
class NamespaceRunner:
    """Runs ``bash -c`` inside node ``node``. ``pid_of`` returns the node's PID 1 (None if not running)."""

    node: str
    pid_of: Callable[[], int | None]
    user: str = "root"
    observer: Observer | None = None
    where: str = ""

    def __post_init__(self) -> None:
        if not self.where:
            self.where = f"local:{self.node}"

    def argv(self, command: str) -> list[str]:
        pid = self.pid_of()
        if pid is None:
            raise NodeNotRunning(f"node {self.node} is not running")
        home = "/root" if self.user == "root" else f"/home/{self.user}"
        argv = [
            "nsenter",
            "-t",
            str(pid),
            "-m",
            "-u",
            "-i",
            "-n",
            "-p",
            "-r",
            "-w",
            "env",
            "-i",
            f"PATH={NODE_PATH}",
            f"HOME={home}",
            f"USER={self.user}",
            "LANG=C.UTF-8",
        ]
        if self.user != "root":
            argv += ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups", "--reset-env"]
            # --reset-env keeps PATH sane and sets HOME/USER/SHELL from the user's passwd entry
        return [*argv, "bash", "-c", command]

    def run(
        self,
        command: str,
        *,
        input: str | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        line = command
        if env:
            line = " ".join(f"export {k}={shlex.quote(v)};" for k, v in env.items()) + " " + command
        t0 = time.monotonic()
        try:
            argv = self.argv(line)
        except NodeNotRunning as exc:
            return finish(self.observer, command, self.where, self.user, 255, "", str(exc), t0)
        rc, out, err = run_process(argv, input=input, timeout=timeout)
        return finish(self.observer, command, self.where, self.user, rc, out, err, t0)
