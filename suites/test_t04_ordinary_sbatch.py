"""T4: ordinary sbatch scripts work unchanged, and a submission creates no Kubernetes object.

Requirement: a plain batch script (only #SBATCH directives, no Kubernetes syntax) runs to completion on a worker;
Slurm, not Kubernetes, takes the work: no Job or Pod appears for it at any moment of the job's life (the API is
watched from before submission until the job has ended, so an object created and deleted meanwhile is seen).

Where the expectations come from: the script is written here (ordinary #SBATCH only, no Kubernetes syntax); "no
object" needs no reference; the job's final state must be COMPLETED and its output the script's own lines.
"""

from __future__ import annotations

import threading

import pytest

from ._support import require, requirement

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
    """Watches Pods and Jobs in every namespace from a resource version on; records every ADDED object."""

    def __init__(self, kube, kind: str) -> None:
        super().__init__(daemon=True)
        self.list_call = (
            kube.core.list_pod_for_all_namespaces if kind == "pod" else kube.batch.list_job_for_all_namespaces
        )
        self.kind = kind
        self.version = self.list_call().metadata.resource_version
        self.added: list[str] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        from kubernetes import watch

        while not self.stopping.is_set():
            try:
                for event in watch.Watch().stream(self.list_call, resource_version=self.version, timeout_seconds=2):
                    obj = event["object"]
                    self.version = obj.metadata.resource_version or self.version
                    if event["type"] == "ADDED":
                        self.added.append(f"{self.kind}/{obj.metadata.namespace}/{obj.metadata.name}")
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
    added = sorted(a for w in watches for a in w.added)
    requirement(not added, "no Job or Pod appeared while the Slurm job lived", *added)
