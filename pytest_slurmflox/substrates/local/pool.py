"""LocalWorkerPool: the local substrate's owner of the worker cohort (what the NodeSet is on Kubernetes).

Desired state lives in ``<workdir>/local/state.json`` (desired revision, replicas, worker settings); each worker
records its own annotations (image, environment, revision) in its node dir when it boots. ``apply`` replaces
every worker with one of the new runtime, as a NodeSet rollout replaces every pod. The substrate's ``up``
converges the cohort through the same code (``converge_cohort``), with the deployed runtime.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...model.abilities import DirectoryChanges, IsolatingWorkers, NixStoreRecord, RuntimeRecord, ServiceRestart
from ...model.pool import WorkerInfo, WorkerPool
from ...model.settings import WORKER_KEYS, Settings
from ...model.target import worker_settings_document, write_runtime
from ...model.workdir import atomic_write
from . import directory, nix, runtime, slurmconf
from .cluster import CTL, LOGIN, BootFiles, LocalCluster, rmtree
from .forwarders import Forwarders
from .network import address_for


class LocalWorkerPool(WorkerPool, IsolatingWorkers, ServiceRestart, RuntimeRecord, NixStoreRecord, DirectoryChanges):
    """The cohort over a cluster's node primitives (``cluster``), never over the substrate; ``forwarders`` because
    restarting the controller clears slurmrestd's forwarder, which lives in its namespace."""

    def __init__(self, cluster: LocalCluster, forwarders: Forwarders) -> None:
        self.cluster = cluster
        self.forwarders = forwarders

    # ------------------------------------------------------------------------------------------ protocol
    def desired_count(self) -> int:
        state = self.cluster.read_state()
        return int(state.get("replicas", self.cluster.settings.compute_replicas))

    def desired_revision(self) -> str | None:
        return self.cluster.read_state().get("revision")

    def apply(self, settings: Settings) -> str:
        """Restart every worker with ``settings``' runtime (environment, profile, CPUs, memory)."""
        with self.cluster.exclusive():
            return self._replace(settings)

    def workers(self) -> list[WorkerInfo]:
        state = self.cluster.read_state()
        names = [*state.get("workers", []), *sorted(state.get("isolated", {}))]
        infos = []
        for name in names:
            node = self.cluster.node(name)
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

    def revision_for(self, settings: Settings) -> str:
        """The revision ``settings`` deploy here: the local node image digest stands in for WORKER_IMAGE."""
        return self.cluster.revision_for(settings)

    def profile_revision(self, name: str) -> str | None:
        """Read worker ``name``'s task profile revision inside the node (not through Slurm)."""
        res = self.cluster.node_runner(name).run("cat /run/flox-task-profile/current/revision", timeout=15)
        text = res.stdout.strip()
        return text if res.ok and text else None

    def nix_store(self) -> nix.NixStore:
        """The substrate's Nix store, with this deployment's profiles."""
        return nix.NixStore(self.cluster.cache / "nix", deployment=self.cluster.prefix)

    def expected_store_path(self, ref: str) -> str:
        """The store path ``ref`` realizes to, computed by nix-instantiate over our derivation."""
        return self.nix_store().expected_path(ref)

    def store_verification(self, path: str) -> tuple[bool, str, str]:
        """Nix's own check of ``path`` in the substrate's store: (verify-path passed, its words, registered hash)."""
        store = self.nix_store()
        check = store.verify(path)
        return check.ok, check.detail, store.registered_hash(path) if check.ok else ""

    def nix_profile(self, name: str) -> str:
        """The Nix profile (a path under /nix, as every node mounts it) that pins worker ``name``'s generation: the
        provider's record of where the pin lives; what it points at is read on the worker."""
        return self.nix_store().profile(name)

    def realization(self, name: str) -> dict | None:
        """The runtime provider's record of what worker ``name`` was given: ``{"environment", "realized_path",
        "record"}`` (record: runtime.RealizationRecord.as_dict(), None if the provider has none). Read on the host
        from the substrate's node annotations and the store's records, which the worker cannot write; the suites
        compare what the worker really has with it."""
        from . import runtime

        ann = self.cluster.node(name).annotations()
        path = ann.get("realized_path")
        if not ann or not path:
            return None
        record = runtime.read_record(self.cluster.store, str(path).rsplit("/", 1)[-1])
        return {
            "environment": ann.get("environment"),
            "realized_path": path,
            "record": record.as_dict() if record else None,
        }

    def restart(self, name: str) -> None:
        """Restart worker ``name`` with the runtime it is pinned to (cohort settings, or its isolated reference)."""
        with self.cluster.exclusive():
            state = self.cluster.read_state()
            isolated = state.get("isolated", {})
            if name not in isolated and name not in state.get("workers", []):
                raise KeyError(f"{name} is not a worker of this cluster")
            # The deployed runtime (state), not this object's settings: another process may have moved the cohort.
            deployed, revision = self.deployed_runtime(state)
            if name in isolated:
                ref, revision = isolated[name]["environment"], self.cluster.revision_for(self.cluster.settings)
                deployed = self.cluster.settings
            else:
                ref = deployed.worker_flox_ref
            boot = self.cluster.write_files(self.cluster.isolated_addresses(state))
            self.converge_worker(name, deployed, ref, boot, revision, force=True)

    def restart_service(self, service: str) -> None:
        """Restart ``slurmdbd`` (the whole ``db`` node: MariaDB and slurmdbd) or ``slurmctld`` (the ``ctl`` node:
        slurmctld and slurmrestd) from their kept state, for TAR (accounting survives these restarts)."""
        cluster = self.cluster
        node, wait = {
            "slurmdbd": (cluster.db_node, cluster.wait_db),
            "slurmctld": (cluster.controller, cluster.wait_controller),
        }[service]
        with cluster.exclusive():
            boot = cluster.write_files(cluster.isolated_addresses())
            node().stop()
            cluster.converge(node(), boot)
            wait()
            # restarting a node clears its namespace, the REST forwarder (which lives in ctl's) included
            if service == "slurmctld":
                self.forwarders.ensure_rest()

    def start_isolated_worker(self, name: str, flox_ref: str) -> WorkerInfo:
        """An extra worker pinned to ``flox_ref`` (outside the cohort), for failure-isolation checks."""
        if not name.isidentifier() or name in (CTL, LOGIN) or name.startswith("worker"):
            raise ValueError(f"{name!r}: an isolated worker needs its own name (not ctl, login or workerN)")
        with self.cluster.exclusive():
            state = self.cluster.read_state()
            isolated = state.get("isolated", {})
            if name not in isolated:
                used = {v["address"] for v in isolated.values()}
                address = next(a for a in (_isolated_address(i) for i in range(50)) if a not in used)
                isolated[name] = {"address": address, "environment": flox_ref}
                self.cluster.write_state({**state, "isolated": isolated})
            boot = self.cluster.write_files(self.cluster.isolated_addresses())
            revision = self.cluster.revision_for(self.cluster.settings)
            self.converge_worker(name, self.cluster.settings, flox_ref, boot, revision, force=True)
            self.cluster.node(name).wait_phase("running", 30)
        return next(i for i in self.workers() if i.name == name)

    def modify_directory(self, ldif: str) -> Any:
        """An administrator's change to the cluster's directory (ldapmodify on the controller; group TDC)."""
        return directory.modify(self.cluster.node_runner(CTL), ldif)

    def isolated(self) -> set[str]:
        """Throwaway workers started by :meth:`start_isolated_worker`: listed, but not part of the cohort."""
        return set(self.cluster.read_state().get("isolated", {}))

    def phase(self, name: str) -> str:
        """Where worker ``name``'s boot stands, as its node init reports it (``running``, ``failed: <why>``...)."""
        return self.cluster.node(name).phase()

    def stop_isolated_worker(self, name: str) -> None:
        with self.cluster.exclusive():
            state = self.cluster.read_state()
            isolated = state.get("isolated", {})
            if name not in isolated:
                return
            self.remove_worker(name)
            isolated.pop(name)
            self.cluster.write_state({**state, "isolated": isolated})

    # ------------------------------------------------------------------------------------------ cohort
    def deployed_runtime(self, state: dict[str, Any]) -> tuple[Settings, str]:
        """The worker runtime the cohort was last asked to run (state), else the settings' (first up)."""
        settings = self.cluster.settings
        raw = state.get("settings")
        if not raw or not state.get("revision"):
            return settings, self.cluster.revision_for(settings)
        typed = {k.lower(): v for k, v in raw.items() if k in WORKER_KEYS and k != "WORKER_IMAGE"}
        deployed = settings.replace(**typed)
        revision = self.cluster.revision_for(deployed)
        if revision != state["revision"]:  # the node image changed under the deployed runtime
            self.cluster.progress(f"local: the node image changed; workers get {revision} (was {state['revision']})")
        return deployed, revision

    def converge_cohort(self, deployed: Settings, revision: str, boot: BootFiles) -> list[str]:
        """Remove workers beyond COMPUTE_REPLICAS, converge the wanted ones with ``deployed``; their names."""
        wanted = self.cluster.worker_names()
        self._remove_surplus(wanted)
        each(wanted, lambda name: self.converge_worker(name, deployed, deployed.worker_flox_ref, boot, revision))
        return wanted

    def _remove_surplus(self, wanted: list[str]) -> None:
        surplus = [n for n in self.cluster.all_node_names() if n.startswith("worker") and n not in wanted]
        each(surplus, self.remove_worker)

    def _replace(self, settings: Settings) -> str:
        """Replace the whole cohort with ``settings``' runtime (each worker restarted); new revision."""
        cluster = self.cluster
        img = cluster.ensure_image()
        # Only the worker runtime keys come from `settings` (callers often build them from a target's
        # expectations, with defaults elsewhere); ports, identity and COMPUTE_REPLICAS stay the deployment's.
        runtime_keys = {k.lower(): getattr(settings, k.lower()) for k in WORKER_KEYS if k != "WORKER_IMAGE"}
        settings = cluster.settings = cluster.settings.replace(**runtime_keys)
        boot = cluster.write_files(cluster.isolated_addresses())
        state = cluster.read_state()
        revision = cluster.revision_for(settings)
        wanted = cluster.worker_names()
        self._remove_surplus(wanted)
        cluster.write_state(
            {
                **state,
                "revision": revision,
                "replicas": settings.compute_replicas,
                "settings": worker_settings_document(settings, img.ref),
                "workers": wanted,
            }
        )
        for name in wanted:
            cluster.progress(f"local: replacing {name} with {settings.worker_flox_ref}")
            self.converge_worker(name, settings, settings.worker_flox_ref, boot, revision, force=True, keep_record=True)
        self._update_target_expect(settings)
        return revision

    def _update_target_expect(self, settings: Settings) -> None:
        """Point the target file's expectations at ``settings``' runtime, keeping everything else as written
        by ``up`` (this object may have been built from settings that differ in non-runtime keys, e.g. a pool
        made for a suite run: the login port or identity must not be rewritten from those). The file is
        target.py's to write (:func:`...target.write_runtime`)."""
        img = self.cluster.ensure_image()
        write_runtime(self.cluster.target_file, settings, self.cluster.revision_for(settings), img.ref)

    # ------------------------------------------------------------------------------------------ one worker
    def _worker_boot(
        self, name: str, settings: Settings, ref: str, realized: runtime.Realized, revision: str
    ) -> dict[str, str]:
        return {
            # node-init activates FLOX_ENV = readlink -e NIX_PROFILE: the worker runs from what its profile pins;
            # the store path itself is in the boot env so that a new pin restarts the node (config hash).
            "NIX_PROFILE": self.nix_profile(name),
            "SLURMFLOX_STORE_PATH": f"/nix/store/{realized.store_name}",
            "SLURMFLOX_ENVIRONMENT": ref,
            "SLURMFLOX_ACTIVATE_MODE": settings.worker_flox_activate_mode,
            "SLURMFLOX_IMAGE": self.cluster.image_ref(),
            "SLURMFLOX_REVISION": revision,
            "SLURMFLOX_PATH_PRECEDENCE": settings.worker_path_precedence,
            "SLURMFLOX_ENV_EXPORTS": ",".join(settings.worker_env_exports),
            "WORKER_CONF": slurmconf.worker_conf(settings.worker_cpus, settings.worker_mem_mb),
            "HOME_MOUNT": settings.worker_home_path,
            **directory.worker_boot(self.cluster.directory_files, settings, self.cluster.ensure_image().slurm_version),
        }

    def converge_worker(
        self,
        name: str,
        settings: Settings,
        ref: str,
        boot: BootFiles,
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
        cluster = self.cluster
        address = cluster.address(name)
        annotations = {
            "name": name,
            "image": boot.image.ref,
            "environment": ref,
            "revision": revision,
            "runtime_class": None,
        }
        try:
            realized = nix.realize_worker(ref, cluster.cache / "nix", cluster.store, name, cluster.prefix)
        except runtime.RealizationError as exc:
            node = cluster.make_node(name, "worker", address)
            node.stop()
            (node.dir / "ctl").mkdir(parents=True, exist_ok=True)
            atomic_write(node.annotations_file, json.dumps({**annotations, "realized_path": None}) + "\n")
            atomic_write(node.phase_file, f"failed: realization: {exc}\n")
            cluster.progress(f"local: {name}: runtime {ref} cannot be realized: {exc}")
            return
        node = cluster.make_node(name, "worker", address, self._worker_boot(name, settings, ref, realized, revision))
        if force and node.running():
            node.stop()
            if not keep_record:
                cluster.forget_slurm_node(name)
        atomic_write(
            node.annotations_file,
            json.dumps({**annotations, "realized_path": node.spec.boot["SLURMFLOX_STORE_PATH"]}, indent=2) + "\n",
        )
        cluster.converge(node, boot)

    def remove_worker(self, name: str) -> None:
        node = self.cluster.node(name)
        node.stop()
        if self.cluster.controller().running():
            self.cluster.forget_slurm_node(name)
        self.cluster.fabric.remove_node(name)
        self.cluster.recorded_cgroups().remove_node(name)
        self.nix_store().remove_profile(name)
        rmtree(node.dir)


#: How many workers are started or removed at once: a worker's own steps (a Nix profile, a namespace, a cgroup, a
#: process) mostly wait on the kernel and on Nix, so a cohort of 32 converges in seconds, not one worker at a time.
CONVERGE_AT_ONCE = 8


def each(names: Iterable[str], step: Callable[[str], None]) -> None:
    """``step`` for every worker, ``CONVERGE_AT_ONCE`` at a time; the first failure is raised once all are done."""
    with ThreadPoolExecutor(max_workers=CONVERGE_AT_ONCE, thread_name_prefix="sfx-worker") as pool:
        for future in [pool.submit(step, name) for name in names]:
            future.result()


def _isolated_address(index: int) -> str:
    return address_for(200 + index)
