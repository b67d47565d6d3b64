"""LocalSubstrate: a real Slurm cluster (controller, login, workers) in Linux namespaces on this host.

Layout of ``<workdir>``::

    target.yaml           what the suites see (written by up)
    id_cluster(.pub)      operator SSH key (0600), accepted for root and the test user on the login node
    known_hosts           pins the login node's host key for [127.0.0.1]:LOGIN_SSH_PORT
    munge.key             the cluster's shared munge key (0600)
    local/state.json      cluster prefix, image, desired revision and worker settings, worker list
    local/conf/           slurm.conf, cgroup.conf, flox-task-prolog/task-prolog.sh (bound read-only at /etc/slurm)
    local/hosts           /etc/hosts of every node
    local/scripts/        node-boot.sh, node-init.sh, flox-activate, task-profile-init.sh, sshd_config, forward.py
    local/home/           the one shared /home
    local/login/          the login node's SSH host key
    local/nodes/<name>/   one node (see node.py)
    local/forward.pid.json  the loopback forwarder to the login node's sshd

The node image and the realized runtime store live in the cache (image.py), which destroy keeps.
Namespaces are named ``<prefix>-<node>`` with a prefix derived from the work dir, so clusters in different work
dirs never collide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from filelock import FileLock

from ... import revision as revision_mod
from ...pool import WorkerInfo
from ...settings import WORKER_KEYS, Settings, to_raw
from ...state import Workdir, atomic_write
from ...target import Endpoint, Expectations, Identity, TargetSpec, expect_document, target_document
from .. import Progress, SubstrateUnavailable
from . import apt, image, keys, proc, runtime, scripts, slurmconf
from .exec import NamespaceRunner
from .network import Fabric, address_for, ns_inode

T = TypeVar("T")
PROVISION = resources.files("pytest_slurmflox.provision")
CLUSTER_NAME = "slurmflox"
CTL, LOGIN = "ctl", "login"
NODE_IMAGE_PATH = "/flox/store"
#: Cluster authentication (see slurmconf.ClusterConf.auth for why auth/slurm is the default).
AUTH = "slurm"


def cluster_prefix(workdir: Path) -> str:
    """Short, stable, per-work-dir namespace prefix (``sfx`` + 6 hex of the absolute work dir path)."""
    return "sfx" + hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:6]


def _exclusive(method: Callable[..., T]) -> Callable[..., T]:
    """One lifecycle verb at a time per work dir (a second `up` waits instead of racing the first)."""

    @functools.wraps(method)
    def wrapper(self: LocalSubstrate, *args: Any, **kwargs: Any) -> T:
        if getattr(self, "_locked", False):
            return method(self, *args, **kwargs)
        self.workdir.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.workdir.root / ".slurmflox-local.lock")):
            self._locked = True
            try:
                return method(self, *args, **kwargs)
            finally:
                self._locked = False

    return wrapper


class LocalSubstrate:
    name = "local"

    def __init__(self, settings: Settings, workdir: Workdir, progress: Progress, cache: Path | None = None) -> None:
        self.settings = settings
        self.cache = cache or image.cache_root()  #: node image cache (--slurmflox-local-cache), kept by destroy
        self.workdir = Workdir(workdir.root.resolve())
        self.progress = progress
        self.local = self.workdir.local
        self.prefix = cluster_prefix(self.workdir.root)
        self.fabric = Fabric(self.prefix)
        self._image: image.NodeImage | None = None
        self._locked = False  #: this object holds the work dir's lock (see _exclusive)

    # ================================================================================== paths & state
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

    # ================================================================================== nodes
    def _node(self, name: str, role: str, address: str, boot: dict[str, str] | None = None):
        from .node import Node, NodeSpec

        return Node(self.local, self.fabric, NodeSpec(name, role, address, boot or {}))

    def worker_names(self, replicas: int | None = None) -> list[str]:
        n = self.settings.compute_replicas if replicas is None else replicas
        return [f"worker{i}" for i in range(1, n + 1)]

    def _address(self, name: str) -> str:
        if name == CTL:
            return address_for(2)
        if name == LOGIN:
            return address_for(3)
        if name.startswith("worker") and name[6:].isdigit():
            return address_for(9 + int(name[6:]))
        isolated = self.read_state().get("isolated", {})
        if name in isolated:
            return isolated[name]["address"]
        raise KeyError(name)

    def all_node_names(self) -> list[str]:
        """Nodes with a state dir (ctl, login, workers, isolated), in start order."""
        nodes_dir = self.local / "nodes"
        present = {p.name for p in nodes_dir.iterdir()} if nodes_dir.is_dir() else set()
        order = [CTL, *sorted((n for n in present if n.startswith("worker")), key=_worker_key), LOGIN]
        rest = sorted(present - set(order))
        return [n for n in order if n in present] + rest

    def node(self, name: str):
        role = CTL if name == CTL else LOGIN if name == LOGIN else "worker"
        return self._node(name, role, self._address(name))

    def node_runner(self, node: str, user: str = "root") -> NamespaceRunner:
        """Run commands inside ``node`` (ctl, login, workerN) as ``user`` (must exist there)."""
        return NamespaceRunner(node=node, pid_of=self.node(node).init_pid, user=user)

    # ================================================================================== files
    def _common_boot(self, img: image.NodeImage) -> dict[str, str]:
        return {
            "LOWER": str(img.rootfs),
            "HOME_DIR": str(self.local / "home"),
            "CONF_DIR": str(self.local / "conf"),
            "HOSTS_FILE": str(self.local / "hosts"),
            "SCRIPTS_DIR": str(self.local / "scripts"),
            "STORE_DIR": str(self.store),
            "MUNGE_KEY": str(self.workdir.munge_key),
            "AUTH": AUTH,
            "HOME_MOUNT": "/home",  # controller and login; a worker's boot env overrides it
        }

    def _write_files(self, img: image.NodeImage, extra_hosts: dict[str, str]) -> str:
        """Scripts, Slurm config, hosts; returns a hash of what every node's daemons read at start."""
        scripts_dir = self.local / "scripts"
        files = {
            "node-boot.sh": scripts.NODE_BOOT_SH,
            "node-init.sh": scripts.NODE_INIT_SH,
            "flox-activate": runtime.ACTIVATE_SH,
            "task-profile-init.sh": (PROVISION / "task-profile-init.sh").read_text(),
            "sshd_config": slurmconf.render_sshd_config(),
            "forward.py": (Path(__file__).parent / "forward.py").read_text(),
        }
        for name, text in files.items():
            _write_if_changed(scripts_dir / name, text, 0o755)
        conf = slurmconf.ClusterConf(CLUSTER_NAME, CTL, address_for(2), auth=AUTH)
        slurm_conf = slurmconf.render_slurm_conf(conf)
        cgroup_conf = slurmconf.render_cgroup_conf()
        prolog = (PROVISION / "task-prolog.sh").read_text()
        _write_if_changed(self.local / "conf" / "slurm.conf", slurm_conf, 0o644)
        _write_if_changed(self.local / "conf" / "cgroup.conf", cgroup_conf, 0o644)
        _write_if_changed(self.local / "conf" / "flox-task-prolog" / "task-prolog.sh", prolog, 0o755)
        self._write_hosts(extra_hosts)
        (self.local / "home").mkdir(parents=True, exist_ok=True)
        (self.local / "home").chmod(0o755)
        digest = hashlib.sha256()
        for text in (*files.values(), slurm_conf, cgroup_conf, prolog, img.digest):
            digest.update(text.encode() + b"\0")
        return digest.hexdigest()

    def _write_hosts(self, extra: dict[str, str]) -> None:
        names = [(CTL, address_for(2)), (LOGIN, address_for(3))]
        names += [(w, self._address(w)) for w in self.worker_names(max(self.settings.compute_replicas, 1))]
        names += sorted(extra.items())
        text = slurmconf.render_hosts(names)
        path = self.local / "hosts"
        # In place, never by rename: running nodes have this very inode bind-mounted as /etc/hosts.
        if not path.exists() or path.read_text() != text:
            with path.open("w") as handle:
                handle.write(text)
            path.chmod(0o644)

    # ================================================================================== up
    def ensure_image(self) -> image.NodeImage:
        if self._image is None:
            apt.require_root_debian()
            apt.ensure_host_packages(self.progress)
            mirror = apt.debian_mirror(apt.host_sources())
            self._image = image.ensure_image(self.settings.local_suite, mirror, self.progress, self.cache)
        return self._image

    def image_ref(self) -> str:
        return self.ensure_image().ref

    def revision_for(self, settings: Settings) -> str:
        return revision_mod.runtime_revision(settings, image=self.image_ref())

    @_exclusive
    def up(self) -> dict:
        t0 = time.monotonic()
        self._check_login_port()
        img = self.ensure_image()
        t_img = time.monotonic()
        s = self.settings
        self.local.mkdir(parents=True, exist_ok=True)
        keys.ensure_shared_key(self.workdir.munge_key)  # job credentials (cred/munge)
        if AUTH == "slurm":  # the auth/slurm RPC key, root-only, inside the config dir the nodes mount at /etc/slurm
            keys.ensure_shared_key(self.local / "conf" / "slurm.key")
        keys.ensure_ed25519(self.workdir.ssh_key, self.workdir.ssh_pubkey, "slurmflox-operator")
        host_pub = keys.ensure_ed25519(
            self.local / "login" / "ssh_host_ed25519_key",
            self.local / "login" / "ssh_host_ed25519_key.pub",
            "slurmflox-login",
        )
        atomic_write(self.workdir.known_hosts, keys.known_hosts_line("127.0.0.1", s.login_ssh_port, host_pub))
        state = self.read_state()
        isolated = state.get("isolated", {})
        files_hash = self._write_files(img, {n: v["address"] for n, v in isolated.items()})
        common = self._common_boot(img)
        # `up` builds or repairs the cluster; it never changes the runtime of a deployed cohort. That is the
        # lifecycle's job (pool.apply inside the maintenance barrier), exactly as on Kubernetes, where `up`
        # installs the chart and the NodeSet rollout replaces workers. So workers (re)started here get the
        # deployed runtime; only a first deployment takes the runtime from the settings.
        deployed, revision = self._deployed_runtime(state)
        self.store.mkdir(parents=True, exist_ok=True)
        self.fabric.ensure_fabric()

        # controller first: workers register with it
        ctl = self._node(CTL, CTL, address_for(2))
        self._converge(ctl, common, img, files_hash)
        self._wait_controller()

        # workers that should no longer exist (COMPUTE_REPLICAS shrank)
        wanted = self.worker_names()
        for name in self.all_node_names():
            if name.startswith("worker") and name not in wanted:
                self._remove_worker(name)
        for name in wanted:
            self._converge_worker(name, deployed, deployed.worker_flox_ref, common, img, files_hash, revision)
        login = self._node(LOGIN, LOGIN, address_for(3), self._login_boot())
        self._converge(login, common, img, files_hash)
        self._ensure_forwarder()
        self.write_state(
            {
                **state,
                "prefix": self.prefix,
                "image": img.ref,
                "revision": revision,
                "replicas": s.compute_replicas,
                "settings": self._worker_settings_raw(deployed, img.ref),
                "workers": wanted,
            }
        )
        failed = self._wait_ready(wanted, timeout=120)
        if failed:
            raise SubstrateUnavailable("local: workers failed to start: " + "; ".join(failed))
        target = self.target()
        atomic_write(self.target_file, yaml.safe_dump(target, sort_keys=False))
        self.progress(
            f"local: cluster up: {len(wanted)} workers idle, login on 127.0.0.1:{s.login_ssh_port} "
            f"({time.monotonic() - t_img:.1f}s after the image, {time.monotonic() - t0:.1f}s total)"
        )
        return target

    def _deployed_runtime(self, state: dict[str, Any]) -> tuple[Settings, str]:
        """The worker runtime the cohort was last asked to run (state), else the settings' (first up)."""
        raw = state.get("settings")
        if not raw or not state.get("revision"):
            return self.settings, self.revision_for(self.settings)
        typed = {k.lower(): v for k, v in raw.items() if k in WORKER_KEYS and k != "WORKER_IMAGE"}
        deployed = self.settings.replace(**typed)
        revision = self.revision_for(deployed)
        if revision != state["revision"]:  # the node image changed under the deployed runtime
            self.progress(f"local: the node image changed; workers get {revision} (was {state['revision']})")
        return deployed, revision

    def _worker_settings_raw(self, s: Settings, image_ref: str) -> dict[str, str]:
        raw = {key: to_raw(getattr(s, key.lower())) for key in WORKER_KEYS}
        raw["WORKER_IMAGE"] = image_ref  # the local meaning of the worker image: our node image digest
        return raw

    def _login_boot(self) -> dict[str, str]:
        s = self.settings
        return {
            "SSH_HOST_KEY": str(self.local / "login" / "ssh_host_ed25519_key"),
            "SSH_AUTHORIZED": str(self.workdir.ssh_pubkey),
            "TEST_USER": s.test_user,
            "TEST_UID": str(s.test_uid),
            "TEST_GID": str(s.test_gid),
            "TEST_GROUP": s.test_user,
            "TEST_SUPP_GROUP": s.test_supp_group,
            "TEST_SUPP_GID": str(s.test_supp_gid),
        }

    def _converge(self, node, common: dict[str, str], img: image.NodeImage, files_hash: str) -> bool:
        """Keep a proven-running node started from the same config; else (re)start it. True if started."""
        want = node.config_hash(common, files_hash)
        if node.running() and node.started_hash() == want and node.phase() == "running":
            return False
        if node.running():
            self.progress(f"local: restarting {node.name} (its configuration changed)")
            node.stop()
        # A node we lost track of (pid file gone or not provable) may still run inside its namespace: everything
        # in that namespace is ours by construction, so clear it before starting the node afresh.
        self._sweep({node.ns})
        node.start(common, image_digest=img.digest, extra_hash=files_hash)
        return True

    def _wait_controller(self, timeout: float = 60.0) -> None:
        ctl = self._node(CTL, CTL, address_for(2))
        phase = ctl.wait_phase("running", timeout)
        if phase != "running":
            raise SubstrateUnavailable(f"local: controller did not start: {phase}; see {ctl.dir}")
        runner = self.node_runner(CTL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if runner.run("scontrol ping", timeout=10).stdout.count("UP") >= 1:
                return
            time.sleep(0.1)
        raise SubstrateUnavailable(f"local: slurmctld does not answer `scontrol ping`; see {ctl.dir}")

    # ---------------------------------------------------------------------------------- workers
    def _worker_boot(self, s: Settings, ref: str, realized: runtime.Realized, revision: str) -> dict[str, str]:
        return {
            "FLOX_ENV": f"{NODE_IMAGE_PATH}/{realized.store_name}",
            "SLURMFLOX_ENVIRONMENT": ref,
            "SLURMFLOX_ACTIVATE_MODE": s.worker_flox_activate_mode,
            "SLURMFLOX_IMAGE": self.image_ref(),
            "SLURMFLOX_REVISION": revision,
            "SLURMFLOX_PATH_PRECEDENCE": s.worker_path_precedence,
            "SLURMFLOX_ENV_EXPORTS": ",".join(s.worker_env_exports),
            "WORKER_CONF": slurmconf.worker_conf(s.worker_cpus, s.worker_mem_mb),
            "HOME_MOUNT": s.worker_home_path,
        }

    def _converge_worker(
        self,
        name: str,
        s: Settings,
        ref: str,
        common: dict[str, str],
        img: image.NodeImage,
        files_hash: str,
        revision: str,
        *,
        force: bool = False,
        keep_record: bool = False,
    ) -> None:
        """Boot a worker like a pod: realize the runtime, record annotations, start (init, then slurmd).

        ``keep_record`` leaves slurmctld's record of the node in place across the restart, as a NodeSet pod
        replacement does: a changed CPU/memory declaration then meets the old record (the stale-record case the
        lifecycle's repair step exists for) instead of a conveniently clean slate.
        """
        address = self._address(name)
        annotations = {
            "name": name,
            "image": img.ref,
            "environment": ref,
            "revision": revision,
            "runtime_class": None,
        }
        try:
            realized = runtime.realize(ref, self.store)
        except runtime.RealizationError as exc:
            node = self._node(name, "worker", address)
            node.stop()
            node.dir.mkdir(parents=True, exist_ok=True)
            (node.dir / "ctl").mkdir(exist_ok=True)
            atomic_write(node.annotations_file, json.dumps({**annotations, "realized_path": None}) + "\n")
            atomic_write(node.phase_file, f"failed: realization: {exc}\n")
            self.progress(f"local: {name}: runtime {ref} cannot be realized: {exc}")
            return
        node = self._node(name, "worker", address, self._worker_boot(s, ref, realized, revision))
        if force and node.running():
            node.stop()
            if not keep_record:
                self._forget_slurm_node(name)
        atomic_write(
            node.annotations_file,
            json.dumps({**annotations, "realized_path": node.spec.boot["FLOX_ENV"]}, indent=2) + "\n",
        )
        self._converge(node, common, img, files_hash)

    def _forget_slurm_node(self, name: str) -> None:
        """Delete a dynamic node from slurmctld so a replacement registers afresh (refused while busy)."""
        runner = self.node_runner(CTL)
        runner.run(f"scontrol delete nodename={name}", timeout=15)

    def _remove_worker(self, name: str) -> None:
        node = self.node(name)
        node.stop()
        if self._node(CTL, CTL, address_for(2)).running():
            self._forget_slurm_node(name)
        self.fabric.remove_node(name)
        _rmtree(node.dir)

    def _sinfo_states(self) -> dict[str, str]:
        res = self.node_runner(CTL).run("sinfo -h -N -o '%N|%T'", timeout=15)
        states: dict[str, str] = {}
        for line in res.stdout.splitlines():
            name, _, state = line.partition("|")
            states[name.strip()] = state.strip()
        return states

    def _wait_ready(self, workers: list[str], timeout: float) -> list[str]:
        """Wait until every worker is idle in Slurm or has failed; returns the failures."""
        deadline = time.monotonic() + timeout
        login = self._node(LOGIN, LOGIN, address_for(3))
        while True:
            failed = []
            pending = []
            for name in workers:
                phase = self.node(name).phase()
                if phase.startswith("failed"):
                    failed.append(f"{name}: {phase}")
            states = self._sinfo_states()
            # Registered and responding is ready for the substrate; drain state is the lifecycle's business
            # (a rerun after an interrupted maintenance barrier finds the workers drained, and that is fine).
            pending = [w for w in workers if not _registered(states.get(w, ""))]
            pending = [w for w in pending if not any(f.startswith(w + ":") for f in failed)]
            login_ok = login.phase() == "running" and self._ssh_banner()
            if not pending and login_ok:
                return failed
            if time.monotonic() > deadline:
                detail = ", ".join(f"{w}={states.get(w, 'unregistered')}" for w in pending)
                raise SubstrateUnavailable(
                    f"local: not ready after {timeout:.0f}s (workers: {detail or 'ok'}; login: {login.phase()}, "
                    f"ssh banner: {login_ok})"
                )
            time.sleep(0.1)

    # ---------------------------------------------------------------------------------- forwarder
    @property
    def forward_pid_file(self) -> Path:
        return self.local / "forward.pid.json"

    def _forward_markers(self) -> tuple[str, ...]:
        return (str(self.local / "scripts" / "forward.py"), str(Fabric.ns_path(self.fabric.node_ns(LOGIN))))

    def _ensure_forwarder(self) -> None:
        port = self.settings.login_ssh_port
        rec = proc.PidRecord.read(self.forward_pid_file)
        if proc.proven(rec) and rec is not None and f"\0{port}\0" in "\0".join(proc.cmdline(rec.pid)) + "\0":
            return
        if proc.proven(rec) and rec is not None:
            proc.signal_proven(rec)
            proc.wait_gone(rec.pid, 5)
        netns = str(Fabric.ns_path(self.fabric.node_ns(LOGIN)))
        argv = [
            sys.executable,
            str(self.local / "scripts" / "forward.py"),
            "127.0.0.1",
            str(port),
            netns,
            address_for(3),
            "22",
        ]
        log = (self.local / "forward.log").open("ab")
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True
        )
        log.close()
        exe = Path(f"/proc/{popen.pid}/exe").readlink().name
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                tail = (self.local / "forward.log").read_text()[-600:]
                if "Address already in use" in tail:
                    raise SubstrateUnavailable(
                        f"local: 127.0.0.1:{port} (LOGIN_SSH_PORT) is taken by another program; choose another "
                        "port with --slurmflox-login-ssh-port"
                    )
                raise SubstrateUnavailable(f"local: the login port forwarder exited: {tail}")
            if "forwarding" in (self.local / "forward.log").read_text():
                break
            time.sleep(0.02)
        # the forwarder moved itself into the login namespace: record that namespace as its proof
        proc.record_for(popen.pid, exe, self._forward_markers(), ns_inode(self.fabric.node_ns(LOGIN))).write(
            self.forward_pid_file
        )

    def _check_login_port(self) -> None:
        """Refuse before changing anything if LOGIN_SSH_PORT is held by something other than our forwarder."""
        port = self.settings.login_ssh_port
        rec = proc.PidRecord.read(self.forward_pid_file)
        if proc.proven(rec) and rec is not None and str(port) in proc.cmdline(rec.pid):
            return
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                raise SubstrateUnavailable(
                    f"local: 127.0.0.1:{port} (LOGIN_SSH_PORT) is taken by another program ({exc.strerror}); "
                    "choose another port with --slurmflox-login-ssh-port (nothing was changed)"
                ) from None

    def _stop_forwarder(self) -> None:
        rec = proc.PidRecord.read(self.forward_pid_file)
        if rec is not None and proc.signal_proven(rec):
            proc.wait_gone(rec.pid, 5)
        self.forward_pid_file.unlink(missing_ok=True)

    def _ssh_banner(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.settings.login_ssh_port), timeout=2) as sock:
                sock.settimeout(2)
                return sock.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    # ================================================================================== target
    def target(self) -> dict:
        return target_document(self.target_spec())

    def target_spec(self) -> TargetSpec:
        """What this deployment is, as the suites see it: built from the settings object it was given."""
        s = self.settings
        img = self.ensure_image()
        login = Endpoint("127.0.0.1", s.login_ssh_port, s.test_user, self.workdir.ssh_key, self.workdir.known_hosts)
        return TargetSpec(
            path=None,
            name="local",
            substrate="local",
            workdir=self.workdir.root,
            login=login,
            admin=dataclasses.replace(login, user="root"),
            kubernetes=None,
            partition="all",
            identity=Identity(s.test_user, s.test_uid, s.test_gid, s.test_supp_group, s.test_supp_gid),
            # what the deployment should run: the settings' runtime (lifecycle moves the cohort there)
            expect=Expectations(s, self.revision_for(s), img.ref, s.compute_replicas),
            slurm_version=img.slurm_version.split("-")[0],
            deployed=s,
        )

    # ================================================================================== other verbs
    def status(self) -> str:
        lines = [f"local cluster {self.prefix} in {self.workdir.root}"]
        state = self.read_state()
        if state:
            lines.append(f"  image {state.get('image')}  revision {state.get('revision')}")
        # Only a node proven to be ours and alive is reported with the word "running" (callers grep for it).
        for name in self.all_node_names():
            node = self.node(name)
            rec = node.record()
            ann = node.annotations()
            env = f"  env {ann.get('environment')}" if ann else ""
            if node.running() and rec is not None:
                lines.append(f"  {name:<10} up    pid {rec.pid:<8} {node.phase()}{env}")
            else:
                phase = node.phase()
                why = f"  ({phase})" if phase.startswith("failed") else ""
                lines.append(f"  {name:<10} down{why}{env}")
        fwd = proc.PidRecord.read(self.forward_pid_file)
        lines.append(
            f"  login ssh 127.0.0.1:{self.settings.login_ssh_port} {'forwarded' if proc.proven(fwd) else 'closed'}"
        )
        if self._node(CTL, CTL, address_for(2)).running():
            res = self.node_runner(CTL).run("sinfo -N -o '%N %T %c %m %f'", timeout=15)
            lines += ["  " + line for line in res.stdout.splitlines()]
        return "\n".join(lines)

    @_exclusive
    def down(self) -> None:
        """Stop login, workers, controller (reverse start order) and the forwarder; keep all state."""
        self._stop_forwarder()
        for name in reversed(self.all_node_names()):
            if self.node(name).stop():
                self.progress(f"local: stopped {name}")
        self._sweep()
        self.fabric.remove_all()

    @_exclusive
    def destroy(self) -> None:
        """Down, then remove nodes, namespaces and state (keys, target file). The image cache stays."""
        self.down()
        _rmtree(self.local)
        for path in (
            self.target_file,
            self.workdir.ssh_key,
            self.workdir.ssh_pubkey,
            self.workdir.munge_key,
            self.workdir.known_hosts,
        ):
            path.unlink(missing_ok=True)
        self.progress(f"local: destroyed cluster {self.prefix} (image cache kept in {self.cache})")

    def _sweep(self, namespaces: set[str] | None = None) -> None:
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

    def pool(self):
        from .pool import LocalWorkerPool

        return LocalWorkerPool(self)

    # ================================================================================== pool support
    @_exclusive
    def replace_workers(self, settings: Settings) -> str:
        """Replace the whole cohort with ``settings``' runtime (each worker restarted); new revision."""
        img = self.ensure_image()
        # Only the worker runtime keys come from `settings` (callers often build them from a target's
        # expectations, with defaults elsewhere); ports, identity and COMPUTE_REPLICAS stay the deployment's.
        runtime_keys = {k.lower(): getattr(settings, k.lower()) for k in WORKER_KEYS if k != "WORKER_IMAGE"}
        settings = self.settings.replace(**runtime_keys)
        self.settings = settings
        state = self.read_state()
        files_hash = self._write_files(img, {n: v["address"] for n, v in state.get("isolated", {}).items()})
        common = self._common_boot(img)
        revision = self.revision_for(settings)
        wanted = self.worker_names()
        for name in self.all_node_names():
            if name.startswith("worker") and name not in wanted:
                self._remove_worker(name)
        self.write_state(
            {
                **state,
                "revision": revision,
                "replicas": settings.compute_replicas,
                "settings": self._worker_settings_raw(settings, img.ref),
                "workers": wanted,
            }
        )
        for name in wanted:
            self.progress(f"local: replacing {name} with {settings.worker_flox_ref}")
            self._converge_worker(
                name,
                settings,
                settings.worker_flox_ref,
                common,
                img,
                files_hash,
                revision,
                force=True,
                keep_record=True,
            )
        self._update_target_expect(settings)
        return revision

    def _update_target_expect(self, settings: Settings) -> None:
        """Point the target file's expectations at ``settings``' runtime, keeping everything else as written
        by ``up`` (this object may have been built from settings that differ in non-runtime keys, e.g. a pool
        made for a suite run: the login port or identity must not be rewritten from those)."""
        try:
            doc = yaml.safe_load(self.target_file.read_text())
        except (OSError, yaml.YAMLError):
            return
        if not isinstance(doc, dict):
            return
        img = self.ensure_image()
        replicas = int((doc.get("expect") or {}).get("replicas", settings.compute_replicas))
        doc["expect"] = expect_document(Expectations(settings, self.revision_for(settings), img.ref, replicas))
        deployed = (doc.get("deployment") or {}).get("settings")
        if isinstance(deployed, dict):  # the deployment now runs this runtime
            deployed.update({key: to_raw(getattr(settings, key.lower())) for key in WORKER_KEYS})
        atomic_write(self.target_file, yaml.safe_dump(doc, sort_keys=False))

    def worker_infos(self) -> list[WorkerInfo]:
        state = self.read_state()
        names = [*state.get("workers", []), *sorted(state.get("isolated", {}))]
        infos = []
        for name in names:
            node = self.node(name)
            ann = node.annotations()
            infos.append(
                WorkerInfo(
                    name=name,
                    ready=node.running() and node.phase() == "running",
                    revision=ann.get("revision"),
                    environment=ann.get("environment"),
                    image=ann.get("image"),
                    runtime_class=None,
                    host=socket.gethostname(),
                )
            )
        return infos

    @_exclusive
    def restart_worker(self, name: str) -> None:
        """Restart one worker with the runtime it is pinned to (cohort settings, or its isolated reference)."""
        img = self.ensure_image()
        state = self.read_state()
        isolated = state.get("isolated", {})
        if name not in isolated and name not in state.get("workers", []):
            raise KeyError(f"{name} is not a worker of this cluster")
        # The deployed runtime (state), not this object's settings: another process may have moved the cohort.
        deployed, revision = self._deployed_runtime(state)
        if name in isolated:
            ref, revision = isolated[name]["environment"], self.revision_for(self.settings)
            deployed = self.settings
        else:
            ref = deployed.worker_flox_ref
        files_hash = self._write_files(img, {n: v["address"] for n, v in isolated.items()})
        self._converge_worker(name, deployed, ref, self._common_boot(img), img, files_hash, revision, force=True)

    @_exclusive
    def start_isolated_worker(self, name: str, flox_ref: str) -> WorkerInfo:
        if not name.isidentifier() or name in (CTL, LOGIN) or name.startswith("worker"):
            raise ValueError(f"{name!r}: an isolated worker needs its own name (not ctl, login or workerN)")
        img = self.ensure_image()
        state = self.read_state()
        isolated = state.get("isolated", {})
        if name not in isolated:
            used = {v["address"] for v in isolated.values()}
            address = next(address_for(200 + i) for i in range(50) if address_for(200 + i) not in used)
            isolated[name] = {"address": address, "environment": flox_ref}
            self.write_state({**state, "isolated": isolated})
        files_hash = self._write_files(img, {n: v["address"] for n, v in isolated.items()})
        revision = self.revision_for(self.settings)
        self._converge_worker(
            name, self.settings, flox_ref, self._common_boot(img), img, files_hash, revision, force=True
        )
        node = self.node(name)
        node.wait_phase("running", 30)
        return next(i for i in self.worker_infos() if i.name == name)

    @_exclusive
    def stop_isolated_worker(self, name: str) -> None:
        state = self.read_state()
        isolated = state.get("isolated", {})
        if name not in isolated:
            return
        self._remove_worker(name)
        isolated.pop(name)
        self.write_state({**state, "isolated": isolated})


_NOT_REGISTERED = {"", "down", "unknown", "fail", "failing", "inval", "future", "not_responding", "unk"}


def _registered(state: str) -> bool:
    """A worker state from ``sinfo %T`` that means: registered and responding (any drain/allocation state)."""
    if state.endswith("*"):  # not responding
        return False
    return state.rstrip("~#!%$@^-+").lower() not in _NOT_REGISTERED


def _worker_key(name: str) -> int:
    tail = name[6:]
    return int(tail) if tail.isdigit() else 10**6


def _write_if_changed(path: Path, text: str, mode: int) -> None:
    if path.exists() and path.read_text() == text:
        return
    atomic_write(path, text, mode=mode)


def _rmtree(path: Path) -> None:
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
