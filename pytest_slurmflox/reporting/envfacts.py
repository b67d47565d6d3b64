"""Environment facts of a run: what the target file says and what only a live connection tells.

The report writer shows these rows; it never talks to a cluster itself. Live facts are read through the target's
own clients (Slurm, :class:`~pytest_slurmflox.cluster.kube.KubeClient`, the worker pool), each on its own: a fact that
cannot be read says why instead of failing the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def image_digest(image: str) -> str | None:
    match = re.search(r"@(sha256:[0-9a-f]{64})", image)
    return match.group(1) if match else None


def target_metadata(run_id: str, substrate: str | None, target_path: Path | None, spec: Any) -> dict[str, str]:
    """Environment-table rows known from the target file alone (the controller may never connect)."""
    rows = {"Run id": run_id, "Substrate": substrate or "unknown"}
    if target_path is None or spec is None:
        rows["Target"] = str(target_path) if target_path else "none"
        return rows
    from ..model.declared import ENV, IMAGE, KUBERNETES, PARTITION, REPLICAS, REVISION, REVISION_INPUTS, missing

    exp = spec.expect

    def shown(value: str, *keys: str) -> str:
        """A customer's undeclared expectation is shown as such, never as the reference default."""
        return "not declared" if missing(spec.declared, keys) else value

    revision_declared = not missing(spec.declared, (REVISION,)) or not missing(spec.declared, REVISION_INPUTS)
    rows.update(
        {
            "Target": f"{spec.name} ({target_path})",
            "Substrate": spec.substrate,
            "Login endpoint": f"{spec.login.user}@{spec.login.host}:{spec.login.port}"
            + (" via " + ",".join(f"{j.user}@{j.host}:{j.port}" for j in spec.login.jumps) if spec.login.jumps else ""),
            "Partition": shown(spec.partition, PARTITION),
            "Worker image": shown(exp.image, IMAGE),
            "Worker image digest": shown(image_digest(exp.image) or "not pinned by digest", IMAGE),
            "Environment reference": shown(exp.settings.worker_flox_env, ENV[0]),
            "Environment generation": shown(str(exp.settings.worker_flox_generation), ENV[1]),
            "Runtime revision (expected)": exp.revision if revision_declared else "not declared",
            "Worker replicas (expected)": shown(str(exp.replicas), REPLICAS),
        }
    )
    if spec.kubernetes is not None:
        kube = spec.kubernetes
        rows["Kubernetes namespace / NodeSet"] = shown(f"{kube.namespace} / {kube.nodeset}", *KUBERNETES)
    return rows


#: Rows filled from the live target; shown as unknown when no check connected.
FACT_ROWS = (
    "Slurm version",
    "Kubernetes version",
    "Slurm chart version",
    "Slinky operator version",
    "Worker images (observed)",
    "Runtime revision (desired by owner)",
)


def target_facts(target: Any) -> dict[str, str]:
    """What only a live connection tells: versions and what the worker owner reports. Best effort, each fact
    on its own: a fact that cannot be read says why instead of failing the run."""
    facts: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            value = fn()
            if value:
                facts[name] = str(value)
        except Exception as exc:
            facts[name] = f"unknown ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"

    if target.why_missing("slurm") is None:
        attempt("Slurm version", target.slurm.version)
    else:
        facts["Slurm version"] = f"unknown ({target.why_missing('slurm')})"
    kube = target.kube if target.why_missing("kubernetes") is None else None
    if kube is not None:
        attempt("Kubernetes version", kube.server_version)

        def chart() -> str:
            labels = [(ns.get("metadata") or {}).get("labels") or {} for ns in kube.nodesets()]
            return ", ".join(sorted({lab["helm.sh/chart"] for lab in labels if "helm.sh/chart" in lab})) or "unknown"

        def operator() -> str:
            images = set()
            for pod in kube.pods_all_namespaces():
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if "operator" in labels.get("app.kubernetes.io/name", ""):
                    images |= {c.get("image", "") for c in (pod.get("spec") or {}).get("containers", [])}
            return ", ".join(sorted(images)) or "not found"

        attempt("Slurm chart version", chart)
        attempt("Slinky operator version", operator)
    else:
        why = target.why_missing("kubernetes")
        for name in ("Kubernetes version", "Slurm chart version", "Slinky operator version"):
            facts[name] = f"not applicable ({why})"
    if target.pool is not None:
        attempt("Worker images (observed)", lambda: ", ".join(sorted({w.image or "?" for w in target.pool.workers()})))
        attempt("Runtime revision (desired by owner)", target.pool.desired_revision)
    return facts
