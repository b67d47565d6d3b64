"""doctor.py: ``--slurmflox-check-target`` in a pytest subprocess. A file the schema refuses: one line, exit 4; a
login on a real closed loopback port: the login named once, every required group NOT RUN, exit 1, under 10 s.
(The doctor on a live cluster, healthy and with slurmdbd stopped: tests/integration/test_site_access_local.py.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


def _doctor(target: Path, cwd: Path) -> tuple[int, list[str], float]:
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "pytest", f"--slurmflox-check-target={target}", "-p", "no:cacheprovider"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)
    return out.returncode, (out.stdout + out.stderr).splitlines(), time.monotonic() - t0


def test_a_file_the_schema_refuses_is_one_line_and_exit_4(tmp_path: Path):
    target = tmp_path / "t.yaml"
    target.write_text("version: 1\nname: x\nlogin: {host: h, user: u}\nacounting: {account: a}\n")
    rc, lines, _ = _doctor(target, tmp_path)
    assert rc == 4, lines
    assert len(lines) == 1 and "acounting" in lines[0] and "accounting" in lines[0], lines
    assert list(tmp_path.iterdir()) == [target]  # nothing written


def test_an_unreachable_login_is_named_once_and_every_required_group_is_not_run(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    target = tmp_path / "t.yaml"
    target.write_text(f"version: 1\nname: x\nlogin: {{host: 127.0.0.1, port: {port}, user: u, key: {key}}}\n")
    rc, lines, took = _doctor(target, tmp_path)
    assert rc == 1, lines
    assert took < 60  # the pytest process, on a loaded machine; the doctor's own time is its last line's
    assert float(lines[-1].rsplit("; ", 1)[1].rstrip("s")) < 10, lines[-1]
    assert len([line for line in lines if f"127.0.0.1:{port}" in line]) == 1, lines
    rows = {line.split()[0].lstrip("*"): line for line in lines if line.startswith(("*", " T"))}
    assert {"T2", "T3", "TI", "TA"} <= set(rows), lines
    assert "NOT RUN" in rows["T2"] and rows["T2"].startswith("*")
    assert "NOT APPLICABLE" in rows["TA"] and "declares no accounting" in rows["TA"]
    assert lines[-1].startswith("sign-off NOT reachable (blocked: T2,"), lines


def test_an_mpi_plugin_the_cluster_does_not_offer_blocks_sign_off_naming_both():
    """sid's Slurm 26.05.5 as Debian builds it (no mpi/pmix), against a target that says nothing (pmix)."""
    from types import SimpleNamespace

    from pytest_slurmflox.harness.doctor import mpi_blocking

    # FACTS["mpi"] as a site login with a chatty profile answers it (the CI run of 64a6550 read nothing past it)
    sid = (True, "Welcome to site-a\nMPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2")
    said: list[str] = []
    assert mpi_blocking(SimpleNamespace(spec=SimpleNamespace(mpi="pmix")), {"mpi": sid}, said.append) == ["T6"]
    assert said == ["  T6 would FAIL: slurm.mpi pmix is not among the MPI plugins srun offers: none, cray_shasta, pmi2"]
    assert mpi_blocking(SimpleNamespace(spec=SimpleNamespace(mpi="pmi2")), {"mpi": sid}, said.append) == []
    assert mpi_blocking(SimpleNamespace(spec=SimpleNamespace(mpi="pmix")), {"mpi": (False, "")}, said.append) == []
