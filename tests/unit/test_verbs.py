"""The verbs (verbs.py: status, down, destroy, strip-secrets) on a real work dir.

Without a recorded deployment a verb says so in one line, builds no substrate and changes nothing. With one, each
verb reaches the substrate the record names through the registry: a small substrate registered for the test
(``SUBSTRATES`` is the registry a third substrate joins), whose status is a file the test writes and whose verbs
leave a line in the work dir, since each verb builds its own instance. The real substrates' verbs run on a cluster
(test_lifecycle_local.py, test_cleanup_local.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.harness.verbs import VerbContext, destroy, down, status, strip_secrets
from pytest_slurmflox.model.settings import SubstrateOptions, resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SUBSTRATES, Substrate


class Recorded(Substrate):
    """A substrate whose status is ``<work dir>/status`` and whose verbs append to ``<work dir>/calls``."""

    name = "recorded"

    def __init__(self, workdir: Workdir) -> None:
        self.workdir = workdir
        self._note("built")

    def _note(self, what: str) -> None:
        with (self.workdir.root / "calls").open("a") as calls:
            calls.write(what + "\n")

    @classmethod
    def from_options(cls, settings, workdir, progress, options, explicit):  # type: ignore[override]
        return cls(workdir)

    def refuse(self) -> None:
        raise AssertionError("a verb never asks whether a substrate can come up")

    def up(self) -> dict:
        raise AssertionError("a verb never brings a substrate up")

    def status(self) -> str:
        return (self.workdir.root / "status").read_text()

    def down(self) -> None:
        self._note("down")

    def destroy(self) -> None:
        self._note("destroy")

    def pool(self):  # type: ignore[override]
        raise AssertionError("a verb never asks for the pool")

    def target_spec(self):  # type: ignore[override]
        raise AssertionError("a verb never asks for the target")

    def strip_secrets(self) -> list[Path]:
        own = self.workdir.root / "own.key"
        own.unlink()
        return [own]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workdir:
    monkeypatch.setitem(SUBSTRATES, "recorded", f"{__name__}:Recorded")
    wd = Workdir(tmp_path / "wd")
    wd.root.mkdir()
    wd.ssh_key.write_text("PRIVATE\n")
    (wd.root / "settings.env").write_text("WORKER_COUNT=2\n")  # not a secret: stays
    return wd


def _context(workdir: Workdir, said: list[str]) -> VerbContext:
    return VerbContext(workdir, "recorded", resolve(env={}).settings, SubstrateOptions(), said.append)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _calls(workdir: Workdir) -> list[str]:
    calls = workdir.root / "calls"
    return calls.read_text().split() if calls.exists() else []


@pytest.mark.parametrize(
    ("verb", "exit_code"),
    [(status, pytest.ExitCode.OK), (down, pytest.ExitCode.USAGE_ERROR), (destroy, pytest.ExitCode.USAGE_ERROR)],
)
def test_a_verb_without_a_deployment_says_so_in_one_line_and_changes_nothing(workdir: Workdir, verb, exit_code):
    before = _tree(workdir.root)
    said: list[str] = []
    assert verb(_context(workdir, said)) == exit_code
    assert said == [f"no deployment is recorded in {workdir.root}"]
    assert _tree(workdir.root) == before
    assert _calls(workdir) == []  # no substrate was even built


def test_status_prints_what_the_recorded_substrate_says(workdir: Workdir, capsys: pytest.CaptureFixture[str]):
    workdir.record_deployment({"substrate": "recorded", "target": None})
    (workdir.root / "status").write_text("node1 running\nnode2 running")
    said: list[str] = []
    assert status(_context(workdir, said)) == pytest.ExitCode.OK
    assert capsys.readouterr().out == "node1 running\nnode2 running\n" and said == []


def test_down_keeps_the_record_and_destroy_forgets_it(workdir: Workdir):
    workdir.record_deployment({"substrate": "recorded", "target": None})
    said: list[str] = []
    assert down(_context(workdir, said)) == pytest.ExitCode.OK
    assert workdir.read_deployment() is not None
    assert destroy(_context(workdir, said)) == pytest.ExitCode.OK
    assert workdir.read_deployment() is None
    assert _calls(workdir) == ["built", "down", "built", "destroy"]
    assert said == ["down: stopped; state kept", "destroy: nodes and state removed; caches kept"]


def test_strip_secrets_is_refused_while_the_deployment_runs(workdir: Workdir):
    workdir.record_deployment({"substrate": "recorded", "target": None})
    (workdir.root / "status").write_text("login running")
    (workdir.root / "own.key").write_text("KEY\n")
    before = _tree(workdir.root)
    said: list[str] = []
    assert strip_secrets(_context(workdir, said)) == pytest.ExitCode.USAGE_ERROR
    assert said == ["error: the deployment is running; run --slurmflox-down first"]
    assert _tree(workdir.root) == {**before, "calls": "built\n"}


def test_strip_secrets_of_a_stopped_deployment_removes_the_substrates_and_the_work_dirs(workdir: Workdir):
    workdir.record_deployment({"substrate": "recorded", "target": None})
    (workdir.root / "status").write_text("login stopped")
    (workdir.root / "own.key").write_text("KEY\n")
    said: list[str] = []
    assert strip_secrets(_context(workdir, said)) == pytest.ExitCode.OK
    assert not (workdir.root / "own.key").exists() and not workdir.ssh_key.exists()
    assert (workdir.root / "settings.env").is_file() and workdir.read_deployment() is not None
    assert said == [f"strip-secrets: removed 2 path(s): {workdir.root / 'own.key'}, {workdir.ssh_key}"]


def test_strip_secrets_without_a_deployment_removes_the_work_dirs_own(workdir: Workdir):
    said: list[str] = []
    assert strip_secrets(_context(workdir, said)) == pytest.ExitCode.OK
    assert not workdir.ssh_key.exists() and (workdir.root / "settings.env").is_file()
    assert said == [f"strip-secrets: removed 1 path(s): {workdir.ssh_key}"]
    assert _calls(workdir) == []
