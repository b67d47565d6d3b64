"""Integration: one real acceptance run against the local substrate produces the three artifacts, they validate, the
HTML renders in headless Chromium with the summary and the environment table, and a scan of every artifact finds
none of the deployment's secrets (and does find one that is planted).

The cluster is brought up in a temp work dir on a free loopback port and destroyed afterwards; the acceptance run
is one ``pytest --slurmflox-up=local`` process (provision, then run the suites), as an operator runs it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_slurmflox.model.secrets import scan_for_secrets, secret_files, secret_needles
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.reporting.artifacts import ReportPaths
from pytest_slurmflox.reporting.validation import validate_evidence, validate_junit

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_local_substrate() -> None:
    """SKIP, naming what is missing, where the local substrate cannot run."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the local substrate creates namespaces and overlay mounts")
    from pytest_slurmflox.substrates import SubstrateUnavailable
    from pytest_slurmflox.substrates.local import apt

    try:
        apt.require_root_debian()
    except SubstrateUnavailable as exc:
        pytest.skip(str(exc))


@contextmanager
def local_cluster(workdir: Path) -> Iterator[dict]:
    """A local-substrate cluster in ``workdir`` (SKIP naming what is missing); destroyed on exit."""
    require_local_substrate()
    from pytest_slurmflox.model.settings import resolve
    from pytest_slurmflox.substrates.local import LocalSubstrate
    from pytest_slurmflox.substrates.local.cluster import LocalCluster

    port = _free_port()
    settings = resolve(cli={"WORKDIR": str(workdir), "LOGIN_SSH_PORT": str(port)}, substrate="local").settings
    sub = LocalSubstrate(LocalCluster(settings, Workdir(workdir), lambda line: print(f"[local] {line}", flush=True)))
    t0 = time.monotonic()
    try:
        doc = sub.up()
        print(f"[local] up in {time.monotonic() - t0:.1f}s", flush=True)
        yield {"workdir": workdir, "port": port, "target": workdir / "target.yaml", "doc": doc}
    finally:
        sub.destroy()


def pytest_run(
    *args: str, cwd: Path, python: str = sys.executable, timeout: float = 1800
) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` in ``cwd`` (a separate process, as a user would run it)."""
    proc = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(proc.stdout[-6000:], proc.stderr[-3000:], sep="\n")
    return proc


@pytest.fixture(scope="module")
def acceptance_run(tmp_path_factory):
    """``pytest --slurmflox-up=local`` with the non-destructive suites and sign-off asked for, in a temp work dir on
    a free port; the deployment's secrets are read before ``--slurmflox-destroy`` removes them."""
    require_local_substrate()
    workdir = tmp_path_factory.mktemp("report-local")
    cwd = tmp_path_factory.mktemp("run")
    reports = cwd / "reports"
    t0 = time.monotonic()
    try:
        proc = pytest_run(
            "--slurmflox-up=local",
            f"--slurmflox-workdir={workdir}",
            f"--slurmflox-login-ssh-port={_free_port()}",
            "--pyargs",
            "pytest_slurmflox.suites",
            "--slurmflox-signoff",
            f"--slurmflox-reports={reports}",
            "--slurmflox-run-id=local-acc",
            cwd=cwd,
        )
        print(f"up + acceptance run took {time.monotonic() - t0:.1f}s, exit {proc.returncode}")
        secrets = {p: (p.read_bytes(), p.stat().st_mode) for p in secret_files(Workdir(workdir))}
    finally:
        destroyed = pytest_run("--slurmflox-destroy", f"--slurmflox-workdir={workdir}", cwd=cwd, timeout=600)
    assert destroyed.returncode == 0, destroyed.stdout[-2000:]
    keep = tmp_path_factory.mktemp("secrets")  # the scan reads files: keep copies (0600) outside the work dir
    copies = []
    for path, (data, _mode) in secrets.items():
        copy = keep / f"{len(copies)}-{path.name}"
        copy.touch(mode=0o600)
        copy.write_bytes(data)
        copies.append(copy)
    return {"proc": proc, "paths": ReportPaths(reports / "local-acc"), "secrets": secrets, "copies": copies}


def test_run_writes_three_valid_artifacts(acceptance_run):
    paths, proc = acceptance_run["paths"], acceptance_run["proc"]
    for artifact in (paths.html, paths.junit, paths.evidence):
        assert artifact.is_file() and artifact.stat().st_size > 0, f"{artifact} missing\n{proc.stdout[-3000:]}"
    assert validate_evidence(paths.evidence) == []
    assert validate_junit(paths.junit) == []
    doc = json.loads(paths.evidence.read_text())
    verdicts = {c["verdict"] for c in doc["checks"]}
    assert verdicts and verdicts <= {"PASS", "FAIL", "SKIP", "NOT APPLICABLE"}
    env = doc["run"]["target"]
    assert env["Substrate"] == "local" and env["Slurm version"].split()[-1][:2].isdigit()
    assert env["Worker image digest"].startswith("sha256:")
    # no Kubernetes here: T1 never applies (profile local, #26), shown as NOT APPLICABLE, never as PASS or SKIP; the
    # verdict and the exit status agree (tests/integration/test_signoff_local.py proves a healthy cluster signs off)
    t1 = next(g for g in doc["groups"] if g["group"] == "T1")
    assert t1["verdict"] == "NOT APPLICABLE" and not t1["required"] and "Kubernetes" in t1["reasons"][0], t1
    assert doc["run"]["profile"]["name"] == "local"
    assert (doc["run"]["verdict"] == "SIGNED OFF") == (proc.returncode == 0), (doc["run"], proc.stdout[-3000:])
    assert "slurmflox sign-off summary" in proc.stdout
    # every command of a check is evidence with where/as whom
    records = [r for c in doc["checks"] for r in c["evidence"]]
    assert records and all(r["where"] and r["user"] for r in records)
    assert any(r["user"] == doc["run"]["target"]["Login endpoint"].split("@")[0] for r in records)


def test_html_renders_summary_and_environment_in_chromium(acceptance_run):
    from test_report_html import chromium_dom, rendered_tables

    dom = chromium_dom(acceptance_run["paths"].html)
    env, groups, verdict = rendered_tables(dom)
    assert verdict.startswith(("SIGNED OFF", "NOT SIGNED OFF")), verdict
    assert "profile local" in dom, "the HTML names the sign-off profile"
    assert env["Substrate"] == "local" and env["Run id"] == "local-acc"
    # the version number the cluster reports (slurm.version: "24.11.5" from "slurm-wlm 24.11.5" / "slurm 24.11.5")
    assert re.fullmatch(r"\d+\.\d+\.\d+", env["Slurm version"]), env["Slurm version"]
    assert env["Runtime revision (expected)"].startswith("sha256:")
    assert {"T1", "T3", "T5"} <= set(groups)


def test_no_secret_of_the_deployment_reaches_any_artifact(acceptance_run, tmp_path):
    paths = acceptance_run["paths"]
    names = {p.name for p in acceptance_run["secrets"]}
    assert "id_cluster" in names and ({"slurm.key", "munge.key"} & names), names
    for path, (_data, mode) in acceptance_run["secrets"].items():
        assert mode & 0o077 == 0, f"{path} is readable by others: {oct(mode)}"
    needles = secret_needles(acceptance_run["copies"])
    artifacts = paths.artifacts()
    assert len(artifacts) >= 3
    assert scan_for_secrets(artifacts, needles) == []
    assert "secret scan clean" in acceptance_run["proc"].stdout
    # the scan is not blind: plant the cluster key into a copy of the artifacts
    copy = tmp_path / "copy"
    shutil.copytree(paths.root, copy)
    key = next(p for p in acceptance_run["copies"] if p.name.endswith(("slurm.key", "munge.key")))
    html = copy / "report.html"
    html.write_text(html.read_text() + base64.b64encode(key.read_bytes()).decode())
    leaks = scan_for_secrets(sorted(p for p in copy.rglob("*") if p.is_file()), needles)
    assert {leak.path.name for leak in leaks} == {"report.html"}  # (copies of the key elsewhere match too)
    assert f"content of {key.name} (base64)" in {leak.label for leak in leaks}
