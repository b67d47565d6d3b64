"""The worker pool of the qemu substrate is the Slinky NodeSet.

Desired state lives on the NodeSet (its pod template carries the runtime revision annotation), the request
to change it is a ``helm upgrade`` of the slurm chart with freshly rendered values, and the workers are the
NodeSet's pods with their annotations. helm runs on node1 (the host needs no helm binary).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from ...pool import WorkerInfo
from ...settings import Settings
from .addons import (
    NAMESPACE_SLURM,
    SLURM_RELEASE,
    VALUES_PATH,
    login_image_files_command,
    slurm_chart_command,
    split_login_files,
)

if TYPE_CHECKING:
    from ...kube import KubeClient
    from . import QemuSubstrate

ANNOTATION_REVISION = "slinky.local/runtime-revision"
ANNOTATION_ENVIRONMENT = "flox.dev/environment"
NODESET_NAME = f"{SLURM_RELEASE}-worker-compute"
LOGIN_IMAGE_DEFAULT = "ghcr.io/slinkyproject/login:26.05-ubuntu26.04"


def nodeset_revision(nodeset: dict[str, Any] | None) -> str | None:
    """The revision on a NodeSet's pod template (falling back to the NodeSet's own annotations)."""
    if not nodeset:
        return None
    spec = nodeset.get("spec", {})
    for meta in (spec.get("template", {}).get("metadata", {}), nodeset.get("metadata", {})):
        value = (meta.get("annotations") or {}).get(ANNOTATION_REVISION)
        if value:
            return value
    return None


def worker_from_pod(pod: dict[str, Any]) -> WorkerInfo:
    """A NodeSet pod as a WorkerInfo: Ready condition, annotations, slurmd image, RuntimeClass, node."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    annotations = meta.get("annotations") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    image = next((c.get("image") for c in spec.get("containers", []) if c.get("name") == "slurmd"), None)
    return WorkerInfo(
        name=spec.get("hostname") or meta.get("name", ""),
        ready=ready,
        revision=annotations.get(ANNOTATION_REVISION),
        environment=annotations.get(ANNOTATION_ENVIRONMENT),
        image=image,
        runtime_class=spec.get("runtimeClassName"),
        host=spec.get("nodeName"),
    )


def owned_by(pod: dict[str, Any], kind: str, name: str) -> bool:
    return any(
        o.get("kind") == kind and o.get("name") == name for o in pod.get("metadata", {}).get("ownerReferences") or []
    )


class NodeSetPool:
    """WorkerPool over the compute NodeSet of the ``slurm`` release."""

    def __init__(self, substrate: QemuSubstrate, kube: KubeClient, nodeset: str = NODESET_NAME) -> None:
        self.substrate, self.kube, self.nodeset_name = substrate, kube, nodeset

    def desired_count(self) -> int:
        ns = self.kube.nodeset(self.nodeset_name)
        replicas = (ns or {}).get("spec", {}).get("replicas")
        return int(replicas) if replicas is not None else self.substrate.settings.compute_replicas

    def desired_revision(self) -> str | None:
        return nodeset_revision(self.kube.nodeset(self.nodeset_name))

    def workers(self) -> list[WorkerInfo]:
        pods = [p for p in self.kube.pods() if owned_by(p, "NodeSet", self.nodeset_name)]
        return [worker_from_pod(p) for p in pods]

    def apply(self, settings: Settings) -> str:
        """Render the values for ``settings``' worker runtime (the deployment's own settings elsewhere), place them
        on node1 and ``helm upgrade --install``."""
        from ...render.values import render_slurm_values, test_identity_files
        from ...revision import runtime_revision
        from ...settings import WORKER_KEYS

        runtime = {key.lower(): getattr(settings, key.lower()) for key in WORKER_KEYS}
        settings = self.substrate.settings.replace(**runtime)
        revision = runtime_revision(settings)
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
            )
            guest.put(VALUES_PATH, yaml.safe_dump(values, sort_keys=False), mode="0600").check()
            guest.root(slurm_chart_command(settings), timeout=1200).check()
        finally:
            guest.close()
        return revision


__all__ = ["NAMESPACE_SLURM", "NodeSetPool", "nodeset_revision", "worker_from_pod"]
