"""Whether a worker holds a local account (pytest_slurmflox/judges/nsslocal.py): nsswitch.conf parsing, the judgement of
the probe's lines, and the probe itself run by bash against this host's resolver (in a private mount namespace
whose /etc/passwd and /etc/nsswitch.conf are the test's: getent reads the real files through glibc)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_slurmflox.judges.nsslocal import account_problems, probe_script, sources

QUERIES = [("passwd", "sfxuser"), ("passwd", "4242"), ("initgroups", "sfxuser")]


def test_sources_drop_actions_and_fall_back():
    nss = {"passwd": "files [NOTFOUND=return] slurm sss", "group": "slurm files", "initgroups": ""}
    assert sources(nss, "passwd") == ["files", "slurm", "sss"]
    assert sources(nss, "initgroups") == ["slurm", "files"]  # no initgroups line: the group line (nsswitch.conf(5))
    assert sources({}, "passwd") == ["files"]


def _lines(passwd_slurm: str = "", passwd_files: str = "") -> list[str]:
    return [
        "nss|passwd|slurm files",
        "nss|group|slurm files",
        "nss|initgroups|",
        f"asked|passwd|slurm|sfxuser|{0 if passwd_slurm else 2}|{passwd_slurm}",
        f"asked|passwd|files|sfxuser|{0 if passwd_files else 2}|{passwd_files}",
        "asked|passwd|slurm|4242|2|",
        "asked|passwd|files|4242|2|",
        "asked|initgroups|slurm|sfxuser|0|sfxuser",
        "asked|initgroups|files|sfxuser|0|sfxuser  ",
        "checked",
    ]


def test_nss_slurm_answering_for_the_job_user_is_fine_and_named():
    entry = "sfxuser:x:4242:4242::/home/sfxuser:/bin/bash"
    assert account_problems(_lines(passwd_slurm=entry), QUERIES) == ([], ["passwd sfxuser answered by slurm"])


def test_the_files_source_answering_is_a_local_account():
    entry = "sfxuser:x:4242:4242::/home/sfxuser:/bin/bash"
    problems, _ = account_problems(_lines(passwd_slurm=entry, passwd_files=entry), QUERIES)
    assert problems == [f"the local files source answers passwd sfxuser: {entry}"]


def test_an_unasked_source_a_refusal_or_an_unfinished_probe_is_a_problem():
    lines = [line for line in _lines() if not line.startswith("asked|passwd|files|4242")]
    assert account_problems(lines, QUERIES)[0] == ["the files source of passwd was not asked for 4242"]
    refused = [line.replace("asked|passwd|slurm|4242|2|", "asked|passwd|slurm|4242|1|Unknown") for line in _lines()]
    assert account_problems(refused, QUERIES)[0] == ["getent -s slurm passwd 4242 was refused (Unknown)"]
    assert account_problems(_lines()[:-1], QUERIES) == (["the resolver probe did not finish"], [])
    member = [line.replace("sfxuser  ", "sfxuser 4243") for line in _lines()]
    assert account_problems(member, QUERIES)[0] == ["the local files source answers initgroups sfxuser: sfxuser 4243"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_the_probe_asks_each_source_of_this_resolver(tmp_path):
    (tmp_path / "nsswitch.conf").write_text("passwd: files [NOTFOUND=continue] systemd\ngroup: files\n")
    (tmp_path / "passwd").write_text(Path("/etc/passwd").read_text() + "sfxuser:x:4242:4242::/nonexistent:/bin/false\n")
    (tmp_path / "group").write_text(Path("/etc/group").read_text() + "sfxextra:x:4243:sfxuser\n")
    script = probe_script(QUERIES)
    mounts = " && ".join(f"mount --bind {tmp_path}/{f} /etc/{f}" for f in ("nsswitch.conf", "passwd", "group"))
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", f"{mounts} && {script}"],
        capture_output=True,
        text=True,
        check=True,
    )
    problems, _ = account_problems(out.stdout.splitlines(), QUERIES)
    assert problems == [
        "the local files source answers passwd sfxuser: sfxuser:x:4242:4242::/nonexistent:/bin/false",
        "the local files source answers passwd 4242: sfxuser:x:4242:4242::/nonexistent:/bin/false",
        "the local files source answers initgroups sfxuser: sfxuser 4243",
    ], out.stdout
