"""Integration: nothing left behind on a cluster (issue 17).

- SIGTERM to a pytest run in the middle of a check leaves no job of that run in the queue (seen by root on the
  controller, so nothing the user's view hides);
- a run id given again after a SIGKILLed run judges only what it observed itself (#40);
- a job Slurm says can never run (a request beyond every node) fails at once with Slurm's reason instead of
  waiting out its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from acceptance_helpers import clean_env, cluster_of, deployed, run_pytest

from pytest_slurmflox.model.runrecord import RunRecords, new_start

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "cleanup", "-m", "T5") as (home, workdir, common, first):
        assert first.outcomes("passed"), first.output[-4000:]
        yield home, workdir, common


def _run_jobs(workdir, run_id: str) -> list[str]:
    res = cluster_of(workdir).node_runner("ctl").run("squeue -h -a -o '%i|%j|%T'")
    assert res.ok, res.describe()
    return [line for line in res.stdout.splitlines() if f"|sfx-{run_id}-" in line]


def test_sigterm_mid_run_leaves_no_job_of_the_run(deployment):
    home, workdir, common = deployment
    run_id = f"sigterm{os.getpid()}"
    # T8's leftover checks hold a job for several seconds: the run is mid-check when the signal comes.
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "pytest_slurmflox.suites", "-p", "no:randomly", "-m", "T8"]
    proc = subprocess.Popen([*cmd, f"--slurmflox-run-id={run_id}", *common], cwd=home, env=clean_env())
    try:
        deadline = time.monotonic() + 180
        while not _run_jobs(workdir, run_id):
            assert proc.poll() is None and time.monotonic() < deadline, "no job of the run ever reached the queue"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    left = _run_jobs(workdir, run_id)
    while any(not line.endswith(("|CANCELLED", "|COMPLETED", "|FAILED")) for line in left):
        assert time.monotonic() < deadline, f"jobs of run {run_id} still in the queue after SIGTERM: {left}"
        time.sleep(1)
        left = _run_jobs(workdir, run_id)
    # nor the records its processes shared on this host (pytest_slurmflox/model/runrecord.py)
    records = RunRecords(run_id, new_start()).run_folder  # every start's records of the run id
    assert not records.exists(), sorted(str(p.relative_to(records)) for p in records.rglob("*"))


def test_a_job_that_can_never_run_fails_at_once_with_slurms_reason(deployment):
    from pytest_slurmflox.base.run import CommandFailed
    from pytest_slurmflox.cluster.slurm import NeverRuns, SlurmClient
    from pytest_slurmflox.cluster.submit import Jobs

    _, workdir, _ = deployment
    cluster = cluster_of(workdir)
    settings = cluster.settings
    login = cluster.node_runner("login", settings.test_user)
    jobs = Jobs(login=login, slurm=SlurmClient(user=login), run_id=f"never{os.getpid()}", label="beyond-every-node")
    t0 = time.monotonic()
    try:
        job = jobs.sbatch("#!/bin/bash\ntrue\n", f"-c{settings.worker_cpus * 100}")
        with pytest.raises(NeverRuns) as caught:
            jobs.wait(job, timeout=180)
        message = str(caught.value)
    except CommandFailed as refused:  # sbatch itself refusing is failing at once, with Slurm's words too
        message = str(refused)
    finally:
        jobs.cleanup()
    took = time.monotonic() - t0
    print(f"failed after {took:.1f}s: {message}")
    assert took < 10, (took, message)
    assert "PartitionConfig" in message or "Requested node configuration is not available" in message, message


def test_run_files_are_removed_unless_kept(deployment):
    home, workdir, common = deployment
    runs = workdir / "local" / "home" / cluster_of(workdir).settings.test_user / "slurmflox-runs"
    removed = run_pytest(home, "-m", "T5", "--slurmflox-run-id=sfxgone", *common)
    assert removed.outcomes("passed") and not removed.outcomes("failure"), removed.output[-3000:]
    assert not (runs / "sfxgone").exists(), sorted(p.name for p in runs.iterdir())
    kept = run_pytest(home, "-m", "T5", "--slurmflox-run-id=sfxkept", "--slurmflox-keep", *common)
    assert kept.outcomes("passed") and not kept.outcomes("failure"), kept.output[-3000:]
    assert any((runs / "sfxkept").iterdir()), "the kept run's job output is still in the user's home"


def test_a_customer_target_without_worker_cpus_gives_t8_not_run_naming_the_key(deployment):
    """Issue 17, declared expectations only: the local cluster described as a customer's (substrate existing),
    its target file declaring the memory but not the CPUs."""
    import yaml

    home, workdir, common = deployment
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["substrate"] = "existing"
    doc.pop("deployment", None)
    doc.pop("workdir", None)
    settings = (doc.get("expect") or {}).get("settings") or {}
    mem = settings.get("WORKER_MEM_MB", "2048")
    doc["expect"] = {"settings": {"WORKER_MEM_MB": mem}}
    customer = home / "customer.yaml"
    customer.write_text(yaml.safe_dump(doc))
    run = run_pytest(home, f"--slurmflox-target={customer}", "-m", "T8", "-k", "declared or refused", *common)
    cpus = {n: c for n, c in run.cases.items() if "declared_cpu" in n or "cpus" in n or "advertised" in n}
    assert cpus, run.output[-3000:]
    for name, (outcome, message) in cpus.items():
        assert outcome == "skipped" and "not run:" in message and "WORKER_CPUS" in message, (name, message)
    assert "NOT RUN" in run.output and "T8" in run.output, run.output[-3000:]


def _customer_target(home, workdir, name: str, **sections) -> str:
    """The local deployment's target file rewritten as a customer's (substrate existing, no deployment), its
    ``expect``, ``identity`` and ``slurm`` sections replaced by ``sections`` (None: left out)."""
    import yaml

    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc.update(substrate="existing", name=name)
    for key in ("deployment", "workdir", "expect", "identity", "slurm"):
        doc.pop(key, None)
    doc.update({key: value for key, value in sections.items() if value is not None})
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return f"--slurmflox-target={path}"


def _group_verdict(output: str, group: str) -> str:
    import re

    found = re.search(rf"^\*?{group}\s+(PASS|FAIL|SKIP|NOT RUN)\b", output, re.MULTILINE)
    return found.group(1) if found else "?"


def test_a_customer_target_that_declares_nothing_gets_not_run_never_a_default(deployment):
    """Issue 17, every group: a customer target naming its partition but no expectation. The checks that compare
    with a declared value are NOT RUN naming the key (none PASSes against a reference default), the run starts with
    the one message listing the missing keys per group; and without the partition the cohort pre-flight makes every
    check NOT RUN naming slurm.partition."""
    from pytest_slurmflox.model.declared import HOME, IDENTITY, REVISION_INPUTS

    home, workdir, common = deployment
    bare = _customer_target(home, workdir, "bare", slurm={"partition": "all"})
    run = run_pytest(home, bare, "-m", "T2 or T3 or T9 or T11 or TI", *common)
    assert "does not declare what these groups compare with" in run.output, run.output[-3000:]
    for group in ("T2", "T3", "T9", "T11", "TI"):
        assert _group_verdict(run.output, group) == "NOT RUN", (group, run.output[-3000:])
    not_run = {name: message for name, (outcome, message) in run.cases.items() if "not run:" in message}
    named = {
        "test_every_worker_has_the_pinned_generations_content": "expect.settings.WORKER_FLOX_ENV",
        "test_profile_matches_the_declared_deployment": REVISION_INPUTS[0],
        "test_write_on_one_worker_read_on_another_and_at_login": HOME,
        "test_declared_revision_is_the_one_the_settings_compute": "expect.revision",
        "test_every_task_profile_reports_the_expected_revision": REVISION_INPUTS[0],
        "test_task_identity_matches_the_login_identity": IDENTITY[0],
        "test_shared_home_files_owned_correctly": HOME,
    }
    for check, key in named.items():
        message = next((m for n, m in not_run.items() if n.endswith("::" + check)), None)
        assert message is not None and key in message, (check, key, sorted(run.cases))
    unpartitioned = _customer_target(home, workdir, "nopartition", slurm={"version": "any"})
    run = run_pytest(home, unpartitioned, "-m", "T5", *common)
    assert run.cases and all(
        outcome == "skipped" and "not run:" in message and "slurm.partition" in message
        for outcome, message in run.cases.values()
    ), run.cases
    assert _group_verdict(run.output, "T5") == "NOT RUN", run.output[-3000:]


def test_the_same_run_id_after_sigkill_judges_only_its_own_observations(deployment):
    """#40 item 4 on a real cluster: a T3 run SIGKILLed (controller and xdist workers: no session end) once its
    processes recorded the cohort verdict and the task-profile observation, then the same run id again. The second
    run observes for itself: every command in its evidence started after it did, and no record is left."""
    home, _, common = deployment
    run_id = f"sigkill{os.getpid()}"
    folder = RunRecords(run_id, new_start()).run_folder
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "pytest_slurmflox.suites", "-p", "no:randomly", "-m", "T3"]
    proc = subprocess.Popen(
        [*cmd, f"--slurmflox-run-id={run_id}", *common], cwd=home, env=clean_env(), start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not list(folder.glob("*/task-profiles.job")):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never recorded its observation"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert {p.name for p in folder.glob("*/*.job")} >= {"cohort.job", "task-profiles.job"}  # left behind
    began = time.time()
    again = run_pytest(home, "-m", "T3", f"--slurmflox-run-id={run_id}", *common, timeout=600)
    assert again.outcomes("passed") and not again.outcomes("failure") + again.outcomes("error"), again.output[-3000:]
    evidence = json.loads((home / "reports" / run_id / "evidence.json").read_text())
    started = [e["started"] for check in evidence["checks"] for e in check["evidence"] if "started" in e]
    assert started and min(started) >= began - 1, (began, sorted(started)[:3])  # nothing the killed run observed
    assert not folder.exists(), sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
