"""NamespaceRunner: run a command inside a local node, as root or as a user, with the node's own environment.

Enters the node's mount, UTS, IPC, network and PID namespaces and its root (``nsenter -t <node PID 1> ... -r
-w``), starts from an empty environment (nothing of the host's leaks in), and switches user with ``setpriv``
(the target user must exist on that node: workers deliberately have no test user).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...base.run import LocalRunner, RunnerUnavailable

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class NodeNotRunning(RunnerUnavailable):
    pass


@dataclass
class NamespaceRunner(LocalRunner):
    """The local runner with a prefix that enters node ``node`` (``pid_of`` returns its PID 1, None if stopped)."""

    where: str = ""
    user: str = "root"
    node: str = ""
    pid_of: Callable[[], int | None] = lambda: None

    def __post_init__(self) -> None:
        if not self.where:
            self.where = f"local:{self.node}"

    def argv_prefix(self) -> list[str]:
        pid = self.pid_of()
        if pid is None:
            raise NodeNotRunning(f"node {self.node} is not running")
        home = "/root" if self.user == "root" else f"/home/{self.user}"
        argv = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w"]
        argv += ["env", "-i", f"PATH={NODE_PATH}", f"HOME={home}", f"USER={self.user}", "LANG=C.UTF-8"]
        if self.user != "root":
            argv += ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups", "--reset-env"]
            # --reset-env keeps PATH sane and sets HOME/USER/SHELL from the user's passwd entry
        return argv
