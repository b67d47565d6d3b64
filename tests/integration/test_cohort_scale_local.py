"""A cohort grows from 3 to 32 workers and back in seconds, and a removed worker leaves nothing (issue 29).

Sites run hundreds of workers: the operator's own command, ``pytest --slurmflox-up=local`` with ``COMPUTE_REPLICAS``
changed, must converge the cohort quickly both ways, and shrinking must not leave what a removed worker had: its
process tree, network namespace, cgroups, Nix profile (the generation it pinned) or its Slurm node record. Each
size is judged from outside the cluster: Slurm's own node list through the login node, the host's namespaces,
cgroups and profile links; the expected set of workers is computed here from the size asked for.

An idle worker's host memory is measured too (its cgroup's resident and shared-memory pages, what the host cannot
reclaim), and must stay within 16 MiB so that 64 workers fit beside the checks on a 2-core, 24 GiB machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from acceptance_helpers import clean_env, cluster_of, destroy, local_substrate, private_deployment

from pytest_slurmflox.substrates.local import cgroups
from pytest_slurmflox.substrates.local.cluster import cluster_prefix

pytestmark = pytest.mark.integration

#: The issue's bound for a resize as a whole command, on an idle machine.
CONVERGE_SECONDS = float(os.environ.get("SLURMFLOX_SCALE_CONVERGE_SECONDS", "30"))


def converge_bound() -> float:
    """The bound, scaled by how much other work shares the CPUs right now (CI runs two test files at once on 2
    cores): a resize is CPU-bound (32 node boots), so at a load average L on C cores it gets L/C times as long.
    On an idle machine this is the issue's 30 s, unchanged."""
    return CONVERGE_SECONDS * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


#: What an idle worker may cost the host (resident + shared memory of its cgroup).
IDLE_WORKER_BYTES = 16 * 1024 * 1024
BIG = 32


def workers(n: int) -> list[str]:
    return [f"worker{i}" for i in range(1, n + 1)]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home, workdir, common = private_deployment(tmp_path_factory, "scale")
    try:
        yield home, workdir, common
    finally:
        destroy(home, common)


def up(deployment, replicas: int) -> float:
    """``pytest --slurmflox-up=local`` with ``SLURMFLOX_COMPUTE_REPLICAS=replicas``, as an operator runs it; its
    wall time."""
    home, _, common = deployment
    env = {**clean_env(), "SLURMFLOX_COMPUTE_REPLICAS": str(replicas)}
    # the test extra's hypothesis plugin imports hypothesis at the summary (seconds): no operator's install has it
    no_dev = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:randomly")
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *no_dev, "--slurmflox-up=local", *common],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    seconds = time.monotonic() - t0
    said = [line for line in proc.stdout.splitlines() if "cluster up:" in line]
    print(f"[up COMPUTE_REPLICAS={replicas}] exit {proc.returncode} in {seconds:.1f}s, load {os.getloadavg()[0]:.1f}")
    print("\n".join(said))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return seconds


def slurm_workers(workdir: Path) -> dict[str, str]:
    """Slurm's node records as the controller lists them: worker -> state."""
    result = cluster_of(workdir).node_runner("login").run("sinfo -h -N -o", "%N %T")
    assert result.ok, result.describe()
    rows = (line.split() for line in result.stdout.splitlines() if line.strip())
    return {name: state for name, state in rows if name.startswith("worker")}


def remains_of(workdir: Path, name: str) -> list[str]:
    """What of worker ``name`` is still on the host."""
    sub, cluster = local_substrate(workdir), cluster_of(workdir)
    prefix = cluster_prefix(workdir)
    left = []
    if cluster.node(name).dir.exists():
        left.append(f"node dir {cluster.node(name).dir}")
    if cluster.fabric.node_ns(name) in cluster.fabric.ours():
        left.append(f"netns {cluster.fabric.node_ns(name)}")
    left += [f"cgroup {base / name}" for base in cgroups.leftovers(prefix) if (base / name).exists()]
    left += [f"nix profile {p}" for p in sub.pool().nix_store().profile_links(name)]
    return left


def idle_bytes(workdir: Path, name: str) -> int:
    """Resident + shared memory pages charged to worker ``name``'s memory cgroup (v1 ``memory.stat``)."""
    prefix = cluster_prefix(workdir)
    paths = [base / name for base in cgroups.leftovers(prefix, roots=(cgroups.MOUNT / "memory",))]
    paths = [path for path in paths if (path / "memory.stat").exists()]
    if not paths:
        pytest.fail("no memory cgroup of the worker: this host's memory controller is not usable, nothing to measure")
    stat = dict(line.split() for line in (paths[0] / "memory.stat").read_text().splitlines())
    return int(stat["total_rss"]) + int(stat["total_shmem"])


def test_a_cohort_grows_to_32_workers_quickly_and_every_one_serves(deployment):
    _, workdir, _ = deployment
    up(deployment, 3)
    assert sorted(slurm_workers(workdir)) == sorted(workers(3))
    seconds = up(deployment, BIG)
    states = slurm_workers(workdir)
    assert sorted(states) == sorted(workers(BIG)), states
    assert {s for s in states.values()} == {"idle"}, states
    assert seconds < converge_bound(), f"3 -> {BIG} workers took {seconds:.1f}s (bound {converge_bound():.0f}s)"


def test_an_idle_worker_costs_at_most_16_mib(deployment):
    _, workdir, _ = deployment
    time.sleep(5)  # let the last worker's start-up settle
    costs = {name: idle_bytes(workdir, name) for name in workers(BIG)}
    mib = {name: round(b / 2**20, 1) for name, b in costs.items()}
    print(f"[idle memory per worker, MiB] max {max(mib.values())} median {sorted(mib.values())[BIG // 2]}: {mib}")
    assert max(costs.values()) <= IDLE_WORKER_BYTES, mib


def test_the_cohort_shrinks_back_and_the_removed_workers_leave_nothing(deployment):
    _, workdir, _ = deployment
    seconds = up(deployment, 3)
    assert sorted(slurm_workers(workdir)) == sorted(workers(3))
    left = {name: remains_of(workdir, name) for name in workers(BIG)[3:]}
    assert {name: what for name, what in left.items() if what} == {}
    assert all(cluster_of(workdir).node(name).running() for name in workers(3))
    assert seconds < converge_bound(), f"{BIG} -> 3 workers took {seconds:.1f}s (bound {converge_bound():.0f}s)"
