"""Cgroup v1 subtrees for the local nodes: what a pod's cgroup is to slurmd on Kubernetes.

Each node gets ``<hierarchy>/<our cgroup>/slurmflox-<prefix>/<node>`` in every controller Slurm needs (freezer for
``proctrack/cgroup``, cpuset for ``ConstrainCores``, memory for ``ConstrainRAMSpace``), always created below the
cgroup this process already lives in: the memory hierarchy's root belongs to the machine's process manager, and
the same rule keeps the other hierarchies tidy. The node's first process joins its cgroups (we started it) and
then unshares a cgroup namespace, so inside the node ``/proc/self/cgroup`` says ``/`` and the hierarchies that
node-boot.sh mounts at ``/sys/fs/cgroup/<controller>`` are rooted at the node's own cgroup, where Slurm's
cgroup/v1 plugin creates ``slurm/uid_*/job_*/step_*``.

What works is measured, not assumed: :func:`probe` creates and removes a throwaway cgroup per controller (and sets
what a cpuset needs before it can hold a task); an unusable controller is reported with the reason, the node
configuration leaves it out, and the target file names the limitation so the affected check SKIPs, never PASSes.
The created bases are recorded in the cluster state so ``down``/``destroy`` run from another process (with another
memory cgroup) still find and remove them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.waits import WaitTimedOut, poll

MOUNT = Path("/sys/fs/cgroup")
#: controller -> what Slurm uses it for (the limitation named when it cannot be used)
CONTROLLERS: dict[str, str] = {
    "freezer": "process-tracking",  # proctrack/cgroup
    "cpuset": "cpu-binding",  # task/cgroup ConstrainCores
    "memory": "memory-limits",  # task/cgroup ConstrainRAMSpace
}


@dataclass(frozen=True)
class Support:
    """Which controllers this host lets us use, and why not for the others."""

    usable: tuple[str, ...]
    unusable: Mapping[str, str] = field(default_factory=dict)  #: controller -> why

    def limitations(self) -> dict[str, str]:
        """Capability name -> the reason (for the target file's ``limitations``)."""
        return {
            CONTROLLERS[c]: f"local substrate: the cgroup v1 {c} controller cannot be used on this host: {why}"
            for c, why in sorted(self.unusable.items())
        }


def own_cgroup(controller: str, proc_cgroup: str | None = None) -> str | None:
    """This process's cgroup path in ``controller``'s v1 hierarchy (from ``/proc/self/cgroup``), None if absent."""
    text = Path("/proc/self/cgroup").read_text() if proc_cgroup is None else proc_cgroup
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def v1_mounts(mounts: str | None = None) -> dict[str, Path]:
    """Controller -> mount point of every cgroup v1 hierarchy (from ``/proc/self/mounts``)."""
    text = Path("/proc/self/mounts").read_text() if mounts is None else mounts
    found: dict[str, Path] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup":
            for option in parts[3].split(","):
                found.setdefault(option, Path(parts[1]))
    return found


def fresh_base(controller: str, prefix: str) -> Path | None:
    """Where this process would create the cluster's subtree in ``controller``: below its own cgroup."""
    mount = v1_mounts().get(controller)
    own = own_cgroup(controller)
    if mount is None or own is None:
        return None
    return mount / own.lstrip("/") / f"slurmflox-{prefix}"


def probe(prefix: str) -> tuple[Support, dict[str, Path]]:
    """Try each controller for real (mkdir, cpuset setup, rmdir); the usable ones with their base paths."""
    usable: list[str] = []
    unusable: dict[str, str] = {}
    bases: dict[str, Path] = {}
    for controller in CONTROLLERS:
        base = fresh_base(controller, prefix)
        if base is None:
            unusable[controller] = f"no cgroup v1 hierarchy with {controller} is mounted (see /proc/self/mounts)"
            continue
        trial = base.parent / f"slurmflox-probe-{os.getpid()}"
        try:
            trial.mkdir()
            try:
                if controller == "cpuset":
                    _inherit_cpuset(trial)
            finally:
                trial.rmdir()
        except OSError as exc:
            unusable[controller] = f"creating {trial} failed: {exc.strerror or exc}"
            continue
        usable.append(controller)
        bases[controller] = base
    return Support(tuple(sorted(usable)), unusable), bases


def _inherit_cpuset(path: Path) -> None:
    """A new cpuset holds no task until it has CPUs and memory nodes: give it its parent's."""
    for name in ("cpuset.cpus", "cpuset.mems"):
        (path / name).write_text((path.parent / name).read_text().strip() + "\n")


def _mkdir(path: Path, controller: str) -> None:
    if path.is_dir():
        return
    path.mkdir()
    if controller == "cpuset":
        _inherit_cpuset(path)


def layout(prefix: str, recorded: Mapping[str, Any] | None) -> tuple[Support, dict[str, Path]]:
    """The cluster's cgroup bases: the recorded ones while they exist (nodes live in them), else a fresh probe."""
    bases = {str(c): Path(str(p)) for c, p in ((recorded or {}).get("bases") or {}).items()}
    if bases and all(p.is_dir() for p in bases.values()):
        unusable = {str(c): str(w) for c, w in ((recorded or {}).get("unusable") or {}).items()}
        return Support(tuple(sorted(bases)), unusable), bases
    return probe(prefix)


def record(support: Support, bases: Mapping[str, Path]) -> dict[str, object]:
    """The state entry that lets any later process (another memory cgroup) find and remove the subtrees."""
    return {"bases": {c: str(p) for c, p in bases.items()}, "unusable": dict(support.unusable)}


class ClusterCgroups:
    """The cluster's subtree in each usable controller: one cgroup per node, removed with the node."""

    def __init__(self, bases: Mapping[str, Path]) -> None:
        self.bases = dict(bases)

    def node_dirs(self, node: str) -> list[Path]:
        return [base / node for base in self.bases.values()]

    def ensure_node(self, node: str) -> list[Path]:
        """Create the node's cgroups; returns their ``cgroup.procs`` files (for the node's first process)."""
        procs = []
        for controller, base in self.bases.items():
            _mkdir(base, controller)
            _mkdir(base / node, controller)
            procs.append(base / node / "cgroup.procs")
        return procs

    def remove_node(self, node: str) -> None:
        for path in self.node_dirs(node):
            remove_tree(path)

    def remove_all(self) -> None:
        for base in self.bases.values():
            remove_tree(base)


def pids_in(path: Path) -> list[int]:
    """Every process in the cgroup ``path`` and below."""
    pids: set[int] = set()
    for dirpath, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
    return sorted(pids)


def remove_tree(path: Path, timeout: float = 10.0) -> None:
    """Remove a cgroup subtree of ours, deepest first; processes still in it are ours (our nodes') and are killed."""

    def removed() -> bool | None:
        if path.is_dir():
            for pid in pids_in(path):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for dirpath, _, _ in sorted(os.walk(path), key=lambda entry: -entry[0].count("/")):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        return (not path.is_dir()) or None

    try:
        poll(removed, what=f"cgroup {path} removed", timeout=timeout, interval=0.05)
    except WaitTimedOut:
        raise OSError(f"cgroup {path} could not be removed (still busy after {timeout:.0f}s)") from None


def leftovers(prefix: str, roots: Iterable[Path] = (MOUNT,)) -> list[Path]:
    """Every ``slurmflox-<prefix>`` cgroup under any mounted hierarchy (v1 and v2): what destroy must leave none of."""
    name = f"slurmflox-{prefix}"
    found = []
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root):
            if Path(dirpath).name == name:
                found.append(Path(dirpath))
                dirnames.clear()
    return sorted(found)
