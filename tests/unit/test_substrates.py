"""The substrate registry: every registered name resolves to a complete Substrate, an incomplete one fails at
construction (the abstract base), and an unknown name is a clear error naming the known ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.model.settings import SubstrateOptions, resolve
from pytest_slurmflox.model.workdir import Workdir
from pytest_slurmflox.substrates import SUBSTRATES, Substrate, SubstrateUnavailable, make_substrate, substrate_class


@pytest.mark.parametrize("name", sorted(SUBSTRATES))
def test_every_registered_substrate_is_a_complete_substrate(name: str):
    cls = substrate_class(name)
    assert issubclass(cls, Substrate) and cls.name == name
    assert not getattr(cls, "__abstractmethods__", None), f"{name} leaves {cls.__abstractmethods__} abstract"
    assert cls.__module__ == f"pytest_slurmflox.substrates.{name}.substrate"


def test_make_substrate_hands_each_substrate_its_option_rows(tmp_path: Path):
    settings = resolve(env={}).settings
    options = SubstrateOptions(local_cache=tmp_path / "cache", qemu_accel="tcg", qemu_restrict=True)
    local = make_substrate("local", settings, Workdir(tmp_path / "l"), print, options)
    assert local.name == "local" and local.cluster.cache == tmp_path / "cache"  # type: ignore[attr-defined]
    qemu = make_substrate("qemu", settings, Workdir(tmp_path / "q"), print, options, frozenset({"WORKER_CPUS"}))
    assert qemu.accel_request == "tcg" and qemu.restrict and qemu.explicit == {"WORKER_CPUS"}  # type: ignore[attr-defined]


def test_unknown_substrate_names_the_known_ones(tmp_path: Path):
    with pytest.raises(SubstrateUnavailable, match=r"unknown substrate 'kind'.*local or qemu"):
        make_substrate("kind", resolve(env={}).settings, Workdir(tmp_path), print)


def test_a_substrate_missing_a_verb_fails_at_construction():
    class Incomplete(Substrate):
        name = "incomplete"

        @classmethod
        def from_options(cls, settings, workdir, progress, options, explicit):  # type: ignore[override]
            return cls()

        def up(self) -> dict:
            return {}

    with pytest.raises(TypeError, match="abstract"):
        Incomplete.from_options(None, None, print, SubstrateOptions(), frozenset())  # type: ignore[arg-type]
