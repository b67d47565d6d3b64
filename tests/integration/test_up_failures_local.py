"""A failed ``up`` ends with one clear line and leaves nothing that ``--slurmflox-destroy`` cannot remove (issue 25).

A newcomer's first ``up`` once died after starting MariaDB, slurmdbd, slapd, slurmctld and slurmrestd, with a
40-line traceback; ``--slurmflox-destroy`` then said "no deployment is recorded" and left them running. Here a real
``pytest --slurmflox-up=local`` is made to fail after each stage in turn (tests/upfault.py wraps the stage from
outside: production code has no fault hook), with the substrate's own refusal or with any other exception, and
each time: exit status 4 (usage error), one ``up failed`` line naming the detail log and the destroy command, no
traceback; then ``--slurmflox-destroy`` succeeds and no process, network namespace, mount or cgroup of the cluster
is left on the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptance_helpers import clean_env, free_port

from pytest_slurmflox.substrates.local import cgroups
from pytest_slurmflox.substrates.local.cluster import cluster_prefix

pytestmark = pytest.mark.integration

L = "pytest_slurmflox.substrates.local"
#: (stage, how it fails): each after the stage did its work, in the order `up` reaches them.
STAGES = (
    (f"{L}.cluster:LocalCluster.ensure_image", "bug"),  # nothing started yet
    (f"{L}.cluster:LocalCluster.wait_db", "unavailable"),  # the db node runs
    (f"{L}.cluster:LocalCluster.wait_controller", "bug"),  # db and controller run
    (f"{L}.pool:LocalWorkerPool.converge_cohort", "bug"),  # workers started
    (f"{L}.forwarders:LoginForwarder.ensure", "unavailable"),  # login node and its forwarder
    (f"{L}.substrate:LocalSubstrate._wait_rest", "bug"),  # everything up, REST answered
    ("pytest_slurmflox.harness.deploy:reconcile", "bug"),  # the cluster is up; the cohort's reconcile fails
)


def _pytest(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)


def leftovers(workdir: Path) -> list[str]:
    """What of the cluster in ``workdir`` is still on the host."""
    left = []
    prefix = cluster_prefix(workdir)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            root = os.readlink(entry / "root")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if root.startswith(str(workdir)) or str(workdir) in cmdline:
            left.append(f"process {entry.name}: {cmdline.replace(chr(0), ' ')[:120]}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    left += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith(prefix)]
    left += [
        f"mount {line.split()[4]}"
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(workdir) in line or f"/{prefix}-" in line
    ]
    left += [f"cgroup {path}" for path in cgroups.leftovers(prefix)]
    return left


@pytest.mark.parametrize(("stage", "how"), STAGES, ids=[s.rsplit(":", 1)[1] for s, _ in STAGES])
def test_a_failed_up_says_one_line_and_destroy_removes_what_it_started(tmp_path, stage, how):
    if os.geteuid() != 0:
        pytest.fail("needs root: the local substrate creates namespaces and overlay mounts")
    workdir = tmp_path / "operator"
    common = (f"--slurmflox-workdir={workdir}", f"--slurmflox-login-ssh-port={free_port()}")
    env = {
        **clean_env(),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),  # upfault.py
        "SLURMFLOX_TEST_FAIL_AT": stage,
        "SLURMFLOX_TEST_FAIL_WITH": how,
    }
    try:
        up = _pytest(tmp_path, "-p", "upfault", "--slurmflox-up=local", *common, env=env)
        output = up.stdout + up.stderr
        assert up.returncode == 4, output[-4000:]
        assert "Traceback" not in output and "INTERNALERROR" not in output, output[-4000:]
        lines = [line for line in output.splitlines() if "up failed" in line]
        assert len(lines) == 1, output[-4000:]
        assert "injected failure after" in lines[0] and "up-error.log" in lines[0], lines[0]
        assert "--slurmflox-destroy" in lines[0], lines[0]
        assert (workdir / "up-error.log").is_file()
    finally:
        clean = {k: v for k, v in env.items() if not k.startswith("SLURMFLOX_TEST_")}
        destroy = _pytest(tmp_path, "--slurmflox-destroy", *common, env=clean)
    assert destroy.returncode == 0, (destroy.stdout + destroy.stderr)[-3000:]
    assert leftovers(workdir) == []
