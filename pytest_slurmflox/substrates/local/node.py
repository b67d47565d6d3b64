"""One node of the local cluster: its state dir, its namespaces and its one supervising process.

A node is started as ``nsenter --net=<node netns> unshare --mount --uts --ipc --pid --fork --kill-child
bash node-boot.sh <node dir>``. ``unshare`` is the process we record (pid + start time + executable + command
line + network namespace, see proc.py); its only child is PID 1 of the node. Signalling that child stops the
node's daemons in order; if that does not work, killing ``unshare`` makes the kernel kill the whole PID namespace.
The node's mounts live only in its own mount namespace, so they disappear with it.

State dir ``<workdir>/local/nodes/<name>/``: ``upper/`` + ``work/`` (the writable layer, kept across down/up),
``merged/`` (mount point), ``ctl/phase`` (what the node is doing, written from inside), ``boot.env`` (its
parameters), ``pid.json`` (the record), ``console.log``, ``annotations.json`` (workers: image, environment,
revision, like pod annotations).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...base.run import quoted
from ...base.waits import WaitTimedOut, poll
from ...model.workdir import atomic_write
from .. import proc
from .network import Fabric, ns_inode

#: sh program: write our own PID into each cgroup.procs file given before ``--``, then exec the rest.
_JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class NodeSpec:
    name: str
    role: str  #: ctl | login | worker
    address: str
    boot: Mapping[str, str] = field(default_factory=dict)  #: node-specific boot.env variables


class Node:
    def __init__(self, local_dir: Path, fabric: Fabric, spec: NodeSpec) -> None:
        self.local_dir = local_dir
        self.fabric = fabric
        self.spec = spec
        self.dir = local_dir / "nodes" / spec.name

    # ------------------------------------------------------------------------------------------ paths
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def ns(self) -> str:
        return self.fabric.node_ns(self.spec.name)

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid.json"

    @property
    def phase_file(self) -> Path:
        return self.dir / "ctl" / "phase"

    @property
    def annotations_file(self) -> Path:
        return self.dir / "annotations.json"

    def boot_script(self) -> Path:
        return self.local_dir / "scripts" / "node-boot.sh"

    # ------------------------------------------------------------------------------------------ state
    def record(self) -> proc.PidRecord | None:
        return proc.PidRecord.read(self.pid_file)

    def running(self) -> bool:
        return proc.proven(self.record())

    def init_pid(self) -> int | None:
        """PID (host view) of the node's PID 1, i.e. the namespaces to enter."""
        rec = self.record()
        if not proc.proven(rec):
            return None
        assert rec is not None
        kids = proc.children(rec.pid)
        return kids[0] if kids else None

    def phase(self) -> str:
        try:
            return self.phase_file.read_text().strip()
        except OSError:
            return "absent"

    def annotations(self) -> dict:
        try:
            return json.loads(self.annotations_file.read_text())
        except (OSError, ValueError):
            return {}

    def boot_env_text(self, common: Mapping[str, str]) -> str:
        env = {
            **common,
            **self.spec.boot,
            "NODE_NAME": self.spec.name,
            "NODE_ROLE": self.spec.role,
            "NODE_ADDRESS": self.spec.address,
        }
        return "".join(f"{k}={quoted('%s', v)}\n" for k, v in sorted(env.items()))

    def config_hash(self, common: Mapping[str, str], extra: str = "") -> str:
        """What the running node was started from; a different hash means it must be restarted."""
        return hashlib.sha256((self.boot_env_text(common) + extra).encode()).hexdigest()

    def started_hash(self) -> str | None:
        try:
            return (self.dir / "config.hash").read_text().strip()
        except OSError:
            return None

    # ------------------------------------------------------------------------------------------ start
    def start(
        self,
        common: Mapping[str, str],
        *,
        image_digest: str,
        extra_hash: str = "",
        cgroup_procs: Sequence[Path] = (),
    ) -> None:
        """Start the node (caller made sure it is not running). Returns at once; watch :meth:`phase`.

        With ``cgroup_procs`` the first process joins those cgroups and unshares a cgroup namespace, so the node
        is rooted at its own cgroups (see cgroups.py)."""
        self._prepare(common, image_digest)
        with (self.dir / "console.log").open("ab") as console:
            popen = subprocess.Popen(
                self._argv(cgroup_procs),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        self._record(popen).write(self.pid_file)
        atomic_write(self.dir / "config.hash", self.config_hash(common, extra_hash) + "\n")

    def _prepare(self, common: Mapping[str, str], image_digest: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "ctl").mkdir(exist_ok=True)
        (self.dir / "merged").mkdir(exist_ok=True)
        # A writable layer made over another image would mix two images: start it afresh.
        stamp = self.dir / "image.digest"
        if stamp.exists() and stamp.read_text().strip() != image_digest:
            for sub in ("upper", "work"):
                subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir / sub)], check=False)
        atomic_write(stamp, image_digest + "\n")
        atomic_write(self.dir / "boot.env", self.boot_env_text(common), mode=0o600)
        atomic_write(self.phase_file, "starting\n")
        self.fabric.ensure_node(self.spec.name, self.spec.address)

    def _argv(self, cgroup_procs: Sequence[Path]) -> list[str]:
        join: list[str] = []
        if cgroup_procs:
            join = ["sh", "-c", _JOIN_CGROUPS, "sfx-join-cgroups", *map(str, cgroup_procs), "--"]
        namespaces = ["--mount", "--uts", "--ipc", "--pid", "--fork", "--kill-child"]
        if cgroup_procs:
            namespaces.append("--cgroup")
        return [
            *join,
            *("nsenter", f"--net={Fabric.ns_path(self.ns)}", "--"),
            *("unshare", *namespaces, "--propagation", "private", "--"),
            *("bash", str(self.boot_script()), str(self.dir)),
        ]

    def _record(self, popen: subprocess.Popen[bytes]) -> proc.PidRecord:
        """The proof of the started node: once sh and nsenter have exec'd, the Popen pid is ``unshare``."""
        failed = RuntimeError(f"node {self.name}: could not start (see {self.dir / 'console.log'})")

        def started() -> proc.PidRecord | None:
            try:
                exe = Path(f"/proc/{popen.pid}/exe").readlink().name
            except OSError:
                exe = ""
            if exe == "unshare":
                return proc.record_for(
                    popen.pid, "unshare", (str(self.boot_script()), str(self.dir)), ns_inode(self.ns)
                )
            if popen.poll() is not None:
                raise failed
            return None

        try:
            return poll(started, what=f"node {self.name} to start", timeout=5, interval=0.01)
        except WaitTimedOut:
            raise failed from None

    def wait_phase(self, want: str, timeout: float) -> str:
        """Wait until the phase is ``want`` or a failure; returns the last phase seen."""
        last = ["absent"]

        def settled() -> str | None:
            phase = last[0] = self.phase()
            if phase == want or phase.startswith("failed"):
                return phase
            if phase not in ("starting", "absent") and not self.running():
                return self.phase() if self.phase().startswith("failed") else f"failed: node exited ({phase})"
            return None

        try:
            return poll(settled, what=f"node {self.name} {want}", timeout=timeout, interval=0.05)
        except WaitTimedOut:
            return last[0]

    # ------------------------------------------------------------------------------------------ stop
    def stop(self, timeout: float = 20.0) -> bool:
        """Stop the node: TERM its PID 1 (daemons stop in order), then KILL the namespace. True if it was up."""
        rec = self.record()
        was_running = proc.proven(rec)
        if was_running and rec is not None:
            for kid in proc.children(rec.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kid, signal.SIGTERM)
            if not proc.wait_gone(rec.pid, timeout):
                proc.signal_proven(rec, signal.SIGKILL)
                proc.wait_gone(rec.pid, 5.0)
        self.pid_file.unlink(missing_ok=True)
        if self.phase() not in ("absent",) and not self.phase().startswith("failed"):
            atomic_write(self.phase_file, "stopped\n")
        return was_running
