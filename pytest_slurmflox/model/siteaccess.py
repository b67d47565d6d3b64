"""Site access: the account, QOS, reservation and further options a site requires of every job, step and allocation.

A production cluster admits work only under an account (and often a QOS), and an acceptance run on it normally
runs inside an admin reservation: that is how a platform team makes room on a busy cluster. The target file
declares them under ``slurm``::

    slurm:
      partition: batch
      account: platform          # --account
      qos: acceptance            # --qos
      reservation: handover      # --reservation; the cohort is then the reservation's nodes
      extra_args: ["--constraint=skylake", "--comment=acceptance run"]   # anything else the site requires

Every job the suites submit carries them: ``submit.Jobs`` places each job (sbatch, srun, the early jobs' chain)
and the checks that build their own command lines (salloc, TP's steps and batch jobs, T10's admin step) take
:attr:`SiteAccess.options` from it; a REST submission carries :meth:`SiteAccess.job_fields`. The values are validated
here, where the target is parsed, and always travel as argv words (quoted once by the runner), never as shell text.
``extra_args`` has no REST counterpart: a job description has no command line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .mpiplugin import DEFAULT_MPI_PLUGIN

#: A Slurm account, QOS or reservation name as the target may declare it: letters, digits and ``_ . + -``, up to
#: 64, not starting with ``-`` (never read as an option).
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
#: One option word of ``extra_args``: ``--long[=value]`` or ``-X[value]``, the value printable and on one line.
OPTION_PATTERN = re.compile(r"(--[A-Za-z][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]*)?|-[A-Za-z][^\x00-\x1f\x7f]*)")
#: Options the checks set themselves (the job's traceable name, its output, where it runs and what it is asked):
#: an extra argument naming one would change what a check observes. The site's account, QOS and reservation have
#: keys of their own.
OWN_OPTIONS = frozenset(
    {
        *("-J", "--job-name", "-o", "--output", "-e", "--error", "-p", "--partition"),
        *("-A", "--account", "-q", "--qos", "--reservation", "--export", "-w", "--nodelist"),
        *("-N", "--nodes", "-n", "--ntasks", "--wrap", "--parsable"),
    }
)


class SiteAccessError(ValueError):
    """A ``slurm`` key of the target file is unusable; the message names it."""


@dataclass(frozen=True)
class SiteAccess:
    """What the site requires of every job; empty when the target declares none of it."""

    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    extra_args: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[str, ...]:
        """The argv words every sbatch, srun and salloc of the run carries (before the check's own options)."""
        named = (("--account", self.account), ("--qos", self.qos), ("--reservation", self.reservation))
        return (*(f"{option}={value}" for option, value in named if value), *self.extra_args)

    def job_fields(self) -> dict[str, str]:
        """The same for a REST job description (slurmrestd's ``job`` object: ``account``, ``qos``,
        ``reservation``)."""
        fields = {"account": self.account, "qos": self.qos, "reservation": self.reservation}
        return {key: value for key, value in fields.items() if value}

    def document(self) -> dict[str, Any]:
        """The declared keys as the target file spells them (what :func:`parse_site_access` reads back)."""
        doc: dict[str, Any] = self.job_fields()
        if self.extra_args:
            doc["extra_args"] = list(self.extra_args)
        return doc


def slurm_document(
    partition: str, version: str | None, site: SiteAccess, busy_timeout: float | None = None, mpi: str | None = None
) -> dict[str, Any]:
    """A target file's ``slurm`` section: the partition, the site's access keys, the version a substrate installed,
    the busy budget when given and the MPI plugin when it is not the default (what parse_target reads back)."""
    optional = {"version": version, "busy_timeout": busy_timeout, "mpi": None if mpi == DEFAULT_MPI_PLUGIN else mpi}
    return {"partition": partition, **site.document(), **{k: v for k, v in optional.items() if v is not None}}


def parse_site_access(slurm: Mapping[str, Any] | None) -> SiteAccess:
    """The site access keys of a target's ``slurm`` section; :class:`SiteAccessError` names a bad one."""
    slurm = slurm or {}
    if not isinstance(slurm, Mapping):
        raise SiteAccessError("target.slurm must be a mapping")
    names = {key: _name(slurm, key) for key in ("account", "qos", "reservation")}
    return SiteAccess(**names, extra_args=_extra_args(slurm.get("extra_args")))


def _name(slurm: Mapping[str, Any], key: str) -> str | None:
    value = slurm.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise SiteAccessError(
            f"slurm.{key} {value!r} is refused: a Slurm name is 1-64 of A-Z a-z 0-9 _ . + - (not starting with -)"
        )
    return value


def _extra_args(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SiteAccessError("slurm.extra_args must be a list of strings, one option each (--name=value)")
    for item in value:
        if not OPTION_PATTERN.fullmatch(item):
            raise SiteAccessError(
                f"slurm.extra_args {item!r} is refused: each item is one option, --name[=value] or -X[value], "
                "on one line"
            )
        option = option_name(item)
        if option in OWN_OPTIONS or any(own.startswith(option) for own in OWN_OPTIONS if option.startswith("--")):
            # getopt_long takes an unambiguous prefix for the whole option: --acc=x is --account=x
            raise SiteAccessError(
                f"slurm.extra_args {item!r} is refused: the checks set {option} themselves"
                + (" (declare slurm.account, slurm.qos or slurm.reservation)" if _keyed(option) else "")
            )
    return tuple(value)


def option_name(arg: str) -> str:
    """The option an ``extra_args`` item sets: ``--constraint`` of ``--constraint=x``, ``-C`` of ``-Cx``."""
    return arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]


def _keyed(option: str) -> bool:
    return option in ("-A", "-q") or any(key.startswith(option) for key in ("--account", "--qos", "--reservation"))
