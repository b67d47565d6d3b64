"""TF: a worker whose runtime cannot be realized never becomes Slurm capacity.

Requirement: when the pinned environment cannot be realized, that worker never starts slurmd and never appears in
Slurm, while the rest of the cohort keeps working. On the local substrate a throwaway worker is started with an
environment that fails to realize; on Kubernetes this would roll a broken NodeSet and is left to the destructive
lifecycle group T11F.
"""

from __future__ import annotations

import time

import pytest

from ._support import require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.TF]

BROKEN = "local/broken:1"


def test_unrealizable_worker_never_registers(target, submit, run_id):
    require(target, "isolated-worker")
    name = "tfprobe"
    info = None
    try:
        try:
            info = target.pool.start_isolated_worker(name, BROKEN)
        except Exception as exc:  # realization failure surfaces here on the local substrate
            info = exc
        deadline = time.monotonic() + 8
        seen = []
        while time.monotonic() < deadline:
            res = target.login.run("sinfo -h -N -o %N")
            seen.append(res)
            requirement(name not in res.stdout.split(), f"{name} (runtime {BROKEN}) never appears in sinfo", res)
            time.sleep(1)
        ok = submit.srun("-N2 -n2 --ntasks-per-node=1", "hostname")
        requirement(
            ok.ok and len(set(ok.stdout.split())) == 2,
            "the rest of the cohort keeps working",
            ok,
            f"isolated worker outcome: {info!r}",
        )
    finally:
        target.pool.stop_isolated_worker(name)
