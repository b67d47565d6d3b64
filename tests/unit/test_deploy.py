"""``--slurmflox-up`` (deploy.py): the deployment is recorded before the substrate starts anything, so a failed
``up`` leaves what it started findable by ``--slurmflox-destroy`` (issue 25); the target file the substrate wrote
is recorded once it is up; a cohort that cannot be reconciled is one :class:`DeployError` naming why.

The substrate is a small one registered for the test (``SUBSTRATES`` is the registry a third substrate joins): its
``up`` notes what the work dir held at that moment, then fails or describes a target whose login answers nothing.
Bringing the real local substrate up, and failing it half-way, is test_up_failures_local.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_slurmflox.harness.deploy import DeployError, up
from pytest_slurmflox.model.settings import SettingsError, SubstrateOptions, resolve
from pytest_slurmflox.model.target import TargetSpec, parse_target
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SUBSTRATES, Substrate, SubstrateUnavailable


class Starting(Substrate):
    """``up`` writes ``<work dir>/seen-at-up.json`` (the deployment record and whether the worker revision file
    existed), then fails when ``<work dir>/fail`` exists, else returns a target with no admin login. It refuses
    its settings (a limit of its own) when ``<work dir>/too-big`` exists."""

    name = "starting"

    def __init__(self, workdir: Workdir) -> None:
        self.workdir = workdir

    @classmethod
    def from_options(cls, settings, workdir, progress, options, explicit):  # type: ignore[override]
        return cls(workdir)

    def refuse(self) -> None:
        if (self.workdir.root / "too-big").exists():
            raise SettingsError("COMPUTE_REPLICAS", "9", "the starting substrate's limit on this host is 8 workers")

    def up(self) -> dict:
        seen = {"record": self.workdir.read_deployment(), "revision": self.workdir.worker_revision_env.exists()}
        (self.workdir.root / "seen-at-up.json").write_text(json.dumps(seen))
        if (self.workdir.root / "fail").exists():
            raise SubstrateUnavailable("starting: the second node did not boot")
        return {"path": str(self.workdir.root / "target.yaml")}

    def status(self) -> str:
        return "running"

    def down(self) -> None:
        raise AssertionError("up never stops a substrate")

    def destroy(self) -> None:
        raise AssertionError("up never destroys a substrate")

    def pool(self):  # type: ignore[override]
        return None

    def target_spec(self) -> TargetSpec:
        login = {"host": "127.0.0.1", "port": 9, "user": "nobody", "key": str(self.workdir.root / "no-such-key")}
        # a target names a substrate of the schema's (schemas/target.json): this stand-in writes the local one's
        return parse_target({"version": 1, "name": "starting", "substrate": "local", "login": login})


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workdir:
    monkeypatch.setitem(SUBSTRATES, "starting", f"{__name__}:Starting")
    wd = Workdir(tmp_path / "wd")
    wd.root.mkdir()
    return wd


def _up(workdir: Workdir, said: list[str]):
    """``up`` with one worker runtime key given explicitly (it is persisted in the work dir)."""
    resolved = resolve(env={"SLURMFLOX_WORKER_FLOX_ACTIVATE_MODE": "run"})
    return up("starting", resolved, workdir, SubstrateOptions(), said.append)


def _seen(workdir: Workdir) -> dict:
    return json.loads((workdir.root / "seen-at-up.json").read_text())


def test_the_deployment_is_recorded_before_the_substrate_starts_and_kept_when_up_fails(workdir: Workdir):
    (workdir.root / "fail").touch()
    with pytest.raises(SubstrateUnavailable, match="second node did not boot"):
        _up(workdir, [])
    seen = _seen(workdir)
    assert seen["record"]["substrate"] == "starting" and seen["record"]["target"] is None
    assert seen["revision"]  # the worker settings given to this up are persisted before it starts too
    record = workdir.read_deployment()
    assert record is not None and record["substrate"] == "starting"  # --slurmflox-destroy finds it


def test_an_up_over_the_same_deployment_keeps_its_record_while_it_runs(workdir: Workdir):
    """A re-up that fails must not lose the target file of the deployment it was converging."""
    workdir.record_deployment({"substrate": "starting", "target": "/earlier/target.yaml", "up_at": 1.0})
    (workdir.root / "fail").touch()
    with pytest.raises(SubstrateUnavailable):
        _up(workdir, [])
    assert _seen(workdir)["record"]["target"] == "/earlier/target.yaml"
    assert workdir.read_deployment() == {"substrate": "starting", "target": "/earlier/target.yaml", "up_at": 1.0}


def test_the_target_is_recorded_once_up_and_a_cohort_without_admin_access_is_one_error(workdir: Workdir):
    said: list[str] = []
    with pytest.raises(DeployError) as raised:
        _up(workdir, said)
    assert str(raised.value) == "cannot reconcile without administrative access: the target file names no admin login"
    record = workdir.read_deployment()
    assert record is not None and record["target"] == str(workdir.root / "target.yaml")
    assert said == [f"up: substrate starting, work dir {workdir.root}"]


def test_a_substrates_own_limit_is_refused_before_anything_is_recorded_or_started(workdir: Workdir):
    (workdir.root / "too-big").touch()
    said: list[str] = []
    with pytest.raises(SettingsError, match="limit on this host is 8 workers"):
        _up(workdir, said)
    assert not (workdir.root / "seen-at-up.json").exists()  # up never ran
    assert workdir.read_deployment() is None and not workdir.worker_revision_env.exists() and said == []
