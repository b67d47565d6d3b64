"""The sweep (sweep.py) at a run's end: it removes the run's own directory in the user's home and nothing else,
and a value that is not a run id sweeps nothing at all. Commands run on this host through the real
:class:`LocalRunner` with ``HOME`` pointed at a temporary directory (what the login endpoint's shell expands);
cancelling the run's jobs needs a slurmctld and is proven on a cluster (test_cleanup_local.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.base.run import LocalRunner, Result
from pytest_slurmflox.cluster.submit import is_run_id
from pytest_slurmflox.harness.sweep import sweep_run


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home with two runs' directories and a file beside the runs directory."""
    home = tmp_path / "home with space"
    (home / "slurmflox-runs" / "r1" / "sub").mkdir(parents=True)
    (home / "slurmflox-runs" / "r1" / "sub" / "1.out").write_text("job output\n")
    (home / "slurmflox-runs" / "r10").mkdir()
    (home / "victim").mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_the_sweep_removes_the_runs_own_directory_and_no_other(home: Path):
    sweep_run(LocalRunner(), None, "r1", keep=False)
    assert not (home / "slurmflox-runs" / "r1").exists()
    assert (home / "slurmflox-runs" / "r10").is_dir()  # a run whose id starts with this one's is another run
    assert (home / "victim").is_dir()


def test_the_runs_directory_goes_with_the_last_run(home: Path):
    sweep_run(LocalRunner(), None, "r1", keep=False)
    sweep_run(LocalRunner(), None, "r10", keep=False)
    assert not (home / "slurmflox-runs").exists()
    assert (home / "victim").is_dir()


def test_keep_removes_nothing(home: Path):
    seen: list[Result] = []
    sweep_run(LocalRunner(observer=seen.append), None, "r1", keep=True)
    assert (home / "slurmflox-runs" / "r1" / "sub" / "1.out").is_file()
    assert seen == []


@pytest.mark.parametrize(
    "run_id", ["../victim", "r1/../../victim", "..", "", "-rf", "$(touch {marker})", "x; touch {marker}; rm -rf $HOME"]
)
def test_a_value_that_is_not_a_run_id_sweeps_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str
):
    """options.py refuses such a run id when it is read; the sweep is the last line before ``rm -rf``: it runs no
    command at all and says so in one line."""
    marker = tmp_path / "pwned"
    hostile = run_id.replace("{marker}", str(marker))
    assert not is_run_id(hostile)
    seen: list[Result] = []
    sweep_run(LocalRunner(observer=seen.append), None, hostile, keep=False)
    assert seen == []
    assert not marker.exists()
    assert (home / "victim").is_dir() and (home / "slurmflox-runs" / "r1" / "sub" / "1.out").is_file()
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "not a run id" in out[0] and "nothing removed" in out[0]


def test_a_sweep_that_cannot_reach_the_login_endpoint_says_so_and_does_not_raise(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Teardown must go on: the runner's failure (here: a working directory that does not exist) is one line."""
    sweep_run(LocalRunner(cwd=tmp_path / "gone"), None, "r1", keep=False)
    assert "could not remove the files of run r1" in capsys.readouterr().out
    assert (home / "slurmflox-runs" / "r1").is_dir()
