"""Substrates bring a cluster into being. They know nothing about pytest.

Every substrate turns Settings into a running cluster and describes it as a target file (``target.yaml`` in the
work dir), which is all the suites ever see. ``progress`` receives one human line per step of long work.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable

from ..model.pool import WorkerPool
from ..model.settings import Settings, SubstrateOptions
from ..model.target import TargetSpec
from ..model.workdir import Workdir

Progress = Callable[[str], None]

#: The substrate registry (as testinfra's ``BACKENDS``): name -> ``module:Class``, each in
#: ``substrates/<name>/substrate.py``, imported only when chosen, so a customer target never loads substrate code.
SUBSTRATES: dict[str, str] = {
    "local": "pytest_slurmflox.substrates.local.substrate:LocalSubstrate",
    "qemu": "pytest_slurmflox.substrates.qemu.substrate:QemuSubstrate",
}


class SubstrateUnavailable(RuntimeError):
    """The substrate cannot run on this host (not root, no KVM, offline, ...). The message says what is missing."""


class Substrate(ABC):
    """What every substrate provides. An abstract base (as ReFrame's backends), so a substrate that misses a verb
    fails when it is constructed, not halfway through someone's ``up``."""

    name: str

    @classmethod
    @abstractmethod
    def from_options(
        cls,
        settings: Settings,
        workdir: Workdir,
        progress: Progress,
        options: SubstrateOptions,
        explicit: frozenset[str],
    ) -> Substrate:
        """Construct from the option table's substrate rows (``options``) and the worker keys the user gave
        explicitly (``explicit``, from the one resolution of settings); each substrate takes the rows it has."""

    @abstractmethod
    def refuse(self) -> None:
        """Raise :class:`~pytest_slurmflox.model.settings.SettingsError` when this substrate cannot hold what its
        settings
        ask for on this host (a limit of its own, such as the local substrate's cohort size); ``up`` calls it before
        anything is recorded or started."""

    @abstractmethod
    def up(self) -> dict:
        """Create or converge the cluster (idempotent); return the target description (also written to
        ``workdir/target.yaml``)."""

    @abstractmethod
    def status(self) -> str:
        """A human-readable status report."""

    @abstractmethod
    def down(self) -> object:
        """Stop everything, keep state."""

    @abstractmethod
    def destroy(self) -> None:
        """Remove nodes and state, keep caches."""

    @abstractmethod
    def pool(self) -> WorkerPool:
        """The owner of the worker cohort."""

    @abstractmethod
    def target_spec(self) -> TargetSpec:
        """The target this deployment is, built from the settings object the substrate was given (what ``up``
        serializes into ``target.yaml``): the controller hands its expectations on without parsing a file."""


def substrate_class(name: str) -> type[Substrate]:
    """The registered class for ``name``; an unknown name is a clear error listing the known ones."""
    try:
        module_name, _, class_name = SUBSTRATES[name].partition(":")
    except KeyError:
        raise SubstrateUnavailable(f"unknown substrate {name!r} (choose {' or '.join(SUBSTRATES)})") from None
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Substrate)):
        raise TypeError(f"{SUBSTRATES[name]} is not a Substrate")
    return cls


def make_substrate(
    name: str,
    settings: Settings,
    workdir: Workdir,
    progress: Progress,
    options: SubstrateOptions | None = None,
    explicit: frozenset[str] = frozenset(),
) -> Substrate:
    """The substrate named ``name``, built by its class from the option table's rows."""
    return substrate_class(name).from_options(settings, workdir, progress, options or SubstrateOptions(), explicit)
