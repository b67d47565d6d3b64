"""Substrates bring a cluster into being. They know nothing about pytest.

Every substrate turns Settings into a running cluster and describes it as a target file (``target.yaml`` in the
work dir), which is all the suites ever see. ``progress`` receives one human line per step of long work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..pool import WorkerPool
from ..settings import Settings, SubstrateOptions
from ..state import Workdir
from ..target import TargetSpec

Progress = Callable[[str], None]


class SubstrateUnavailable(RuntimeError):
    """The substrate cannot run on this host (not root, no KVM, offline, ...). The message says what is missing."""


class Substrate(Protocol):
    name: str

    def up(self) -> dict:
        """Create or converge the cluster (idempotent); return the target description (also written to
        ``workdir/target.yaml``)."""

    def status(self) -> str:
        """A human-readable status report."""

    def down(self) -> object:
        """Stop everything, keep state."""

    def destroy(self) -> None:
        """Remove nodes and state, keep caches."""

    def pool(self) -> WorkerPool:
        """The owner of the worker cohort."""

    def target_spec(self) -> TargetSpec:
        """The target this deployment is, built from the settings object the substrate was given (what ``up``
        serializes into ``target.yaml``): the controller hands its expectations on without parsing a file."""


def make_substrate(
    name: str,
    settings: Settings,
    workdir: Workdir,
    progress: Progress,
    options: SubstrateOptions | None = None,
    explicit: frozenset[str] = frozenset(),
) -> Substrate:
    """The substrate named ``name``; imported lazily so a customer target never loads substrate code.
    ``options`` are the host's substrate knobs from the option table (image, accelerator, isolation, cache);
    ``explicit`` the worker keys the user gave explicitly (from the one resolution of settings)."""
    options = options or SubstrateOptions()
    if name == "local":
        from .local import LocalSubstrate

        return LocalSubstrate(
            settings, workdir, progress, cache=options.local_cache, site_noise=options.local_site_noise
        )
    if name == "qemu":
        from .qemu import QemuSubstrate

        return QemuSubstrate(
            settings,
            workdir,
            progress,
            image=options.qemu_image,
            accel=options.qemu_accel,
            restrict=options.qemu_restrict,
            explicit=explicit,
        )
    raise SubstrateUnavailable(f"unknown substrate {name!r} (choose local or qemu)")
