"""The workload corpus: which files are scripts, sidecar validation, and how TW checks appear (or do not)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_slurmflox.judges.workloads import (
    DEFAULT_WAIT,
    WorkloadError,
    exit_status,
    job_nodes,
    load_corpus,
    parse_sidecar,
)


def _corpus(tmp_path: Path) -> Path:
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "hello.sh").write_text("#!/bin/bash\n#SBATCH --ntasks=1\necho hello\n")
    (d / "hello.sh.yaml").write_text("output_pattern: '^hello$'\nnodes: 1\ntime_bound: 30\n")
    (d / "fails.sbatch").write_text("#SBATCH --time=1\nexit 3\n")  # no shebang, but an #SBATCH line
    (d / "README.md").write_text("not a script\n")
    (d / ".hidden.sh").write_text("#!/bin/bash\n")
    return d


def test_corpus_finds_scripts_and_sidecars(tmp_path):
    corpus = load_corpus(_corpus(tmp_path))
    assert [w.id for w in corpus] == ["fails.sbatch", "hello.sh"]
    fails, hello = corpus
    assert fails.exit_code == 0 and fails.output_pattern is None and fails.wait_timeout == DEFAULT_WAIT
    assert hello.output_pattern == "^hello$" and hello.nodes == 1 and hello.time_bound == 30.0
    assert hello.wait_timeout == 60.0
    assert "output matches /^hello$/" in hello.expectations() and "1 node(s)" in hello.expectations()


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ("exit_cod: 1\n", "unknown key 'exit_cod'"),
        ("exit_code: 300\n", "exit_code must be an integer 0-255"),
        ("exit_code: true\n", "exit_code must be an integer"),
        ("output_pattern: '(unclosed'\n", "not a valid regular expression"),
        ("nodes: 0\n", "nodes must be an integer"),
        ("time_bound: -5\n", "time_bound must be a positive number"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_sidecars_name_file_and_key(tmp_path, sidecar, message):
    path = tmp_path / "job.sh.yaml"
    path.write_text(sidecar)
    with pytest.raises(WorkloadError, match=message) as info:
        parse_sidecar(path)
    assert str(path) in str(info.value)


def test_empty_sidecar_means_defaults(tmp_path):
    path = tmp_path / "job.sh.yaml"
    path.write_text("")
    assert parse_sidecar(path) == {}


def test_empty_or_missing_directory_is_an_error(tmp_path):
    with pytest.raises(WorkloadError, match="does not exist"):
        load_corpus(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(WorkloadError, match="holds no sbatch script"):
        load_corpus(tmp_path)


def test_scontrol_fields():
    assert exit_status("0:0") == (0, 0) and exit_status("3:0") == (3, 0) and exit_status("0:9") == (0, 9)
    assert job_nodes("2") == 2 and job_nodes("1-2") == 1 and job_nodes("") is None
    with pytest.raises(ValueError):
        exit_status("x")


# ------------------------------------------------------------------------------------------------ collection
def _collect(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            "--collect-only",
            "-q",
            "--pyargs",
            "pytest_slurmflox.suites",
            "-m",
            "acceptance",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_tw_checks_do_not_exist_without_a_corpus_and_one_per_script_with_one(tmp_path):
    without = _collect(cwd=tmp_path)
    assert without.returncode == 0, without.stdout + without.stderr
    assert "test_tw_workloads" not in without.stdout and "TW" not in without.stdout
    assert "skipped" not in without.stdout  # not a SKIP either
    # ... and not a phantom item: everything counted as collected is either selected or deselected
    match = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", without.stdout)
    assert match, without.stdout[-500:]
    selected, total, deselected = map(int, match.groups())
    listed = [line for line in without.stdout.splitlines() if "::" in line]
    assert selected == len(listed) and selected + deselected == total
    with_corpus = _collect(f"--slurmflox-workloads={_corpus(tmp_path)}", cwd=tmp_path)
    assert with_corpus.returncode == 0, with_corpus.stdout + with_corpus.stderr
    tw = [line for line in with_corpus.stdout.splitlines() if "test_tw_workloads.py::" in line]
    # sorted: pytest-randomly (active in the subprocess) shuffles the collected items with a fresh seed per run
    assert sorted(line.split("::")[-1] for line in tw) == ["test_workload[fails.sbatch]", "test_workload[hello.sh]"]


def test_bad_corpus_is_a_usage_error_before_anything_runs(tmp_path):
    corpus = _corpus(tmp_path)
    (corpus / "fails.sbatch.yaml").write_text("exit_code: lots\n")
    res = _collect(f"--slurmflox-workloads={corpus}", cwd=tmp_path)
    assert res.returncode == pytest.ExitCode.USAGE_ERROR
    assert "fails.sbatch.yaml: exit_code must be an integer" in res.stderr
