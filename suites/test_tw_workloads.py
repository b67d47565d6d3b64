"""TW: the customer's own workloads, one check per sbatch script of ``--slurmflox-workloads DIR``.

Requirement: each script, submitted unchanged as the unprivileged user from the login endpoint, ends with the
expected exit code (default 0), and, where its sidecar ``<script>.yaml`` says so, its output matches
``output_pattern``, it was allocated ``nodes`` nodes and it finished within ``time_bound`` seconds. The job output
is the evidence.

Without ``--slurmflox-workloads`` these checks do not exist at all (report.SuitePlugin removes them at collection):
a corpus nobody gave is not a skipped requirement, and TW is then not required for sign-off.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from pytest_slurmflox.slurm import SlurmError
from pytest_slurmflox.workloads import Workload, exit_status, job_nodes, load_corpus

from ._support import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.TW]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "workload" not in metafunc.fixturenames:
        return
    from pytest_slurmflox.options import get_option

    directory = get_option(metafunc.config, "slurmflox_workloads")
    corpus = load_corpus(Path(directory).expanduser()) if directory else []
    metafunc.parametrize("workload", corpus, ids=[w.id for w in corpus])


def test_workload(workload: Workload, submit, slurm) -> None:
    started = time.monotonic()
    job = submit.sbatch(workload.script, suffix=re.sub(r"[^A-Za-z0-9_.-]+", "-", workload.id)[:40])
    try:
        state = submit.wait(job, timeout=workload.wait_timeout)[job]
    except SlurmError as exc:
        requirement(False, f"{workload.id} finishes within {workload.wait_timeout:g}s", str(exc))
        return
    elapsed = time.monotonic() - started
    info = slurm.job_info(job)
    output = submit.output(job)
    rc, signal = exit_status(info.get("ExitCode", ""))
    shown = (f"job {job}: state {state.state}, ExitCode {info.get('ExitCode')}, nodes {info.get('NodeList')}", output)
    requirement(
        rc == workload.exit_code and signal == 0,
        f"{workload.id} exits with {workload.exit_code} (expected: {workload.expectations()})",
        *shown,
    )
    if workload.output_pattern is not None:
        requirement(
            re.search(workload.output_pattern, output, re.M) is not None,
            f"{workload.id} output matches /{workload.output_pattern}/",
            *shown,
        )
    if workload.nodes is not None:
        requirement(
            job_nodes(info.get("NumNodes", "")) == workload.nodes,
            f"{workload.id} ran on {workload.nodes} node(s)",
            *shown,
        )
    if workload.time_bound is not None:
        requirement(
            elapsed <= workload.time_bound,
            f"{workload.id} finished within {workload.time_bound:g}s of submission (took {elapsed:.1f}s)",
            *shown,
        )
