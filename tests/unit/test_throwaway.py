"""TF's throwaway workers started with the run (pytest_slurmflox/harness/throwaway.py): which checks declare one, and
when the
run's last process may release one nobody claimed. The starts and claims on a real pool are in
tests/integration/test_local_cluster.py."""

from __future__ import annotations

import uuid

import pytest

from pytest_slurmflox.harness.early import EarlyJob
from pytest_slurmflox.harness.throwaway import EarlyWorker, early_workers, join, leave
from pytest_slurmflox.model.runrecord import RunRecords, forget, new_start

BROKEN = EarlyWorker("tfprobe", "local/broken:1")
HOOK = EarlyWorker("tfhook", "local/failhook:1")


class Item:
    """A collected check as far as :func:`early_workers` reads it: its closest ``early`` marker."""

    def __init__(self, *args: object) -> None:
        self.mark = pytest.mark.early(*args).mark if args else None

    def get_closest_marker(self, name: str):
        return self.mark if name == "early" else None


def test_the_declared_workers_once_each_in_order_and_no_early_job():
    items = [Item(BROKEN), Item(), Item(EarlyJob("T7-array", "#!/bin/bash\n")), Item(HOOK), Item(BROKEN)]
    assert early_workers(items) == [BROKEN, HOOK]


def test_only_the_runs_last_process_to_leave_releases():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    run = RunRecords(run_id, new_start())
    try:
        join(run)  # the first xdist process
        join(run)  # its sibling
        assert leave(run) is False  # the sibling may still claim a worker
        assert leave(run) is True
    finally:
        forget(run)
