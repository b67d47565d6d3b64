"""Records a run's processes share (#29): computed by the first process that needs one, read by the others.

Real processes and a real lock: two processes started at once ask for the same record; exactly one computes it,
both get the same value; a computation that raises records nothing, so the next asker computes (and meets the cause
itself) instead of reading a verdict nobody reached."""

from __future__ import annotations

import multiprocessing
import time
import uuid

import pytest

from pytest_slurmflox.model.runrecord import RunRecords, forget, new_start, once_per_run, record_path


def _ask(run: RunRecords, queue) -> None:
    def compute() -> dict:
        time.sleep(0.3)  # long enough that the other process asks while this one holds the lock
        return {"nodes": ["worker1", "worker2"], "by": multiprocessing.current_process().name}

    queue.put(once_per_run(run, "cohort", compute))


def test_two_processes_one_computation_same_record():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    run = RunRecords(run_id, new_start())
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    procs = [context.Process(target=_ask, args=(run, queue), name=f"p{i}") for i in range(2)]
    try:
        for proc in procs:
            proc.start()
        answers = [queue.get(timeout=20) for _ in procs]
        for proc in procs:
            proc.join(timeout=20)
        values = [value for value, _ in answers]
        assert values[0] == values[1] and values[0]["nodes"] == ["worker1", "worker2"]
        assert sorted(here for _, here in answers) == [False, True]  # one computed, the other read
    finally:
        forget(run)
    assert not record_path(run, "cohort").parent.exists()  # forget removed the run's folder


def test_a_failed_computation_records_nothing():
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    run = RunRecords(run_id, new_start())

    def broken() -> dict:
        raise RuntimeError("login did not answer")

    try:
        with pytest.raises(RuntimeError, match="login did not answer"):
            once_per_run(run, "cohort", broken)
        assert not record_path(run, "cohort").exists()
        value, here = once_per_run(run, "cohort", lambda: {"failure": None})
        assert (value, here) == ({"failure": None}, True)
        assert once_per_run(run, "cohort", broken) == ({"failure": None}, False)  # read, never recomputed
    finally:
        forget(run)
