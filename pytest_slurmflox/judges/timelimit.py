"""When Slurm must end a job past its time limit, by the cluster's own configuration.

A TIMEOUT ending alone is not enough: a job that ran far past its limit (a controller that sweeps late, an
overtime nobody accounted for) FAILs. Slurm's rule, from its source (SchedMD/slurm):

- ``src/slurmctld/job_mgr.c`` ``job_time_limit``: a running job is timed out once its end time (start plus the time
  limit) is ``OverTimeLimit`` minutes in the past, the partition's ``OverTimeLimit`` when it sets one, else
  slurm.conf's (``UNLIMITED``: never); ``_job_timed_out`` then sets the job's end time to that moment;
- ``src/slurmctld/controller.c`` ``_slurmctld_background`` calls ``job_time_limit`` once every
  ``PERIODIC_TIMEOUT`` seconds (``src/slurmctld/slurmctld.h``: 30), a period no configuration changes.

So the job's elapsed time (EndTime - StartTime, as slurmctld recorded them) lies between the limit plus the
overtime and that plus one period; :data:`SWEEP_LAG` more is allowed for a loaded controller whose background loop
waits for the job write lock. The configured values are read where the cluster states them: ``scontrol show
config`` (``OverTimeLimit = N min`` or ``UNLIMITED``) and ``scontrol -o show partition`` (``OverTimeLimit=NONE``,
``N`` or ``UNLIMITED``), and named in the verdict.

The configured overtime is what Slurm does, never what it should do: a configured leniency is not a promise. It
is held to what the target declares (``expect.limits.over_time_limit``, model/declaredlimits.py; Slurm's default
0 where the target is silent) by :meth:`Enforcement.loosened`: more than declared, or ``UNLIMITED``, FAILs naming
the configured and the declared value side by side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..model.declaredlimits import DeclaredLimits

#: slurmctld's time-limit sweep period in seconds (src/slurmctld/slurmctld.h ``PERIODIC_TIMEOUT``).
PERIODIC_TIMEOUT = 30.0
#: How much later than its period a loaded controller's sweep may come (it waits for the job write lock).
SWEEP_LAG = 30.0
#: Slurm's clocks count whole seconds: a job's recorded start and end may each be rounded.
ROUNDING = 2.0

_MINUTES = re.compile(r"^(\d+)(?:\s*min)?$")


@dataclass(frozen=True)
class Enforcement:
    """How this cluster enforces a time limit: the overtime in minutes (None: ``UNLIMITED``, never enforced) and
    where each value was read."""

    over_time: int | None
    shown: str  #: the configured values as the cluster states them, for the verdict and the evidence

    def loosened(self, declared: DeclaredLimits) -> str | None:
        """None when the cluster ends a job past its limit no later than the target declares; else what it
        configures against what is declared (``UNLIMITED``: never ended at all)."""
        promise = declared.shown("over_time_limit")
        if self.over_time is None:
            return f"the cluster never ends a job at its time limit: OverTimeLimit=UNLIMITED ({self.shown}); {promise}"
        if self.over_time > declared.over_time_limit:
            return (
                f"the cluster lets a job run {self.over_time} min past its time limit, more than the "
                f"{declared.over_time_limit} min the target promises: configured {self.shown}; {promise}"
            )
        return None

    def window(self, limit_minutes: int) -> tuple[float, float]:
        """(earliest, latest) elapsed seconds at which Slurm ends a job with this limit (needs an overtime)."""
        if self.over_time is None:
            raise ValueError("OverTimeLimit=UNLIMITED: Slurm never ends a job at its time limit")
        earliest = (limit_minutes + self.over_time) * 60.0
        return earliest, earliest + PERIODIC_TIMEOUT + SWEEP_LAG

    def problem(self, limit_minutes: int, start: float, end: float) -> str | None:
        """None when the job (started, ended: epoch seconds) ended inside :meth:`window`, else what is wrong."""
        earliest, latest = self.window(limit_minutes)
        elapsed = end - start
        if elapsed < earliest - ROUNDING:
            return f"ended after {elapsed:.0f} s, before its limit plus overtime ({earliest:.0f} s; {self.shown})"
        if elapsed > latest + ROUNDING:
            return (
                f"ran {elapsed:.0f} s, past its limit plus overtime plus one enforcement period and a loaded "
                f"controller's lag ({latest:.0f} s; {self.shown})"
            )
        return None


def _minutes(value: str) -> int | None:
    """``0 min``, ``3`` -> minutes; ``UNLIMITED`` -> None. Anything else is refused."""
    if value.upper() == "UNLIMITED":
        return None
    found = _MINUTES.match(value.strip())
    if not found:
        raise ValueError(f"OverTimeLimit {value!r} is neither minutes nor UNLIMITED")
    return int(found.group(1))


def enforcement(config: Mapping[str, str], partition: Mapping[str, str]) -> Enforcement:
    """The enforcement of the cluster whose ``scontrol show config`` (key -> value) and ``scontrol -o show
    partition`` line (key -> value) are given: the partition's OverTimeLimit when it sets one, else slurm.conf's
    (Slurm's default, 0, when the configuration does not show the key)."""
    cluster = config.get("OverTimeLimit", "")
    own = partition.get("OverTimeLimit", "NONE")
    name = partition.get("PartitionName", "?")
    shown = (
        f"slurm.conf OverTimeLimit={cluster or '(not shown: 0)'}, partition {name} OverTimeLimit={own}, "
        f"enforced every {PERIODIC_TIMEOUT:.0f} s"
    )
    if own.upper() != "NONE":
        return Enforcement(_minutes(own), shown)
    return Enforcement(_minutes(cluster) if cluster else 0, shown)
