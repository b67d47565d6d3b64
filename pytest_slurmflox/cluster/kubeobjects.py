"""Which Kubernetes objects a check may judge: only the target's, so a healthy shared cluster never FAILs.

A Kubernetes cluster is shared. Another healthy NodeSet's pods, an evicted ``Failed`` pod left behind, or another
tenant's CronJob creating a Job during a Slurm job are not the target's workers and not the job's doing; a check
that counts them FAILs a healthy cluster. These pure functions pick what a check may judge, so they are tested on
replayed API objects (tests/unit/test_kubeobjects.py) and the suites use them unchanged on a live API.

Object shapes are the Kubernetes API's (``metadata.ownerReferences``, ``metadata.labels``/``annotations``,
``status.phase``) as the client's ``to_dict()``/JSON gives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .nodeset import SLURMD_CONTAINER, owned_by

RUNNING = "Running"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def worker_pods(pods: Iterable[Mapping[str, Any]], nodeset: str) -> list[dict[str, Any]]:
    """The pods that are workers of the declared NodeSet now: owned by that NodeSet (``ownerReferences`` kind
    ``NodeSet``, its name), phase Running, with a ``slurmd`` container. Another NodeSet's pods and a Failed,
    Succeeded or Pending pod of this one are not judged as workers."""
    return [
        dict(p)
        for p in pods
        if owned_by(dict(p), "NodeSet", nodeset)
        and (p.get("status") or {}).get("phase") == RUNNING
        and any(c.get("name") == SLURMD_CONTAINER for c in (p.get("spec") or {}).get("containers") or [])
    ]


def tied_to_job(obj: Mapping[str, Any], *, namespace: str, job_id: str, job_name: str) -> str:
    """Why an object that appeared while a Slurm job lived is tied to that job ('' when it is not): it was made in
    the Slurm deployment's namespace, a label or annotation carries the job's id or name, or its owner is named
    after the job. An object elsewhere with none of these (another tenant's CronJob) is not the job's doing."""
    meta = _meta(obj)
    where = f"{obj.get('kind') or 'object'} {meta.get('namespace')}/{meta.get('name')}"
    if meta.get("namespace") == namespace:
        return f"{where}: in the Slurm namespace {namespace}"
    marks = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    for key, value in marks.items():
        text = str(value)
        # the job name is unique to this run; a bare job id only where the key says it is a Slurm job's
        if (job_name and job_name in text) or (text == job_id and _about_jobs(key)):
            return f"{where}: {key}={text} names the job"
    for owner in meta.get("ownerReferences") or []:
        name = str(owner.get("name") or "")
        if (job_name and job_name in name) or (job_id in name.split("-") and _about_jobs(name)):
            return f"{where}: owned by {owner.get('kind')}/{name}, named after the job"
    return ""


def _about_jobs(text: str) -> bool:
    return "slurm" in text.lower()
