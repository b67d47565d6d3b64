"""Integration: the runtime lifecycle on a real local substrate.

1. The destructive acceptance groups T11R, T11U, T11C and T11F run and pass (they restore the runtime afterwards).
2. Chaos: ``up`` is killed (SIGKILL, sent by this test to the process it started, as soon as ``up`` announces the
   step) at each maintenance-barrier step in turn, with a runtime change pending; a job is queued while the cluster
   is in that state; a bare rerun must then recover to a fully validated cohort with the partition UP, and the
   queued job must complete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from acceptance_helpers import clean_env, destroy, local_substrate, private_deployment, run_pytest

from pytest_slurmflox.cluster.lifecycle import STEPS

pytestmark = pytest.mark.integration


def _up(
    home: Path,
    common: tuple[str, ...],
    env: dict[str, str] | None = None,
    timeout: float = 900,
    kill_at: str | None = None,
):
    """Run ``pytest --slurmflox-up=local``; with ``kill_at``, SIGKILL it (by its PID) when it announces that
    maintenance-barrier step, the way a crash or an operator's kill -9 would interrupt it."""
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--slurmflox-up=local", "-m", "not acceptance"]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*argv, *common],
        cwd=home,
        env={**clean_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        if kill_at is not None and f"reconcile: step {kill_at} begins" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
        if time.monotonic() - t0 > timeout:
            os.kill(proc.pid, signal.SIGKILL)
            break
    rest, err = proc.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out) + rest, err)
    return done, time.monotonic() - t0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home, workdir, common = private_deployment(tmp_path_factory, "lifecycle")
    proc, took = _up(home, common)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"provisioned in {took:.1f}s")
    try:
        yield home, workdir, common
    finally:
        destroy(home, common)


def test_destructive_lifecycle_groups_pass(cluster):
    home, _, common = cluster
    run = run_pytest(home, "-m", "T11R or T11U or T11C or T11F", "-s", *common, timeout=1500)
    print(run.output[-5000:])
    assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]
    passed = run.outcomes("passed")
    for group in ("unchanged_revision", "incomplete_maintenance", "live_update", "cpu_revision", "failed_revision"):
        assert any(group in p for p in passed), (group, passed)


def _target(workdir: Path):
    from pytest_slurmflox.harness.connection import connect
    from pytest_slurmflox.model.target import load_target

    return connect(load_target(workdir / "target.yaml"))


def test_killed_at_every_barrier_step_a_bare_rerun_recovers(cluster):
    home, workdir, common = cluster
    table: list[tuple[str, str, str, str]] = []
    policy = "prepend"
    for step in STEPS:
        policy = "append" if policy == "prepend" else "prepend"
        killed, _ = _up(home, common, {"SLURMFLOX_WORKER_PATH_PRECEDENCE": policy}, kill_at=step)
        assert killed.returncode == -9, (step, killed.returncode, killed.stdout[-3000:])
        tgt = _target(workdir)
        try:
            job = tgt.slurm.sbatch(
                "#!/bin/bash\necho queued-ok\n",
                f"--job-name=sfx-chaos-{step}",
                f"--partition={tgt.spec.partition}",
                "--output=/dev/null",
            )
        finally:
            tgt.close()
        rerun, took = _up(home, common)
        path = next(
            (line.rsplit("(", 1)[-1].rstrip(")") for line in rerun.stdout.splitlines() if "up: cohort at" in line), "?"
        )
        assert rerun.returncode == 0, (step, rerun.stdout[-4000:], rerun.stderr[-2000:])
        tgt = _target(workdir)
        try:
            part = tgt.slurm.partition_state().state
            pool = local_substrate(workdir).pool()
            workers = pool.workers()
            desired = pool.desired_revision()
            state = tgt.slurm.wait([job], timeout=120)[job].state
        finally:
            tgt.close()
        spec_doc = yaml.safe_load((workdir / "target.yaml").read_text())
        assert part == "UP", (step, part)
        assert all(w.ready and w.revision == desired for w in workers), (step, workers)
        assert all(pool.profile_revision(w.name) == desired for w in workers), step
        assert spec_doc["expect"]["settings"]["WORKER_PATH_PRECEDENCE"] == policy, step
        assert state == "COMPLETED", (step, state)
        table.append((step, "killed", path, f"{took:.1f}s, queued job {state}"))
    print("\nstep              | interrupted | rerun path | rerun")
    for row in table:
        print(f"{row[0]:17} | {row[1]:11} | {row[2]:10} | {row[3]}")
