"""LocalSubstrate: a real Slurm cluster (controller, login, workers) in Linux namespaces on this host.

Layout of ``<workdir>``::

    target.yaml           what the suites see (written by up)
    site-example.yaml     the same cluster as a customer's target (substrate existing, declared runtime: siteexample.py)
    id_cluster(.pub)      operator SSH key (0600), accepted for root and the test user on the login node
    known_hosts           pins the login node's host key for [127.0.0.1]:LOGIN_SSH_PORT
    munge.key             the cluster's shared munge key (0600)
    local/state.json      cluster prefix, image, desired revision and worker settings, worker list
    local/conf/           slurm.conf, cgroup.conf, mpi.conf, flox-task-prolog/task-prolog.sh (bound read-only at
                          /etc/slurm)
    local/hosts           /etc/hosts of every node
    local/scripts/        node-boot.sh, node-init.sh, flox-activate, task-profile-init.sh, sshd_config,
                          forward_program.py (the loopback forwarder, run on the host from here)
    local/home/           the one shared /home
    local/login/          the login node's SSH host key
    local/nodes/<name>/   one node (see node.py)
    local/forward.pid.json  the loopback forwarder to the login node's sshd
    local/accounting/     accounting secrets (0600), slurmdbd.conf and MariaDB's data (see accounting.py)
    local/rest-forward.pid.json  the loopback forwarder to slurmrestd (port: ``rest_port`` in state.json)

Each node's cgroups are ``<hierarchy>/<our cgroup>/slurmflox-<prefix>/<node>`` (freezer, cpuset, memory; see
cgroups.py), recorded under ``cgroups`` in ``local/state.json`` and removed by down/destroy.
The node image, the realized runtime store and the Nix store live in the cache (image.py), which destroy keeps;
destroy removes this deployment's Nix profiles (``nix/nix/var/nix/profiles/workers/<prefix>/``).
Namespaces are named ``<prefix>-<node>`` with a prefix derived from the work dir, so clusters in different work
dirs never collide.
"""

from __future__ import annotations

import dataclasses
import time

from ...base.waits import WaitTimedOut, poll, poll_missing
from ...model.capabilities import AccountingSpec, RestSpec
from ...model.directory import Directory
from ...model.settings import Settings, SubstrateOptions
from ...model.target import (
    Endpoint,
    Expectations,
    Identity,
    TargetSpec,
    target_document,
    worker_settings_document,
    write_target,
)
from ...model.workdir import Workdir, atomic_write
from .. import Progress, Substrate, SubstrateUnavailable
from . import accounting, apt, directory, image, keys, release
from .capacity import Capacity
from .cluster import CLUSTER_NAME, CTL, LOGIN, LocalCluster, registered, rmtree
from .forwarders import Forwarders
from .mpistack import mpi_stack
from .network import address_for
from .pool import LocalWorkerPool
from .siteexample import SITE_EXAMPLE, write_site_example


class LocalSubstrate(Substrate):
    """The lifecycle verbs over one local cluster (held, not inherited: cluster.py's node primitives), its cohort
    (pool.py) and its loopback forwarders (forwarders.py)."""

    name = "local"

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.forwarders = Forwarders(cluster)

    @classmethod
    def from_options(
        cls,
        settings: Settings,
        workdir: Workdir,
        progress: Progress,
        options: SubstrateOptions,
        explicit: frozenset[str],
    ) -> LocalSubstrate:
        """The local rows of the option table: the image/store cache and the site-noise switch."""
        return cls(
            LocalCluster(settings, workdir, progress, cache=options.local_cache, site_noise=options.local_site_noise)
        )

    def pool(self) -> LocalWorkerPool:
        """The cohort's owner, over the same cluster and forwarders (never over this substrate)."""
        return LocalWorkerPool(self.cluster, self.forwarders)

    # ================================================================================== up
    def refuse(self) -> None:
        """Refused before anything starts, in one line: more workers than this host holds (capacity.py); an image
        to build from a mirror whose suite Release file has expired, unless accepted (release.py)."""
        s = self.cluster.settings
        Capacity.of_host().refuse(s.compute_replicas)
        if s.local_suite not in image.SUPPORTED_SUITES or image.cached_image(s.local_suite, self.cluster.cache):
            return
        try:
            mirror = apt.debian_mirror(apt.host_sources())
        except SubstrateUnavailable:
            return  # not a Debian host: `up` names it where it needs the mirror
        release.judged(mirror, s.local_suite, accept_expired=s.local_accept_expired_release, cached=False)

    def up(self) -> dict:
        with self.cluster.exclusive():
            return self._up()

    def _up(self) -> dict:
        c = self.cluster
        t0 = time.monotonic()
        self.forwarders.login().check_port()
        img = c.ensure_image()
        t_img = time.monotonic()
        c.local.mkdir(parents=True, exist_ok=True)
        self._ensure_keys()
        directory.write_files(c.local, c.settings)  # slapd's config and seed, the bind secret
        boot = c.write_files(c.isolated_addresses())  # records the cgroup layout in the state
        state = c.read_state()
        pool = self.pool()
        # `up` builds or repairs the cluster; it never changes the runtime of a deployed cohort. That is the
        # lifecycle's job (pool.apply inside the maintenance barrier), exactly as on Kubernetes, where `up`
        # installs the chart and the NodeSet rollout replaces workers. So workers (re)started here get the
        # deployed runtime; only a first deployment takes the runtime from the settings.
        deployed, revision = pool.deployed_runtime(state)
        c.store.mkdir(parents=True, exist_ok=True)
        c.fabric.ensure_fabric()
        t_db = time.monotonic()
        c.converge(c.db_node(), boot)  # accounting first: slurmctld registers the cluster with slurmdbd
        c.wait_db()
        t_db = time.monotonic() - t_db
        c.converge(c.controller(), boot)  # controller before workers: workers register with it
        c.wait_controller()
        wanted = pool.converge_cohort(deployed, revision, boot)
        c.converge(c.make_node(LOGIN, LOGIN, address_for(3), self._login_boot()), boot)
        self.forwarders.login().ensure()
        rest_port = self.forwarders.ensure_rest()
        t_assoc = time.monotonic()  # while the workers and the login node boot
        accounting.ensure_associations(c.node_runner(CTL), CLUSTER_NAME, c.settings.test_user)
        t_assoc = time.monotonic() - t_assoc
        c.write_state(
            {
                **state,
                "rest_port": rest_port,
                "prefix": c.prefix,
                "image": img.ref,
                "revision": revision,
                "replicas": c.settings.compute_replicas,
                "settings": worker_settings_document(deployed, img.ref),
                "workers": wanted,
            }
        )
        failed = self._wait_ready(wanted, timeout=120)
        if failed:
            raise SubstrateUnavailable("local: workers failed to start: " + "; ".join(failed))
        t_rest = time.monotonic()
        self._wait_rest()
        t_rest = time.monotonic() - t_rest
        target = self._write_targets()
        c.progress(
            f"local: cluster up: {len(wanted)} workers idle, login on 127.0.0.1:{c.settings.login_ssh_port}, "
            f"REST on 127.0.0.1:{rest_port} ({time.monotonic() - t_img:.1f}s after the image, "
            f"{time.monotonic() - t0:.1f}s total; accounting and REST: db node {t_db:.1f}s, associations "
            f"{t_assoc:.1f}s, slurmrestd {t_rest:.1f}s)"
        )
        return target

    def _write_targets(self) -> dict:
        """``target.yaml`` (what the suites see), and ``site-example.yaml``: the same cluster as a customer describes
        theirs (substrate existing, its runtime declared: siteexample.py). The target document written."""
        c = self.cluster
        spec = self.target_spec()
        target = write_target(spec, c.target_file)
        site = write_site_example(spec, self.pool().nix_store(), c.noise.task_prolog, c.workdir.root)
        c.progress(f"local: {site}: this cluster as a customer's target (substrate existing, its runtime declared)")
        return target

    def _wait_rest(self, timeout: float = 30.0) -> None:
        fwd = self.forwarders.rest()
        try:
            poll(lambda: fwd.answers() or None, what="slurmrestd", timeout=timeout)
        except WaitTimedOut:
            where = self.cluster.controller().dir
            raise SubstrateUnavailable(f"local: slurmrestd does not answer on {fwd.url()}; see {where}") from None

    def _ensure_keys(self) -> None:
        c = self.cluster
        files = c.acct_files
        files.ensure()  # the storage password and the JWT key (0600)
        files.write_dbd_conf(accounting.render_slurmdbd_conf(files.password.read_text().strip(), c.auth))
        keys.ensure_shared_key(c.workdir.munge_key)  # job credentials (cred/munge)
        # the auth/slurm RPC key, root-only, inside the config dir the nodes mount at /etc/slurm
        if c.auth == "slurm":
            keys.ensure_shared_key(c.local / "conf" / "slurm.key")
        keys.ensure_ed25519(c.workdir.ssh_key, c.workdir.ssh_pubkey, "slurmflox-operator")
        host_pub = keys.ensure_ed25519(
            c.local / "login" / "ssh_host_ed25519_key",
            c.local / "login" / "ssh_host_ed25519_key.pub",
            "slurmflox-login",
        )
        port = c.settings.login_ssh_port
        atomic_write(c.workdir.known_hosts, keys.known_hosts_line("127.0.0.1", port, host_pub))

    def _login_boot(self) -> dict[str, str]:
        c = self.cluster
        return {
            "SSH_HOST_KEY": str(c.local / "login" / "ssh_host_ed25519_key"),
            "SSH_AUTHORIZED": str(c.workdir.ssh_pubkey),
            **directory.identity_boot(c.settings),
            **directory.login_boot(c.directory_files),
            "STRANGER_USER": accounting.UNASSOCIATED_USER,
            "STRANGER_UID": str(accounting.UNASSOCIATED_UID),
        }

    def _wait_ready(self, workers: list[str], timeout: float) -> list[str]:
        """Wait until every worker is registered in Slurm or has failed, and login answers; returns the failures."""
        c = self.cluster
        login = c.make_node(LOGIN, LOGIN, address_for(3))
        forwarder = self.forwarders.login()
        failed: list[str] = []

        def missing() -> str | None:
            failed[:] = [f"{w}: {phase}" for w in workers if (phase := c.node(w).phase()).startswith("failed")]
            states = c.sinfo_states()
            # Registered and responding is ready for the substrate; drain state is the lifecycle's business
            # (a rerun after an interrupted maintenance barrier finds the workers drained, and that is fine).
            pending = [w for w in workers if not registered(states.get(w, ""))]
            pending = [w for w in pending if not any(f.startswith(w + ":") for f in failed)]
            login_ok = login.phase() == "running" and forwarder.ssh_banner()
            if not pending and login_ok:
                return None
            detail = ", ".join(f"{w}={states.get(w, 'unregistered')}" for w in pending)
            return f"workers: {detail or 'ok'}; login: {login.phase()}, ssh banner: {login_ok}"

        try:
            poll_missing(missing, what="workers and login", timeout=timeout)
        except WaitTimedOut as exc:
            raise SubstrateUnavailable(f"local: not ready after {timeout:.0f}s ({exc.last})") from None
        return failed

    # ================================================================================== target
    def target(self) -> dict:
        return target_document(self.target_spec())

    def target_spec(self) -> TargetSpec:
        """What this deployment is, as the suites see it: built from the settings object it was given."""
        c = self.cluster
        s = c.settings
        img = c.ensure_image()
        login = Endpoint("127.0.0.1", s.login_ssh_port, s.test_user, c.workdir.ssh_key, c.workdir.known_hosts)
        return TargetSpec(
            path=None,
            name="local",
            substrate="local",
            workdir=c.workdir.root,
            login=login,
            admin=dataclasses.replace(login, user="root"),
            kubernetes=None,
            partition="all",
            identity=Identity(s.test_user, s.test_uid, s.test_gid, s.test_supp_group, s.test_supp_gid),
            # what the deployment should run: the settings' runtime (lifecycle moves the cohort there)
            expect=Expectations(s, c.revision_for(s), img.ref, s.compute_replicas),
            slurm_version=img.slurm_version.split("-")[0],
            mpi=mpi_stack(img.suite).plugin,  # the plugin the image's MPI starts under (mpistack.py)
            deployed=s,
            # what this substrate cannot enforce on this host: the affected checks SKIP naming it
            limitations=c.cgroup_layout()[0].limitations(),
            directory=Directory(
                *(directory.URI, directory.BASE_DN, s.test_user, (s.test_supp_group,)),
                bind_dn=directory.BIND_DN,
                bind_password_file=directory.LOGIN_SECRET,
            ),
            accounting=AccountingSpec(
                account=accounting.ACCOUNT,
                limited_account=accounting.LIMITED_ACCOUNT,
                limited_max_jobs=accounting.LIMITED_MAX_JOBS,
                unassociated_user=accounting.UNASSOCIATED_USER,
            ),
            rest=RestSpec(url=self.forwarders.rest().url()),
        )

    # ================================================================================== other verbs
    def status(self) -> str:
        c = self.cluster
        lines = [f"local cluster {c.prefix} in {c.workdir.root}"]
        state = c.read_state()
        if state:
            lines.append(f"  image {state.get('image')}  revision {state.get('revision')}")
        # Only a node proven to be ours and alive is reported with the word "running" (callers grep for it).
        for name in c.all_node_names():
            node = c.node(name)
            rec = node.record()
            ann = node.annotations()
            env = f"  env {ann.get('environment')}" if ann else ""
            if node.running() and rec is not None:
                lines.append(f"  {name:<10} up    pid {rec.pid:<8} {node.phase()}{env}")
            else:
                phase = node.phase()
                why = f"  ({phase})" if phase.startswith("failed") else ""
                lines.append(f"  {name:<10} down{why}{env}")
        forwarded = "forwarded" if self.forwarders.login().running() else "closed"
        lines.append(f"  login ssh 127.0.0.1:{c.settings.login_ssh_port} {forwarded}")
        rest = self.forwarders.rest()
        lines.append(f"  slurmrestd {rest.url()} {'forwarded' if rest.port and rest.running() else 'closed'}")
        lines += self._service_lines()
        if c.controller().running():
            res = c.node_runner(CTL).run("sinfo -N -o '%N %T %c %m %f'", timeout=15)
            lines += ["  " + line for line in res.stdout.splitlines()]
        return "\n".join(lines)

    def _service_lines(self) -> list[str]:
        """The daemons behind the optional services: the directory on ctl and its resolver on login,
        MariaDB and slurmdbd on the db node, slurmctld and slurmrestd on ctl."""
        lines = []
        services = (
            (CTL, "slapd", f"directory {directory.BASE_DN} at {directory.URI}"),
            (LOGIN, "nslcd", "resolver"),
            (accounting.DB, "mariadbd", "accounting database"),
            (accounting.DB, "slurmdbd", "accounting"),
            (CTL, "slurmctld", "controller"),
            (CTL, "slurmrestd", "REST API"),
        )
        for node, daemon, what in services:
            if not self.cluster.node(node).running():
                continue
            pids = self.cluster.node_runner(node).run("pidof", daemon, timeout=10).stdout.split()
            state = f"up    pid {pids[0]:<8}" if pids else "down" + " " * 14
            lines.append(f"  {daemon:<10} {state} on {node}: {what}")
        return lines

    def down(self) -> None:
        """Stop login, workers, controller (reverse start order) and the forwarder; keep all state."""
        c = self.cluster
        with c.exclusive():
            self.forwarders.login().stop()
            self.forwarders.rest().stop()
            for name in reversed(c.all_node_names()):
                if c.node(name).stop():
                    c.progress(f"local: stopped {name}")
            c.sweep()
            c.fabric.remove_all()
            c.recorded_cgroups().remove_all()  # after the processes: a cgroup with a task cannot be removed

    def destroy(self) -> None:
        """Down, then remove nodes, namespaces, state (keys, target file) and this deployment's Nix profiles. The
        image cache and the Nix store stay (README: how to prune the store)."""
        c = self.cluster
        with c.exclusive():
            self.down()
            self.pool().nix_store().remove_profiles()
            rmtree(c.local)
            for path in (
                c.target_file,
                c.workdir.root / SITE_EXAMPLE,
                c.workdir.ssh_key,
                c.workdir.ssh_pubkey,
                c.workdir.munge_key,
                c.workdir.known_hosts,
            ):
                path.unlink(missing_ok=True)
        c.progress(f"local: destroyed cluster {c.prefix} (image cache and Nix store kept in {c.cache})")
