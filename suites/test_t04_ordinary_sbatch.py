"""T4: ordinary sbatch scripts work unchanged, and a submission creates no Kubernetes object.

Requirement: a plain batch script (only #SBATCH directives, no Kubernetes syntax) runs to completion on a worker;
Slurm, not Kubernetes, takes the work: no Job or Pod appears for it at any moment of the job's life (the API is
watched from before submission until the job has ended, so an object created and deleted meanwhile is seen). Only
objects tied to the job count: made in the Slurm namespace, or naming the job in a label, annotation or owner
(kubeobjects.tied_to_job); the rest of a shared cluster goes on meanwhile.

Where the expectations come from: the script is written here (ordinary #SBATCH only, no Kubernetes syntax); "no
object" needs no reference; the job's final state must be COMPLETED and its output the script's own lines.
"""

from __future__ import annotations

import threading

import pytest

from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.cluster.kubeobjects import tied_to_job

from ._capability import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T4]

PLAIN_SCRIPT = """#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --time=2
echo "host=$(hostname) job=$SLURM_JOB_ID"
echo done-ordinary
"""


def test_plain_batch_script_completes(submit, workers):
    assert "kube" not in PLAIN_SCRIPT.lower() and "pod" not in PLAIN_SCRIPT.lower()
    job = submit.sbatch(PLAIN_SCRIPT)
    state = submit.wait(job)[job]
    out = submit.output(job)
    requirement(state.state == "COMPLETED", "the ordinary batch job COMPLETED", str(state), out)
    requirement("done-ordinary" in out and f"job={job}" in out, "its script ran as written", out)


class ObjectWatch(threading.Thread):
    """Watches Pods and Jobs in every namespace from a resource version on; records every ADDED object (as the API's
    JSON), judged afterwards by :func:`~pytest_slurmflox.cluster.kubeobjects.tied_to_job`."""

    def __init__(self, kube, kind: str) -> None:
        super().__init__(daemon=True)
        self.list_call = (
            kube.core.list_pod_for_all_namespaces if kind == "pod" else kube.batch.list_job_for_all_namespaces
        )
        self.kind = kind
        self.version = self.list_call().metadata.resource_version
        self.added: list[dict] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        from kubernetes import client, watch

        api = client.ApiClient()
        while not self.stopping.is_set():
            try:
                for event in watch.Watch().stream(self.list_call, resource_version=self.version, timeout_seconds=2):
                    obj = event["object"]
                    self.version = obj.metadata.resource_version or self.version
                    if event["type"] == "ADDED":
                        self.added.append({"kind": self.kind, **api.sanitize_for_serialization(obj)})
                    if self.stopping.is_set():
                        break
            except Exception as exc:  # shown as evidence; a broken watch must not pass silently
                self.errors.append(repr(exc))
                return


def test_submission_creates_no_kubernetes_object(target, submit):
    require(target, "kubernetes")
    watches = [ObjectWatch(target.kube, kind) for kind in ("pod", "job")]
    for w in watches:
        w.start()
    try:
        job = submit.sbatch(PLAIN_SCRIPT)
        state = submit.wait(job)[job]
    finally:
        for w in watches:
            w.stopping.set()
        for w in watches:
            w.join(timeout=10)
    errors = [e for w in watches for e in w.errors]
    requirement(not errors, "the Kubernetes API was watched for the whole life of the job", *errors)
    requirement(state.state == "COMPLETED", "the watched job completed", str(state))
    # only what is tied to the job counts: another tenant's CronJob elsewhere is not the job's doing
    namespace = target.spec.kubernetes.namespace
    tied = sorted(
        why
        for w in watches
        for obj in w.added
        if (why := tied_to_job(obj, namespace=namespace, job_id=job, job_name=submit.name))
    )
    seen = len([obj for w in watches for obj in w.added])
    requirement(
        not tied, f"no Job or Pod tied to the Slurm job appeared while it lived (of {seen} that appeared)", *tied
    )
