"""How large a cohort may be (issue 44): COMPUTE_REPLICAS goes to Slurm's node limit for every target, and the local
substrate refuses more than its own limit on this host (substrates/local/capacity.py) in one line, before anything
is recorded or started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_slurmflox.model.settings import SettingsError, resolve
from pytest_slurmflox.model.target import parse_target
from pytest_slurmflox.substrates.local.capacity import ADDRESS_PLAN_WORKERS, Capacity

GIB = 2**30
LOGIN = {"host": "127.0.0.1", "port": 22, "user": "u", "key": "/dev/null"}


@pytest.mark.parametrize("substrate", ["qemu", None])
@pytest.mark.parametrize("replicas", ["1000", "1024", "4096", "65536"])
def test_a_sites_cohort_is_accepted_for_qemu_and_kubernetes_targets(substrate, replicas):
    assert resolve(cli={"COMPUTE_REPLICAS": replicas}, substrate=substrate).settings.compute_replicas == int(replicas)


@pytest.mark.parametrize("replicas", ["0", "65537", "1e3", "-4"])
def test_beyond_slurms_node_limit_or_not_a_count_is_refused(replicas):
    with pytest.raises(SettingsError, match=r"COMPUTE_REPLICAS=.* is refused: must be .*between 1 and 65536"):
        resolve(cli={"COMPUTE_REPLICAS": replicas})


def test_an_existing_clusters_declared_cohort_of_4096_is_taken():
    spec = parse_target({"login": LOGIN, "expect": {"settings": {"COMPUTE_REPLICAS": "4096"}}})
    assert spec.expect.replicas == 4096


@pytest.mark.parametrize(
    ("cpus", "memory", "workers", "bound"),
    [
        (2, 24 * GIB, 64, "CPU: 32 per core x 2"),  # the measured host: 2 cores, 24 GiB
        (1, 24 * GIB, 32, "CPU: 32 per core x 1"),
        (4, 1 * GIB, 32, "memory: half of 1 GiB at 16 MiB per idle worker"),
        (16, 256 * GIB, ADDRESS_PLAN_WORKERS, "addresses: the fabric's plan ends at worker 190"),
    ],
)
def test_the_local_limit_is_the_smallest_of_cpu_memory_and_addresses(cpus, memory, workers, bound):
    capacity = Capacity.of(cpus, memory)
    assert capacity.workers == workers and capacity.why.startswith(bound), capacity


def test_the_local_limit_is_refused_in_one_line_naming_it():
    capacity = Capacity.of(2, 24 * GIB)
    capacity.refuse(64)
    with pytest.raises(SettingsError) as refused:
        capacity.refuse(65)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("COMPUTE_REPLICAS='65' is refused: the local substrate's limit")
    assert "is 64 workers (CPU: 32 per core x 2" in message and "memory allows 768, the address plan 190" in message


def test_this_host_states_a_limit():
    capacity = Capacity.of_host()
    assert 1 <= capacity.workers <= ADDRESS_PLAN_WORKERS and capacity.why


def test_up_beyond_the_local_limit_is_one_usage_error_and_changes_nothing(tmp_path: Path):
    """The operator's own command: one line naming the limit, exit 4, no work dir created."""
    too_many = Capacity.of_host().workers + 1
    workdir = tmp_path / "wd"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--slurmflox-up=local",
         f"--slurmflox-compute-replicas={too_many}", f"--slurmflox-workdir={workdir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "slurmflox:" in line]
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert len(lines) == 1 and f"COMPUTE_REPLICAS='{too_many}' is refused: the local substrate's limit" in lines[0]
    assert lines[0].endswith("(nothing was changed)") and not workdir.exists()
