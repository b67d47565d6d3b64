"""Declared limits: the target file's ``expect.limits``, how far the site promises its cluster loosens a job's limits.

Why: a configured leniency is not a promise. The cluster under test can loosen what a job asks for (slurm.conf's or
a partition's ``OverTimeLimit`` lets a job run past its ``--time``; cgroup.conf's ``AllowedRAMSpace`` above 100%,
``AllowedSwapSpace``, or swap left unconstrained let a task hold more than its ``--mem``). Read from that cluster,
such a value would be the expectation of the very thing it loosens, and any job would PASS. So T7 and T8 take the
expectation from here: what the target file declares, and where it is silent Slurm's own defaults, which loosen
nothing (slurm.conf(5) ``OverTimeLimit`` 0; cgroup.conf(5) ``AllowedRAMSpace`` 100, ``AllowedSwapSpace`` 0), and
a task's ``--mem`` holding its RAM and swap together. The cluster may be stricter than declared, never looser:
looser is a FAIL naming the configured and the declared value side by side.

Section (every key optional)::

    expect:
      limits:
        over_time_limit: 8          # minutes a job may run past its time limit (slurm.conf OverTimeLimit)
        allowed_ram_space: 1000     # percent of --mem a task may hold in RAM (cgroup.conf AllowedRAMSpace)
        allowed_swap_space: 50      # percent of --mem a task may hold in swap beyond that (AllowedSwapSpace)
        constrain_swap_space: false # false: swap is not limited, a task beyond its RAM limit may swap
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Each key with Slurm's default: what a target that is silent is held to.
DEFAULTS: Mapping[str, Any] = {
    "over_time_limit": 0,
    "allowed_ram_space": 100.0,
    "allowed_swap_space": 0.0,
    "constrain_swap_space": True,
}


@dataclass(frozen=True)
class DeclaredLimits:
    """How far a job's limits may be loosened, as the target declares (Slurm's defaults for what it does not)."""

    over_time_limit: int = 0  #: minutes past ``--time`` a job may run
    allowed_ram_space: float = 100.0  #: percent of ``--mem`` a task may hold in RAM
    allowed_swap_space: float = 0.0  #: percent of ``--mem`` a task may hold in swap beyond its RAM
    constrain_swap_space: bool = True  #: False: the site declares swap unlimited
    given: frozenset[str] = frozenset()  #: the keys the target file gives

    def shown(self, key: str) -> str:
        """``expect.limits.<key>=<value>`` when declared, else the default and that the target is silent."""
        value = getattr(self, key)
        text = str(value).lower() if isinstance(value, bool) else f"{value:g}"
        if key in self.given:
            return f"declared expect.limits.{key}={text}"
        return f"not declared (expect.limits.{key}; Slurm's default {text} holds)"


def parse_limits(doc: Any) -> DeclaredLimits:
    """``expect.limits`` (None or a mapping the schema checked) -> :class:`DeclaredLimits`."""
    if not doc:
        return DeclaredLimits()
    if not isinstance(doc, Mapping):
        raise ValueError("expect.limits must be a mapping")
    given = {str(k): v for k, v in doc.items() if v is not None}
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"expect.limits.{unknown[0]} is not a known limit (known: {', '.join(DEFAULTS)})")
    values: dict[str, Any] = {}
    for key, value in given.items():
        kind = type(DEFAULTS[key])
        ok = (
            isinstance(value, bool) if kind is bool else isinstance(value, (int, float)) and not isinstance(value, bool)
        )
        if not ok or (kind is not bool and value < 0) or (kind is int and value != int(value)):
            raise ValueError(f"expect.limits.{key}: {value!r} is not {_WORDS[kind]}")
        values[key] = kind(value)
    return DeclaredLimits(**values, given=frozenset(given))


_WORDS = {int: "whole minutes (0 or more)", float: "a percent (0 or more)", bool: "true or false"}


def limits_document(limits: DeclaredLimits) -> dict[str, Any] | None:
    """The ``expect.limits`` section :func:`parse_limits` reads back into ``limits`` (None: nothing declared)."""
    if not limits.given:
        return None
    return {key: getattr(limits, key) for key in DEFAULTS if key in limits.given}
