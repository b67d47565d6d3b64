"""Integration: the built wheel, installed into a fresh venv (dependencies from PyPI), runs the acceptance suites
from outside any checkout against the local substrate's target file, exactly as a customer would:
``pytest --pyargs pytest_slurmflox.suites --slurmflox-target=FILE``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_slurmflox.reporting.artifacts import ReportPaths
from pytest_slurmflox.reporting.validation import validate_evidence, validate_junit

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    """The environment minus anything that could make the checkout importable."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    from release import build_dist, built_wheel

    base = tmp_path_factory.mktemp("wheel-install")
    wheel = built_wheel(build_dist(base))  # dist/pytest_slurmflox-<version>-py3-none-any.whl, as a release has it
    assert wheel.is_file() and wheel.parent.name == "dist", wheel
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=300)
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(env_dir / "bin" / "pip"), "install", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=1500,
        env=_clean_env(),
        check=False,
    )
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    print(f"venv install took {time.monotonic() - t0:.1f}s")
    return env_dir


def test_installed_package_is_the_wheel_not_the_checkout(venv, tmp_path):
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import pytest_slurmflox.suites as s; print(s.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=True,
    )
    location = Path(proc.stdout.strip())
    assert venv in location.parents and REPO not in location.parents
    from release import project_version

    # pip's record of where it came from (PEP 610): the wheel file in dist/, at the version pyproject.toml writes
    show = (
        "import importlib.metadata as m; d = m.distribution('pytest-slurmflox'); "
        "print(d.version); print(d.read_text('direct_url.json'))"
    )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", show],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=True,
    )
    version, origin = proc.stdout.split("\n", 1)
    assert version == project_version(), proc.stdout
    assert json.loads(origin)["url"].endswith(f"/dist/pytest_slurmflox-{version}-py3-none-any.whl"), origin


def test_wheel_runs_the_suites_against_a_target_file_outside_the_checkout(venv, tmp_path_factory):
    from test_report_local import local_cluster

    cwd = tmp_path_factory.mktemp("customer")
    assert REPO not in cwd.parents
    with local_cluster(tmp_path_factory.mktemp("wheel-local")) as cluster:
        target = cwd / "site.yaml"  # the customer's own copy of the target file
        target.write_text(cluster["target"].read_text())
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                str(venv / "bin" / "pytest"),
                "--pyargs",
                "pytest_slurmflox.suites",
                f"--slurmflox-target={target}",
                "--slurmflox-run-id=wheel",
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=1800,
            env=_clean_env(),
            check=False,
        )
        print(proc.stdout[-6000:], proc.stderr[-3000:], f"took {time.monotonic() - t0:.1f}s", sep="\n")
        site = _site_example_healthy_and_broken(venv, cwd, target, cluster["workdir"])
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # ran to the end (1: some check failed)
    assert f"slurmflox: target {target}" in proc.stdout
    from release import project_version

    # the plugin came in through the wheel's pytest11 entry point, at the version pyproject.toml writes
    assert f"slurmflox-{project_version()}" in proc.stdout
    paths = ReportPaths(cwd / "reports" / "wheel")  # default reports dir, relative to where pytest ran
    assert validate_evidence(paths.evidence) == [] and validate_junit(paths.junit) == [] and paths.html.is_file()
    doc = json.loads(paths.evidence.read_text())
    verdicts = [c["verdict"] for c in doc["checks"]]
    assert verdicts.count("PASS") >= 10, verdicts  # real checks ran and passed against the cluster
    assert {c["group"] for c in doc["checks"]} >= {"T3", "T5", "TI"}
    healthy, broken = site
    assert healthy == {PACKAGES: ("PASS", ""), LOGIN_COMMANDS: ("PASS", "")}, healthy
    verdict, message = broken[PACKAGES]
    assert verdict == "FAIL" and "worker2: bash is not installed" in message, broken
    named = {w for w in ("worker1", "worker2") if f"{w}: bash is not installed" in message}
    assert named == {"worker2"} and broken[LOGIN_COMMANDS][0] == "PASS", broken


PACKAGES = "test_every_worker_has_the_sites_packages"
LOGIN_COMMANDS = "test_the_login_endpoint_has_the_users_commands"
#: worker2's package database without bash (a bind mount over dpkg's status in that node only), and back.
NO_BASH = (
    "sed '/^Package: bash$/,/^$/d' /var/lib/dpkg/status > /run/.sfx-dpkg-status && "
    "mount --bind /run/.sfx-dpkg-status /var/lib/dpkg/status"
)
BASH_BACK = "umount /var/lib/dpkg/status && rm -f /run/.sfx-dpkg-status"


def _site_example_healthy_and_broken(venv: Path, cwd: Path, target: Path, workdir: Path) -> tuple[dict, dict]:
    """The shipped site example from the wheel (``--pyargs pytest_slurmflox.examples``) on the healthy cluster,
    then with bash gone from worker2's package database: each run's site checks as name -> (verdict, message)."""
    from acceptance_helpers import node_sh

    def run(run_id: str) -> dict:
        argv = [str(venv / "bin" / "pytest"), "--pyargs", "pytest_slurmflox.examples", f"--slurmflox-target={target}"]
        t0 = time.monotonic()
        proc = subprocess.run([*argv, f"--slurmflox-run-id={run_id}"], cwd=cwd, capture_output=True, text=True,
                              timeout=600, env=_clean_env(), check=False)  # fmt: skip
        print(proc.stdout[-2500:], f"site example {run_id}: took {time.monotonic() - t0:.1f}s", sep="\n")
        doc = json.loads(ReportPaths(cwd / "reports" / run_id).evidence.read_text())
        assert validate_evidence(ReportPaths(cwd / "reports" / run_id).evidence) == []
        return {c["nodeid"].rsplit("::", 1)[-1]: (c["verdict"], c.get("failure") or "") for c in doc["checks"]
                if c["group"] == "site"}  # fmt: skip

    healthy = run("site-healthy")
    node_sh(workdir, "worker2", NO_BASH)
    try:
        broken = run("site-broken")
    finally:
        node_sh(workdir, "worker2", BASH_BACK)
    return healthy, broken


def test_wheel_against_a_login_on_a_closed_port_says_it_once(venv, tmp_path_factory):
    """A customer's login that nothing listens on: exit 1, the host named on at most 3 lines (here one, the
    verdict's one reason, blaming the login, not slurmctld), and every check NOT RUN in the evidence."""
    import socket

    cwd = tmp_path_factory.mktemp("closed")
    with socket.socket() as sock:  # a loopback port bound by the kernel's choice, then released: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = cwd / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    target = cwd / "site.yaml"
    target.write_text(f"version: 1\nname: closed\nlogin: {{host: 127.0.0.1, port: {port}, user: alice, key: {key}}}\n")
    argv = [str(venv / "bin" / "pytest"), "--pyargs", "pytest_slurmflox.suites", f"--slurmflox-target={target}"]
    t0 = time.monotonic()
    proc = subprocess.run(
        [*argv, "--slurmflox-run-id=closed"], cwd=cwd, capture_output=True, text=True, timeout=300, env=_clean_env()
    )
    print(proc.stdout[-3000:], proc.stderr[-2000:], f"took {time.monotonic() - t0:.1f}s", sep="\n")
    assert proc.returncode == 1, proc.stderr[-2000:]
    named = [line for line in (proc.stdout + proc.stderr).splitlines() if f"127.0.0.1:{port}" in line]
    assert 1 <= len(named) <= 3, named
    assert f"login alice@127.0.0.1:{port} unreachable (TCP connect)" in named[0] and "slurmctld" not in named[0]
    doc = json.loads(ReportPaths(cwd / "reports" / "closed").evidence.read_text())
    verdicts = {c["verdict"] for c in doc["checks"] if c["verdict"] != "NOT APPLICABLE"}
    assert verdicts == {"NOT RUN"}, verdicts
