"""Integration: busy is not broken (issue 38). On a live local cluster, another user's job (root's, submitted on the
controller node: ``sbatch --exclusive -w worker1``) holds worker1 while T3 and T5 run.

- Held for 10 minutes, with ``slurm.busy_timeout: 30`` in the target file: nothing FAILs; every check is NOT RUN
  naming worker1 and the job that holds it (id, user, expected end), idle worker2 is not named, and the sign-off is
  NOT SIGNED OFF for that reason, well before the job would end.
- Held for 60 s with the default budget: a ``-q -n 2`` run waits for worker1, says so on its terminal naming
  worker1 and the job while the job still runs, and every check it ran PASSes.

A worker that is really broken still FAILs fast whoever else runs jobs: the drained worker
(test_acceptance_local.py ``test_drained_worker_fails_the_preflight_fast_and_blocks_the_run``) and the stopped
slurmd (test_cohort_mutations_local.py ``test_a_stopped_slurmd_ends_the_run_within_60s_naming_the_worker``) keep
their 60 s bound; here, worker2's slurmd stopped while worker1 is held FAILs naming worker2 as soon as Slurm marks
it not responding (the wait looks at the nodes between slices), not after the budget.

The cluster is this module's own (private work dir and port); it is brought up without running any check.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from acceptance_helpers import Run, deployed, node_sh, run_pytest

pytestmark = pytest.mark.integration

GROUPS = ("-m", "T3 or T5")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    with deployed(tmp_path_factory, "busy") as recorded:
        yield recorded


@contextmanager
def held(workdir: Path, seconds: int) -> Iterator[str]:
    """Another user's (root's) whole-node job on worker1 for ``seconds``, running when this yields its id;
    cancelled afterwards whatever happened."""
    out = node_sh(
        workdir,
        "ctl",
        f"cd /tmp && sbatch --parsable --exclusive -w worker1 -o /dev/null -J site-hold --wrap 'sleep {seconds}'",
    )
    job = out.strip().split(";")[0]
    try:
        for _ in range(100):
            if node_sh(workdir, "ctl", f"squeue -h -j {job} -o %T").strip() == "RUNNING":
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"job {job} never ran on worker1")
        yield job
    finally:
        node_sh(workdir, "ctl", f"scancel {job} 2>/dev/null; true")


def run_verify(home: Path, folder: str, allowed: Path) -> Run:
    """``pytest --slurmflox-verify=FOLDER --slurmflox-allowed-signers=FILE``, as a reader of the report runs it."""
    argv = [sys.executable, "-m", "pytest", f"--slurmflox-verify={folder}", f"--slurmflox-allowed-signers={allowed}"]
    proc = subprocess.run(argv, cwd=home, capture_output=True, text=True, timeout=120, check=False)
    return Run(proc.returncode, proc.stdout + proc.stderr, {})


def _with_budget(workdir: Path, home: Path, seconds: int) -> Path:
    """The deployment's target file with ``slurm.busy_timeout`` declared, as a customer would write it."""
    doc = yaml.safe_load((workdir / "target.yaml").read_text())
    doc["slurm"]["busy_timeout"] = seconds
    path = home / f"target-busy-{seconds}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_worker_held_past_the_budget_is_not_run_naming_the_worker_and_the_job(deployment):
    home, workdir, common, _ = deployment
    target = _with_budget(workdir, home, 30)
    with held(workdir, 600) as job:
        began = time.monotonic()
        run = run_pytest(home, *GROUPS, "--slurmflox-signoff", f"--slurmflox-target={target}", *common, timeout=600)
        took = time.monotonic() - began
    print(f"held past the budget: exit {run.rc} in {took:.1f} s")
    print(run.output[-4000:])
    assert run.outcomes("failure") == [] and run.outcomes("error") == [] and run.outcomes("passed") == [], run.output
    skipped = run.outcomes("skipped")
    assert any(s.startswith("test_t05_interactive::") for s in skipped), run.output[-3000:]
    holder = f"worker1 (state allocated) is held by job {job} of user root (site-hold, no expected end"
    for name in skipped:
        message = run.cases[name][1]
        assert "not run: busy past the budget: " in message and holder in message, (name, message)
        assert "budget of 30 s" in message and "worker2 (state" not in message, message
    verdict = re.search(r"^verdict for run \S+: (.*)$", run.output, re.M)
    assert verdict and verdict.group(1).startswith("NOT SIGNED OFF"), run.output[-3000:]
    # the holder is the verdict's reason: once for the run when every check was NOT RUN for it, else per group
    said = rf"(every check is NOT RUN|required group T5 is NOT RUN): .*{re.escape(holder)}"
    assert re.search(said, run.output), run.output[-3000:]
    assert run.rc != 0 and took < 300, (run.rc, took)


def test_a_worker_held_for_60s_is_waited_for_saying_so_and_every_check_passes(deployment):
    """A ``-q -n 2`` run waits for worker1, and while the holding job still runs, a line on the run's terminal names
    worker1 and the job (an xdist worker's wait, said by the controller). The run is signed with a key of the
    test's own, and its folder verifies."""
    home, workdir, common, _ = deployment
    said: list[tuple[float, str, str]] = []  # (when, the line, the holding job's state when it was first said)
    key = home / "signer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "qa@site", "-f", str(key)], check=True)

    def watch(line: str) -> None:
        if "waiting" in line and "worker1" in line and f"job {job} " in line:
            state = "" if said else node_sh(workdir, "ctl", f"squeue -h -t all -j {job} -o %T 2>/dev/null; true")
            said.append((time.monotonic(), line.strip(), state.strip()))

    with held(workdir, 60) as job:
        began = time.monotonic()
        run = run_pytest(home, "-q", "-n", "2", *GROUPS, *common, f"--slurmflox-sign={key}", timeout=900, on_line=watch)
        took = time.monotonic() - began
        still = node_sh(workdir, "ctl", f"squeue -h -t all -j {job} -o %T 2>/dev/null; true").strip()
    print(f"held for 60 s: exit {run.rc} in {took:.1f} s; said at {[round(w - began, 1) for w, _, _ in said]} s")
    print("\n".join(line for _, line, _ in said))
    print(run.output[-3000:])
    assert still != "RUNNING", f"the holding job {job} is still {still}: the run did not wait for it"
    assert said and said[0][2] == "RUNNING", (said, run.output[-3000:])  # said before the hold ended
    assert "(state allocated)" in said[0][1] and re.search(r"\d\d:\d\d:\d\dZ gw\d: waiting", said[0][1]), said
    folder = re.search(
        r"^slurmflox: signed with ED25519 key \S+ \(qa@site\): (\S+)manifest.json.sig$", run.output, re.M
    )
    assert folder, run.output[-3000:]
    allowed = home / "allowed_signers"
    allowed.write_text(f"qa@site {key.with_suffix('.pub').read_text()}")
    verified = run_verify(home, folder.group(1), allowed)
    assert verified.rc == 0 and "signed by qa@site (key SHA256:" in verified.output, verified.output
    assert run.outcomes("failure") == [] and run.outcomes("error") == [] and run.outcomes("skipped") == [], run.output
    assert run.in_module("test_t05_interactive") and run.in_module("test_t03_task_profile"), run.output[-3000:]
    assert run.rc == 0, run.output[-3000:]


def test_a_stopped_slurmd_is_broken_not_busy_while_another_worker_is_held(deployment):
    """worker1 held for 10 minutes (default budget: the run would wait for it) and worker2's slurmd stopped
    (SIGSTOP: it holds its port and answers nothing): Slurm marks worker2 not responding while the pre-flight waits,
    and the run FAILs naming worker2 by its state soon after, instead of waiting the budget for worker1."""
    home, workdir, common, _ = deployment
    node_sh(workdir, "worker2", "kill -STOP $(cat /run/slurmd.pid)")
    try:
        with held(workdir, 600):
            began = time.monotonic()
            run = run_pytest(home, "-m", "T5", *common, timeout=900)
            took = time.monotonic() - began
    finally:
        node_sh(workdir, "worker2", "kill -CONT $(cat /run/slurmd.pid)")
    print(f"held worker1, stopped worker2: exit {run.rc} in {took:.1f} s")
    blocked = run.outcomes("error") + run.outcomes("failure")
    assert blocked and run.outcomes("passed") == [] and run.outcomes("skipped") == [], run.output[-4000:]
    for name in blocked:
        said = re.findall(r"requirement not met: [^\n]*", run.cases[name][1])
        assert said and "worker2 is in partition all but not serving" in said[0], (name, run.cases[name][1][-2000:])
        assert "worker1" not in said[0], said
    # Slurm marks it after SlurmdTimeout (30 s here); the slack is a loaded host's, far below the 600 s budget
    slurmd_timeout = int(node_sh(workdir, "ctl", "scontrol show config | sed -n 's/^SlurmdTimeout *= *//p'").split()[0])
    assert took < slurmd_timeout + 120, (took, slurmd_timeout)
