"""QemuSubstrate: the verbs over the VM layer, the shared home and the Kubernetes stage (see the package
docstring for the layers)."""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...base.run import Result
from ...model.pool import WorkerPool
from ...model.settings import Settings, SubstrateOptions
from ...model.target import TargetSpec
from ...model.workdir import Workdir, atomic_write
from .. import Progress, Substrate, SubstrateUnavailable
from . import fabric, seed
from .guest import Guest
from .images import BootSpec, cached_or_fetch, local_image
from .vm import Accel, Vm, VmSpec, choose_accel, find_qemu

#: Written in the guest once its first boot (all of cloud-init) has finished.
FIRST_BOOT_MARKER = "/var/lib/slurmflox/first-boot-done"


@dataclass(frozen=True)
class BootTime:
    """Launch-to-SSH-ready of one VM in one ``up``."""

    node: int
    seconds: float
    started: bool  #: False if the VM was already running (then seconds is 0)


class QemuSubstrate(Substrate):
    """QEMU/kubeadm substrate. Keyword options exist for tests and for hosts that need them:

    ``image``: a local base image (with an optional ``.boot.json`` sidecar) instead of ``BASE_IMAGE``;
    ``accel``: ``auto`` (KVM, TCG on a nested PVM host), ``kvm`` or ``tcg``;
    ``restrict``: isolate guests (QEMU ``restrict=on``): only the port forwards reach them, they reach nothing;
    ``explicit``: worker keys given explicitly (besides those in the environment or worker-revision.env).

    The plugin passes the first three from its option table (--slurmflox-qemu-image/-accel/-restrict, env
    SLURMFLOX_QEMU_*); without them: BASE_IMAGE, auto, not restricted.
    """

    name = "qemu"

    @classmethod
    def from_options(
        cls,
        settings: Settings,
        workdir: Workdir,
        progress: Progress,
        options: SubstrateOptions,
        explicit: frozenset[str],
    ) -> QemuSubstrate:
        """The qemu rows of the option table: base image, accelerator, guest isolation."""
        return cls(
            settings,
            workdir,
            progress,
            image=options.qemu_image,
            accel=options.qemu_accel,
            restrict=options.qemu_restrict,
            explicit=explicit,
        )

    def __init__(
        self,
        settings: Settings,
        workdir: Workdir,
        progress: Progress,
        *,
        image: Path | None = None,
        accel: str | None = None,
        restrict: bool | None = None,
        ssh_timeout: float = 900.0,
        explicit: frozenset[str] = frozenset(),
    ) -> None:
        self.settings, self.workdir, self.progress = settings, workdir, progress
        self.image_path = image
        self.accel_request = accel or "auto"
        self.restrict = bool(restrict)
        self.ssh_timeout = ssh_timeout
        self.explicit = explicit  #: worker keys the caller knows were given explicitly (pre-warm decision)
        self.boot_times: list[BootTime] = []

    # ------------------------------------------------------------------------------------------ layout
    @property
    def fabric(self) -> fabric.Fabric:
        return fabric.Fabric(self.workdir.nodes / "fabric")

    def node_count(self) -> int:
        """The topology on disk (seeds or node dirs), else the settings: destructive verbs follow the disk."""
        topo = seed.read_topology(self.workdir)
        on_disk = [int(m[1]) for p in self.workdir.nodes.glob("node[1-9]") if (m := re.fullmatch(r"node(\d)", p.name))]
        return max([topo.nodes if topo else 0, *on_disk]) or self.settings.nodes

    def boot_spec(self) -> BootSpec:
        if self.image_path is not None:
            return local_image(self.image_path)
        candidate = Path(self.settings.base_image).expanduser()
        if candidate.is_absolute() or candidate.exists():
            return local_image(candidate)
        cached = self.workdir.base / self.settings.base_image
        if BootSpec.sidecar_of(cached).exists():
            return BootSpec.load(cached).verify()
        from .network import offline_reason

        reason = offline_reason(self.restrict, host_check=True)
        if reason:
            raise SubstrateUnavailable(
                f"offline: the base image {self.settings.base_image} is not cached in {self.workdir.base} and "
                f"cannot be downloaded ({reason}); pass a local image instead"
            )
        return cached_or_fetch(self.settings.base_image, self.workdir.base, self.progress)

    def vm(self, n: int, boot: BootSpec | None = None, accel: Accel | None = None, qemu: str = "") -> Vm:
        s = self.settings
        forwards: tuple[tuple[int, int], ...] = ()
        if n == 1:
            forwards = ((s.k8s_api_port, fabric.K8S_GUEST_API_PORT),)
            if s.login:
                forwards += ((s.login_ssh_port, s.login_nodeport),)
        spec = VmSpec(
            node=n,
            dir=self.workdir.nodes / fabric.hostname(n),
            boot=boot or BootSpec(image=Path("/nonexistent"), sha256=""),
            seed_iso=seed.node_iso(self.workdir, n),
            vcpus=s.vcpus,
            mem_mib=s.mem,
            ssh_port=fabric.ssh_port(s.ssh_port_base, n),
            mgmt_mac=fabric.mgmt_mac(n),
            fabric_mac=fabric.fabric_mac(n),
            fabric_netdev=self.fabric.netdev("fabric"),
            restrict=self.restrict,
            forwards=forwards,
        )
        return Vm(spec, accel or Accel("kvm", ()), qemu or "qemu-system-x86_64")

    def guest(self, n: int) -> Guest:
        return Guest(self.workdir, n, self.settings.ssh_port_base)

    # ------------------------------------------------------------------------------------------ VM layer
    def preflight(self) -> tuple[str, Accel, BootSpec]:
        """Everything the VM layer needs, checked before anything is written."""
        qemu = find_qemu()
        accel = choose_accel(self.accel_request)
        if shutil.which("vde_switch") is None:
            raise SubstrateUnavailable("vde_switch is not installed: the VM fabric needs it (apt-get install vde2)")
        seed.check_topology(self.workdir, self.settings.nodes)
        boot = self.boot_spec().verify()
        return qemu, accel, boot

    def up_vms(self) -> list[BootTime]:
        """Bring every VM up (or leave running ones alone) and wait until each answers over SSH."""
        qemu, accel, boot = self.preflight()
        if accel.warning:
            self.progress(f"WARNING: {accel.warning}")
        nodes = self.settings.nodes
        seed.ensure_seeds(self.workdir, nodes, self.settings.ssh_port_base)
        self.fabric.start()
        vms = [self.vm(n, boot, accel, qemu) for n in range(1, nodes + 1)]
        launched: dict[int, float] = {}
        for vm in vms:
            if vm.ensure_overlay(self.settings.disk_size):
                self.progress(f"{vm.spec.name}: new overlay over {boot.image.name}")
            if vm.pid() is None:
                launched[vm.spec.node] = time.monotonic()
                vm.start()
                self.progress(
                    f"{vm.spec.name}: QEMU started ({accel.name}, {vm.spec.vcpus} vCPU, "
                    f"{vm.spec.mem_mib} MiB, ssh 127.0.0.1:{vm.spec.ssh_port})"
                )
            else:
                self.progress(f"{vm.spec.name}: already running")

        def wait(vm: Vm) -> BootTime:
            guest = self.guest(vm.spec.node)
            try:
                guest.wait_ready(self.ssh_timeout, gone=vm.gone)
                t0 = launched.get(vm.spec.node)
                bt = BootTime(vm.spec.node, time.monotonic() - t0 if t0 else 0.0, t0 is not None)
                self.progress(f"{vm.spec.name}: SSH ready" + (f" {bt.seconds:.0f}s after launch" if t0 else ""))
                # A first boot is waited out completely (cloud-init's later stages still edit e.g. fstab);
                # a marker written afterwards lets later boots skip the wait.
                res = guest.run(
                    f"test -e {FIRST_BOOT_MARKER} || {{ cloud-init status --wait >/dev/null 2>&1; "
                    f"sudo -n install -D -m 0644 /dev/null {FIRST_BOOT_MARKER}; }}; cat /etc/slurmflox/nodes",
                    timeout=self.ssh_timeout,
                )
            finally:
                guest.close()
            if res.stdout.strip() != str(nodes):
                raise SubstrateUnavailable(
                    f"{vm.spec.name} was seeded for NODES={res.stdout.strip()!r}, "
                    f"not {nodes}: destroy and remove {self.workdir.seed}"
                )
            return bt

        with ThreadPoolExecutor(max_workers=nodes) as pool:
            self.boot_times = list(pool.map(wait, vms))
        return self.boot_times

    def shared_home(self) -> None:
        """node1 exports /home over NFS to the fabric; nodes 2..N mount it. Packages only if missing."""
        t0 = time.monotonic()
        nodes = self.settings.nodes
        g1 = self.guest(1)
        try:
            g1.script("ensure-packages.sh", *self._nfs_packages(g1, server=True)).check()
            g1.script("nfs-server.sh", fabric.FABRIC_NETWORK).check()
        finally:
            g1.close()
        self.progress(f"node1: /home exported ({time.monotonic() - t0:.0f}s)")

        def client(n: int) -> None:
            g = self.guest(n)
            try:
                g.script("ensure-packages.sh", *self._nfs_packages(g, server=False)).check()
                g.script("nfs-client.sh", fabric.fabric_ip(1)).check()
            finally:
                g.close()

        with ThreadPoolExecutor(max_workers=max(1, nodes - 1)) as pool:
            list(pool.map(client, range(2, nodes + 1)))
        self.progress(f"/home exported by node1, mounted on node2..node{nodes} ({time.monotonic() - t0:.0f}s)")

    @staticmethod
    def _nfs_packages(guest: Guest, *, server: bool) -> list[str]:
        if guest.run("command -v dnf >/dev/null").ok:
            return ["nfs-utils"]
        return ["nfs-kernel-server", "nfs-common"] if server else ["nfs-common"]

    # ------------------------------------------------------------------------------------------ verbs
    def refuse(self) -> None:
        """Nothing of its own: NODES is bounded by the settings, and the NodeSet takes any COMPUTE_REPLICAS the
        settings accept (up to Slurm's node limit); what its nodes cannot place stays pending, which the cohort
        pre-flight names."""

    def up(self) -> dict:
        """VMs, shared home, then Kubernetes and the Slurm stack (needs the internet); returns the target."""
        from .network import offline_reason
        from .provision import provision_cluster

        self.up_vms()
        if self.settings.shared_home:
            self.shared_home()
        reason = offline_reason(self.restrict, host_check=True)
        if reason:
            raise SubstrateUnavailable(
                f"offline: the VM layer is up, but Kubernetes {self.settings.kubernetes_version}, flannel, "
                f"cert-manager, Slinky and Flox must be downloaded and {reason}. Nothing past the VM layer was "
                "started; rerun up on a host whose guests can reach the internet"
            )
        return provision_cluster(self)

    def status(self) -> str:
        lines = [f"qemu substrate in {self.workdir.root}"]
        pid = self.fabric.proof().trusted_pid()
        lines.append(f"  fabric switch: {f'running (pid {pid})' if pid else 'stopped'}")
        for n in range(1, self.node_count() + 1):
            vm = self.vm(n)
            disk = "overlay present" if vm.spec.overlay.exists() else "no overlay"
            # the state stands alone as a word: callers look for "running" in status().split()
            lines.append(f"  {vm.spec.name}: {vm.status()} ({disk}, ssh 127.0.0.1:{vm.spec.ssh_port})")
        marker = self.workdir.root / "k8s" / "provisioned.json"
        lines.append(f"  kubernetes: {'provisioned' if marker.exists() else 'not provisioned'}")
        if self.workdir.kubeconfig.exists():
            try:
                from ...cluster.kube import KubeClient

                kube = KubeClient(self.workdir.kubeconfig, None, "slurm")
                for pod in kube.pods():
                    meta, st = pod["metadata"], pod.get("status", {})
                    lines.append(f"    pod {meta['name']}: {st.get('phase')}")
            except Exception as exc:  # status must report, never fail
                lines.append(f"    kubernetes API not reachable: {type(exc).__name__}: {exc}")
        return "\n".join(lines)

    def down(self) -> list[int]:
        """Power off in reverse node order (node1, the NFS server, last), then the switch. Keeps all state.
        Returns the node numbers in the order they were stopped."""
        order = []
        for n in range(self.node_count(), 0, -1):
            vm = self.vm(n)
            if vm.pid() is not None:
                took = vm.powerdown()
                self.progress(f"{vm.spec.name}: powered off in {took:.1f}s")
                order.append(n)
            elif vm.spec.pidfile.exists():
                self.progress(
                    f"{vm.spec.name}: pidfile {vm.spec.pidfile} not trusted "
                    f"({vm.proof().why_not(vm.proof().read_pid() or 0)}); not signalled"
                )
        self.fabric.stop()
        return order

    def destroy(self) -> None:
        """Stop and remove the VM overlays, pidfiles and logs; keep caches (base images) and seeds."""
        self.down()
        if self.workdir.nodes.exists():
            shutil.rmtree(self.workdir.nodes)
        for path in (self.workdir.root / "k8s" / "provisioned.json", self.workdir.root / "target.yaml"):
            path.unlink(missing_ok=True)
        self.progress(f"destroyed VM disks in {self.workdir.nodes}")

    def strip_secrets(self) -> list[Path]:
        """Refuses while any VM runs (stop first); removes keys, kubeconfig, seeds and disks."""
        running = [n for n in range(1, self.node_count() + 1) if self.vm(n).pid() is not None]
        if running:
            raise SubstrateUnavailable(f"node{running[0]} is running: run down before strip-secrets")
        self.fabric.stop()
        removed = self.workdir.strip_secrets()
        for extra in (self.workdir.root / "k8s" / "provisioned.json", self.workdir.root / "target.yaml"):
            if extra.exists():
                extra.unlink()
                removed.append(extra)
        return removed

    def ssh(self, n: int, command: str, *, timeout: float = 120) -> Result:
        """Run ``command`` on node ``n`` as the administrator (prefix ``sudo`` for root)."""
        if not 1 <= n <= self.node_count():
            raise SubstrateUnavailable(f"there is no node{n} (NODES={self.node_count()})")
        guest = self.guest(n)
        try:
            return guest.run(command, timeout=timeout)
        finally:
            guest.close()

    def target_spec(self) -> TargetSpec:
        from .provision import target_spec

        return target_spec(self)

    def pool(self) -> WorkerPool:
        from ...cluster.kube import KubeClient
        from .pool import NodeSetPool

        if not self.workdir.kubeconfig.exists():
            raise SubstrateUnavailable(f"no kubeconfig at {self.workdir.kubeconfig}: run up first")
        return NodeSetPool(self, KubeClient(self.workdir.kubeconfig, None, "slurm"))

    def record(self, name: str, doc: dict) -> None:
        atomic_write(self.workdir.root / "k8s" / name, json.dumps(doc, indent=2, sort_keys=True) + "\n")
