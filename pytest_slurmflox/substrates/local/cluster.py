"""LocalCluster: the node primitives the substrate's verbs and the worker pool share.

Paths and state of one work dir, the node image, the files every node mounts, naming and addressing of nodes,
starting a node from its configuration (or keeping it), and clearing a namespace. It knows nothing about cohorts
(pool.py) or the loopback forwarders (forwarders.py), so both can build on it without importing each other.
LocalSubstrate holds one (``substrate.cluster``) and hands that, never itself, to its pool: composition, not a
substrate that is its cluster (tests/test_structure.py keeps it so).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from filelock import FileLock

from ...base.waits import WaitTimedOut, poll
from ...model import revision as revision_mod
from ...model.settings import Settings
from ...model.workdir import Workdir, atomic_write
from .. import Progress, SubstrateUnavailable, proc
from . import accounting, apt, cgroups, directory, image, release, runtime, scripts, sitenoise, slurmconf
from .accounting import DB
from .network import Fabric, address_for, ns_inode
from .node import Node, NodeSpec
from .nsrunner import NamespaceRunner

PROVISION = resources.files("pytest_slurmflox.provision")
CLUSTER_NAME = "slurmflox"
CTL, LOGIN = "ctl", "login"
#: Memory a job that names none gets per CPU once memory is a consumable resource (CR_CPU_Memory; without a default a
#: job would hold its worker's whole memory and serialize everything on it). Fixed rather than derived from the
#: cohort's WORKER_MEM_MB/WORKER_CPUS, because a lifecycle revision changes those without restarting slurmctld; a
#: worker with less than this per CPU runs whole-worker jobs only when they name their memory.
DEF_MEM_PER_CPU_MB = 256


def cluster_prefix(workdir: Path) -> str:
    """Short, stable, per-work-dir namespace prefix (``sfx`` + 6 hex of the absolute work dir path)."""
    return "sfx" + hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:6]


@dataclass(frozen=True)
class BootFiles:
    """What a node is started from besides its own spec: the shared boot env, the image, the files' hash."""

    common: dict[str, str]
    image: image.NodeImage
    files_hash: str
    cgroups: cgroups.ClusterCgroups


class LocalCluster:
    """Node primitives of one local cluster (one work dir)."""

    def __init__(
        self,
        settings: Settings,
        workdir: Workdir,
        progress: Progress,
        cache: Path | None = None,
        site_noise: bool = False,
    ) -> None:
        self.settings = settings
        self.noise = sitenoise.NOISY if site_noise else sitenoise.QUIET  #: --slurmflox-local-site-noise
        self.cache = cache or image.cache_root()  #: node image and store cache (--slurmflox-local-cache), kept
        self.workdir = Workdir(workdir.root.resolve())
        self.progress = progress
        self.local = self.workdir.local
        self.prefix = cluster_prefix(self.workdir.root)
        self.fabric = Fabric(self.prefix)
        self._image: image.NodeImage | None = None
        self._locked = False
        #: RPC authentication: auth/slurm where the suite's Slurm has it (sackd, 23.11+), else auth/munge with the
        #: test account on the controller (image.SUITE_AUTH; slurmconf.ClusterConf.auth says why).
        self.auth = image.suite_auth(settings.local_suite) if settings.local_suite in image.SUITE_AUTH else "slurm"

    # ------------------------------------------------------------------------------------------ lock
    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """One lifecycle verb at a time per work dir (a second `up` waits instead of racing the first)."""
        if self._locked:
            yield
            return
        self.workdir.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.workdir.root / ".slurmflox-local.lock")):
            self._locked = True
            try:
                yield
            finally:
                self._locked = False

    # ------------------------------------------------------------------------------------------ paths & state
    @property
    def state_file(self) -> Path:
        return self.local / "state.json"

    @property
    def store(self) -> Path:
        return self.cache / "store"

    @property
    def target_file(self) -> Path:
        return self.workdir.root / "target.yaml"

    def read_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")

    def isolated_addresses(self, state: dict[str, Any] | None = None) -> dict[str, str]:
        isolated = (self.read_state() if state is None else state).get("isolated", {})
        return {name: v["address"] for name, v in isolated.items()}

    # ------------------------------------------------------------------------------------------ image
    def ensure_image(self) -> image.NodeImage:
        if self._image is None:
            apt.require_root_debian()
            apt.ensure_host_packages(self.progress)
            mirror = apt.debian_mirror(apt.host_sources())
            suite, accept = self.settings.local_suite, self.settings.local_accept_expired_release
            cached = image.cached_image(suite, self.cache) is not None
            checked = release.judged(mirror, suite, accept_expired=accept, cached=cached)
            self._image = image.ensure_image(suite, mirror, self.progress, self.cache, checked)
        return self._image

    def image_ref(self) -> str:
        return self.ensure_image().ref

    def revision_for(self, settings: Settings) -> str:
        return revision_mod.runtime_revision(settings, image=self.image_ref())

    # ------------------------------------------------------------------------------------------ nodes
    def make_node(self, name: str, role: str, address: str, boot: dict[str, str] | None = None) -> Node:
        return Node(self.local, self.fabric, NodeSpec(name, role, address, boot or {}))

    def worker_names(self, replicas: int | None = None) -> list[str]:
        count = self.settings.compute_replicas if replicas is None else replicas
        return [f"worker{i}" for i in range(1, count + 1)]

    def address(self, name: str) -> str:
        if name == CTL:
            return address_for(2)
        if name == LOGIN:
            return address_for(3)
        if name == DB:
            return accounting.db_address()
        if name.startswith("worker") and name[6:].isdigit():
            return address_for(9 + int(name[6:]))
        isolated = self.isolated_addresses()
        if name in isolated:
            return isolated[name]
        raise KeyError(name)

    def all_node_names(self) -> list[str]:
        """Nodes with a state dir (ctl, login, workers, isolated), in start order."""
        nodes_dir = self.local / "nodes"
        present = {p.name for p in nodes_dir.iterdir()} if nodes_dir.is_dir() else set()
        order = [DB, CTL, *sorted((n for n in present if n.startswith("worker")), key=_worker_key), LOGIN]
        rest = sorted(present - set(order))
        return [n for n in order if n in present] + rest

    def node(self, name: str) -> Node:
        role = name if name in (CTL, LOGIN, DB) else "worker"
        return self.make_node(name, role, self.address(name))

    def node_runner(self, node: str, user: str = "root") -> NamespaceRunner:
        """Run commands inside ``node`` (ctl, login, workerN) as ``user`` (must exist there)."""
        return NamespaceRunner(node=node, pid_of=self.node(node).init_pid, user=user)

    # ------------------------------------------------------------------------------------------ cgroups
    def cgroup_layout(self) -> tuple[cgroups.Support, cgroups.ClusterCgroups]:
        """What the nodes are contained by (measured when nothing is recorded yet); recorded in the state."""
        state = self.read_state()
        support, bases = cgroups.layout(self.prefix, state.get("cgroups"))
        entry = cgroups.record(support, bases)
        if state.get("cgroups") != entry:
            self.write_state({**state, "cgroups": entry})
        return support, cgroups.ClusterCgroups(bases)

    def recorded_cgroups(self) -> cgroups.ClusterCgroups:
        """The subtrees this cluster created (whichever process created them), for removal."""
        bases = (self.read_state().get("cgroups") or {}).get("bases") or {}
        return cgroups.ClusterCgroups({c: Path(p) for c, p in bases.items()})

    def cluster_conf(self, support: cgroups.Support) -> slurmconf.ClusterConf:
        """slurm.conf's parameters: process tracking and task plugins as far as the usable controllers allow."""
        tracking = "proctrack/cgroup" if "freezer" in support.usable else "proctrack/pgid"
        constrained = {"cpuset", "memory"} & set(support.usable)
        tasks = "task/cgroup,task/affinity" if constrained else "task/affinity"
        memory = "memory" in support.usable
        return slurmconf.ClusterConf(
            *(CLUSTER_NAME, CTL, address_for(2)),
            auth=self.auth,
            proctrack=tracking,
            task_plugin=tasks,
            select_params="CR_CPU_Memory" if memory else "CR_CPU",
            def_mem_per_cpu=DEF_MEM_PER_CPU_MB if memory else None,
            jobacct_gather=accounting.JOBACCT_GATHER,
            task_prolog=self.noise.task_prolog,
            prolog=self.noise.prolog,
            epilog=self.noise.epilog,
        )

    def cgroup_conf(self, support: cgroups.Support) -> slurmconf.CgroupConf:
        if not support.usable:
            return slurmconf.CgroupConf(plugin="disabled")
        memory = "memory" in support.usable
        return slurmconf.CgroupConf(
            constrain_cores="cpuset" in support.usable, constrain_ram=memory, constrain_swap=memory
        )

    # ------------------------------------------------------------------------------------------ files
    def write_files(self, extra_hosts: dict[str, str]) -> BootFiles:
        """Scripts, Slurm config and hosts that every node mounts; returns what nodes are started from."""
        img = self.ensure_image()
        support, node_cgroups = self.cgroup_layout()
        scripts_dir = self.local / "scripts"
        files = {
            "node-boot.sh": scripts.NODE_BOOT_SH,
            "node-init.sh": scripts.NODE_INIT_SH,
            "flox-activate": runtime.ACTIVATE_SH,
            "task-profile-init.sh": (PROVISION / "task-profile-init.sh").read_text(),
            "sshd_config": slurmconf.render_sshd_config(banner=self.noise.banner),
            "forward_program.py": (Path(__file__).parent / "forward_program.py").read_text(),
        }
        for name, text in files.items():
            write_if_changed(scripts_dir / name, text, 0o755)
        conf = slurmconf.render_conf_dir(self.cluster_conf(support), self.cgroup_conf(support))
        for name, text in conf.items():
            write_if_changed(self.local / "conf" / name, text, 0o644)
        prolog = (PROVISION / "task-prolog.sh").read_text()
        write_if_changed(self.local / "conf" / "flox-task-prolog" / "task-prolog.sh", prolog, 0o755)
        self._write_hosts(extra_hosts)
        (self.local / "home").mkdir(parents=True, exist_ok=True)
        (self.local / "home").chmod(0o755)
        if self.noise.prolog:
            self._write_site_noise(conf)
        digest = hashlib.sha256()
        for text in (*files.values(), *conf.values(), prolog, img.digest):
            digest.update(text.encode() + b"\0")
        common = {**self._common_boot(img), "CGROUP_CONTROLLERS": " ".join(support.usable)}
        return BootFiles(common, img, digest.hexdigest(), node_cgroups)

    def _write_site_noise(self, conf: dict[str, str]) -> None:
        """The site's TaskProlog, Prolog, Epilog, banner (into ``conf``, so the digest sees them) and .bashrc."""
        for name, (text, mode) in sitenoise.files().items():
            write_if_changed(self.local / "conf" / name, text, mode)
            conf[name] = text
        s = self.settings
        sitenoise.write_bashrc(self.local / "home", s.test_user, s.test_uid, s.test_gid)

    def _common_boot(self, img: image.NodeImage) -> dict[str, str]:
        return {
            "LOWER": str(img.rootfs),
            "HOME_DIR": str(self.local / "home"),
            "CONF_DIR": str(self.local / "conf"),
            "HOSTS_FILE": str(self.local / "hosts"),
            "SCRIPTS_DIR": str(self.local / "scripts"),
            "STORE_DIR": str(self.store),
            "NIX_DIR": str(self.cache / "nix" / "nix"),
            "MUNGE_KEY": str(self.workdir.munge_key),
            "AUTH": self.auth,
            "HOME_MOUNT": "/home",  # controller and login; a worker's boot env overrides it
        }

    def _write_hosts(self, extra: dict[str, str]) -> None:
        names = [(CTL, address_for(2)), (LOGIN, address_for(3)), (DB, accounting.db_address())]
        names += [(w, self.address(w)) for w in self.worker_names(max(self.settings.compute_replicas, 1))]
        names += sorted(extra.items())
        text = slurmconf.render_hosts(names)
        path = self.local / "hosts"
        # In place, never by rename: running nodes have this very inode bind-mounted as /etc/hosts.
        if not path.exists() or path.read_text() != text:
            with path.open("w") as handle:
                handle.write(text)
            path.chmod(0o644)

    # ------------------------------------------------------------------------------------------ start / stop
    def converge(self, node: Node, boot: BootFiles) -> bool:
        """Keep a proven-running node started from the same config; else (re)start it. True if started."""
        want = node.config_hash(boot.common, boot.files_hash)
        if node.running() and node.started_hash() == want and node.phase() == "running":
            return False
        if node.running():
            self.progress(f"local: restarting {node.name} (its configuration changed)")
            node.stop()
        # A node we lost track of (pid file gone or not provable) may still run inside its namespace: everything
        # in that namespace is ours by construction, so clear it before starting the node afresh.
        self.sweep({node.ns})
        # a fresh pod gets a fresh cgroup: whatever the previous run of this node left there goes first
        boot.cgroups.remove_node(node.name)
        procs = boot.cgroups.ensure_node(node.name)
        node.start(boot.common, image_digest=boot.image.digest, extra_hash=boot.files_hash, cgroup_procs=procs)
        return True

    def sweep(self, namespaces: set[str] | None = None) -> None:
        """Kill whatever still runs inside our namespaces (they are ours by construction), by PID."""
        names = self.fabric.ours() if namespaces is None else namespaces
        inodes = {ino for ns in names if (ino := ns_inode(ns)) is not None}
        for _ in range(3):
            pids = proc.pids_in_netns(inodes) if inodes else []
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in pids:
                proc.wait_gone(pid, 2)

    # ------------------------------------------------------------------------------------------ controller
    @property
    def acct_files(self) -> accounting.AccountingFiles:
        return accounting.AccountingFiles(self.local / "accounting")

    def controller(self) -> Node:
        """slurmctld, slurmrestd beside it, and the cluster's directory, through which it also resolves users
        (directory.ctl_boot): auth/jwt and auth/munge look the user up there; no local account."""
        boot = directory.ctl_boot(self.directory_files, self.settings)
        boot |= {**accounting.controller_boot(self.settings), "JWT_KEY": str(self.acct_files.jwt_key)}
        return self.make_node(CTL, CTL, address_for(2), boot)

    @property
    def directory_files(self) -> directory.DirectoryFiles:
        return directory.DirectoryFiles(self.local / "ldap")

    def db_node(self) -> Node:
        """MariaDB and slurmdbd."""
        return self.make_node(DB, DB, accounting.db_address(), self.acct_files.boot())

    def wait_db(self, timeout: float = 90.0) -> None:
        node = self.db_node()
        phase = node.wait_phase("running", timeout)
        if phase != "running":
            raise SubstrateUnavailable(f"local: the accounting node did not start: {phase}; see {node.dir}")

    def wait_controller(self, timeout: float = 60.0) -> None:
        ctl = self.controller()
        phase = ctl.wait_phase("running", timeout)
        if phase != "running":
            raise SubstrateUnavailable(f"local: controller did not start: {phase}; see {ctl.dir}")
        runner = self.node_runner(CTL)
        try:
            poll(lambda: "UP" in runner.run("scontrol ping", timeout=10).stdout or None, what="ping", timeout=timeout)
        except WaitTimedOut:
            raise SubstrateUnavailable(f"local: slurmctld does not answer `scontrol ping`; see {ctl.dir}") from None

    def forget_slurm_node(self, name: str) -> None:
        """Delete a dynamic node from slurmctld so a replacement registers afresh (refused while busy)."""
        self.node_runner(CTL).run("scontrol delete", f"nodename={name}", timeout=15)

    def sinfo_states(self) -> dict[str, str]:
        res = self.node_runner(CTL).run("sinfo -h -N -o '%N|%T'", timeout=15)
        states: dict[str, str] = {}
        for line in res.stdout.splitlines():
            name, _, state = line.partition("|")
            states[name.strip()] = state.strip()
        return states


_NOT_REGISTERED = {"", "down", "unknown", "fail", "failing", "inval", "future", "not_responding", "unk"}


def registered(state: str) -> bool:
    """A worker state from ``sinfo %T`` that means: registered and responding (any drain/allocation state)."""
    if state.endswith("*"):  # not responding
        return False
    return state.rstrip("~#!%$@^-+").lower() not in _NOT_REGISTERED


def _worker_key(name: str) -> int:
    tail = name[6:]
    return int(tail) if tail.isdigit() else 10**6


def write_if_changed(path: Path, text: str, mode: int) -> None:
    if path.exists() and path.read_text() == text:
        return
    atomic_write(path, text, mode=mode)


def rmtree(path: Path) -> None:
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
