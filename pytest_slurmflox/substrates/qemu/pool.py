"""The worker pool of the qemu substrate: the Slinky NodeSet of our own ``slurm`` release.

Reading the cohort is :class:`~pytest_slurmflox.cluster.nodeset.NodeSetView` (shared with customer targets). What this
adds is the owner's side, which only a deployment of ours may do: the request to change the cohort is a
``helm upgrade`` of the slurm chart with freshly rendered values, a worker restart is deleting its pod (the
NodeSet controller recreates it and slurmd registers again). Both run with kubectl/helm on node1, so the host
needs neither binary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from ...base.run import Result
from ...cluster.nodeset import NodeSetView, nodeset_revision, owned_by, worker_from_pod
from ...model.abilities import NodeAdmin
from ...model.pool import WorkerPool
from ...model.revision import runtime_revision
from ...model.settings import Settings
from . import fabric
from .addons import (
    NAMESPACE_SLURM,
    SLURM_RELEASE,
    VALUES_PATH,
    login_image_files_command,
    slurm_chart_command,
    split_login_files,
)
from .kubeadm import kubectl
from .render.values import nodeset_name

if TYPE_CHECKING:
    from ...cluster.kube import KubeClient
    from . import QemuSubstrate

#: The compute NodeSet the slurm chart's ``nodesets.compute`` entry creates: ``<release>-worker-<key>``
#: (slurm-operator v1.2.1 helm/slurm/templates/nodeset/nodeset-cr.yaml with _helpers.tpl "slurm.worker.name").
NODESET_NAME = nodeset_name(SLURM_RELEASE)  # what the rendered values declare (Slinky 1.2 has no default)
LOGIN_IMAGE_DEFAULT = "ghcr.io/slinkyproject/login:26.05-ubuntu26.04"
#: One worker's replacement in a rollout, at most: the old pod's preStop and grace period, the image, the Flox
#: shim's first realization of the environment (REFERENCE-DESIGN "Pre-warming large worker environments": a
#: large first realization can outlast kubelet's runtime request timeout and be retried), slurmd's registration.
WORKER_REPLACEMENT_SECONDS = 900.0
#: Slack for everything else a waiting step sees (helm, scheduling, the operator's reconcile interval).
STEP_SLACK_SECONDS = 300.0


class NodeSetPool(NodeSetView, WorkerPool, NodeAdmin):
    """WorkerPool over the compute NodeSet of the ``slurm`` release of a qemu deployment."""

    def __init__(self, substrate: QemuSubstrate, kube: KubeClient, nodeset: str = NODESET_NAME) -> None:
        super().__init__(kube, nodeset, default_replicas=substrate.settings.compute_replicas)
        self.substrate = substrate

    def revision_for(self, settings: Settings) -> str:
        """The revision of ``settings``: WORKER_IMAGE is deployed as named (a digest reference), so it is hashed
        as it stands, exactly as :meth:`apply` stamps it on the pod template."""
        return runtime_revision(settings)

    def apply(self, settings: Settings) -> str:
        """Render the values for ``settings``' worker runtime and worker count (the deployment's own settings
        elsewhere), place them on node1 and ``helm upgrade --install``."""
        from ...model.settings import WORKER_KEYS
        from .render.values import render_slurm_values, test_identity_files

        runtime = {key.lower(): getattr(settings, key.lower()) for key in WORKER_KEYS}
        # the cohort's size too: COMPUTE_REPLICAS is outside the revision, but the Reconciler applies a change of it
        settings = self.substrate.settings.replace(**runtime, compute_replicas=settings.compute_replicas)
        revision = self.revision_for(settings)
        identity = None
        guest = self.substrate.guest(1)
        try:
            if settings.login and settings.test_identity:
                out = guest.root(login_image_files_command(LOGIN_IMAGE_DEFAULT), timeout=900).check().stdout
                files = split_login_files(out)
                identity = test_identity_files(settings, files["passwd"], files["group"], files["shadow"])
            pubkey = self.substrate.workdir.ssh_pubkey.read_text().strip()
            values = render_slurm_values(
                settings,
                revision=revision,
                chart_version=settings.slinky_version,
                identity=identity,
                root_ssh_authorized_keys=pubkey,
                test_ssh_authorized_keys=pubkey if settings.login and settings.test_identity else None,
            )
            guest.put(VALUES_PATH, yaml.safe_dump(values, sort_keys=False), mode="0600").check()
            guest.root(slurm_chart_command(settings), timeout=1200).check()
        finally:
            guest.close()
        return revision

    def step_timeout(self, settings: Settings) -> float:
        """A rolling replacement of every worker, one realization each, one after another: the NodeSet replaces
        at most ``maxUnavailable`` pods at a time (slurm-operator v1.2.1 internal/controller/nodeset/
        nodeset_sync.go, ``GetScaledValueFromIntOrPercent(..., total, true, 1)``: 25% rounded up by the CRD's
        default, 1 when unset), which for the small cohorts here is one pod per wave; so every worker is budgeted
        in sequence, never in parallel."""
        return STEP_SLACK_SECONDS + settings.compute_replicas * WORKER_REPLACEMENT_SECONDS

    def containerd_config(self, host: str) -> Result:
        """``containerd config dump`` on Kubernetes node ``host``, as root over the substrate's own SSH: the
        configuration containerd really runs with (imports merged), for T1 to judge. Never from a pod."""
        numbers = [n for n in range(1, self.substrate.node_count() + 1) if fabric.hostname(n) == host]
        if not numbers:
            raise ValueError(f"{host} is not a node of this deployment")
        guest = self.substrate.guest(numbers[0])
        try:
            return guest.root("containerd config dump", timeout=60)
        finally:
            guest.close()

    def restart(self, name: str) -> None:
        """Delete worker ``name``'s pod; the NodeSet controller recreates it and its slurmd registers again."""
        pod = self.pod_of(name)
        guest = self.substrate.guest(1)
        try:
            guest.root(kubectl("-n", self.kube.namespace, "delete", "pod", pod, "--wait=false"), timeout=120).check()
        finally:
            guest.close()


__all__ = ["NAMESPACE_SLURM", "NODESET_NAME", "NodeSetPool", "nodeset_revision", "owned_by", "worker_from_pod"]
