"""TW: the customer's own workloads, one check per sbatch script of ``--slurmflox-workloads DIR``.

Requirement: each script, submitted unchanged as the unprivileged user from the login endpoint, ends with the
expected exit code (default 0), and, where its sidecar ``<script>.yaml`` says so, its output matches
``output_pattern``, it was allocated ``nodes`` nodes and it finished within ``time_bound`` seconds. The job output
is the evidence.

Where the expectations come from: the customer's sidecar (exit code, output pattern, nodes, time bound), else
the defaults above; the final job state follows from the expected exit code (COMPLETED for 0, FAILED otherwise).
The script is submitted byte for byte: the check adds a job name, partition, output path and the site's access
(``slurm.account``, ``qos``, ``reservation``, ``extra_args``) on the command line only where the script's own
``#SBATCH`` lines do not set them, so it never overrides what the customer wrote.

Without ``--slurmflox-workloads`` these checks do not exist at all (report.SuitePlugin removes them at collection):
a corpus nobody gave is not a skipped requirement, and TW is then not required for sign-off.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from pytest_slurmflox.base.run import quoted
from pytest_slurmflox.cluster.slurm import SlurmError
from pytest_slurmflox.judges.workloads import Workload, exit_status, job_nodes, load_corpus
from pytest_slurmflox.model.siteaccess import option_name

from ._capability import requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.TW]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "workload" not in metafunc.fixturenames:
        return
    from pytest_slurmflox.harness.options import get_option

    directory = get_option(metafunc.config, "slurmflox_workloads")
    corpus = load_corpus(Path(directory).expanduser()) if directory else []
    metafunc.parametrize("workload", corpus, ids=[w.id for w in corpus])


#: sbatch options the check would like to set, with every spelling a script can use for them.
_OWN_OPTIONS = {
    "job-name": ("--job-name", "-J"),
    "partition": ("--partition", "-p"),
    "output": ("--output", "-o"),
    "account": ("--account", "-A"),
    "qos": ("--qos", "-q"),
    "reservation": ("--reservation",),
}


def directive_words(script: str) -> list[str]:
    """The words of the script's own ``#SBATCH`` lines (directives end at the first command)."""
    words: list[str] = []
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        words += stripped[len("#SBATCH") :].split()
    return words


def _sets(words: list[str], spelling: str) -> bool:
    short = len(spelling) == 2  # -J, -A, -q: the value may follow without a space
    return any(w == spelling or w.startswith(spelling + "=") or (short and w.startswith(spelling)) for w in words)


def script_sets(script: str) -> set[str]:
    """Which of :data:`_OWN_OPTIONS` the script's own ``#SBATCH`` lines set."""
    words = directive_words(script)
    return {key for key, spellings in _OWN_OPTIONS.items() if any(_sets(words, s) for s in spellings)}


def _submit_unchanged(workload: Workload, submit) -> tuple[str, str | None]:
    """sbatch the script as written; returns (job id, output path if the check chose it)."""
    script = workload.script
    own = script_sets(script)
    submit.login.run(f"mkdir -p {submit.outdir}").check()
    outdir = submit.login.run(f"echo {submit.outdir}").check().stdout.strip()
    options = []
    if "job-name" not in own:
        options.append(f"--job-name={submit.name}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', workload.id)[:40]}")
    if "partition" not in own:
        options.append(f"--partition={submit.partition}")
    site = submit.site
    options += [f"--{key}={value}" for key, value in site.job_fields().items() if key not in own]
    words = directive_words(script)
    options += [arg for arg in site.extra_args if not _sets(words, option_name(arg))]
    out = None
    if "output" not in own:
        out = f"{outdir}/%j.out"
        options.append(f"--output={out}")
    job = submit.slurm.sbatch(script, *options)
    submit.submitted.append(job)
    return job, out


def test_workload(workload: Workload, submit, slurm) -> None:
    started = time.monotonic()
    job, _ = _submit_unchanged(workload, submit)
    try:
        state = submit.wait(job, timeout=workload.wait_timeout)[job]
    except SlurmError as exc:
        requirement(False, f"{workload.id} finishes within {workload.wait_timeout:g}s", str(exc))
        return
    elapsed = time.monotonic() - started
    info = slurm.job_info(job)
    stdout_path = info.get("StdOut", "").replace("%j", job)
    got = submit.login.run(quoted("cat %s", stdout_path)) if stdout_path else None
    output = got.stdout if got is not None and got.ok else f"<no output at {stdout_path!r}>"
    rc, signal = exit_status(info.get("ExitCode", ""))
    shown = (f"job {job}: state {state.state}, ExitCode {info.get('ExitCode')}, nodes {info.get('NodeList')}", output)
    requirement(
        rc == workload.exit_code and signal == 0,
        f"{workload.id} exits with {workload.exit_code} (expected: {workload.expectations()})",
        *shown,
    )
    final = "COMPLETED" if workload.exit_code == 0 else "FAILED"
    requirement(state.state == final, f"{workload.id} ends {final} (it ended {state.state})", *shown)
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
