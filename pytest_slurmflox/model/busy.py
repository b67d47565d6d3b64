"""Busy is not broken: what holds a worker, by Slurm's own word, and how long a run waits for it.

Why: a production cluster is never idle. A step that needs every worker cannot start while another user's job holds
one of them, and that worker is serving, not broken. What tells the two apart is Slurm's node state and reason
(``sinfo %T|%E``: ALLOCATED, MIXED, COMPLETING serve; DOWN, DRAIN, NOT_RESPONDING, FAIL, INVALID_REG do not) and
the jobs Slurm runs there (``squeue -w``), never how long a step took. A step waits for a worker other jobs hold
within the run's declared budget (:data:`DEFAULT_BUSY_TIMEOUT`, target key ``slurm.busy_timeout``, option
``--slurmflox-busy-timeout``); past it, the checks that needed that worker are NOT RUN naming it and what holds it.

One look is one command on the login node (:func:`look_command`): the nodes' states and reasons, then the jobs on
each node, never a command per node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..base.run import quoted

#: Base states of a worker that serves (sinfo ``%T``, lower case).
SERVING = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
#: State flags of a node that does not serve (sinfo(1), NODE STATE CODES): not responding, powered off, powering
#: up, powering down, in a maintenance reservation, pending power down.
NOT_SERVING_FLAGS = "*~#%$!"
#: Flags that leave a serving node serving: reboot pending or issued (it still runs jobs until then), planned.
_HARMLESS_FLAGS = "@^-"
#: Seconds a step that needs every worker waits for workers other jobs hold (the reference's default).
DEFAULT_BUSY_TIMEOUT = 600.0
#: Node base states (``sinfo %T``, lower case) of a worker that runs jobs: it serves, and it may be held.
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
#: Job states that hold a node's resources (``squeue -t``): running, completing, configuring, suspended.
HOLDING = "R,CG,CF,S"
#: What srun prints when its allocation waits in the queue, and once it is granted (src/srun/libsrun/allocate.c).
_QUEUED = re.compile(r"srun: job (\d+) queued and waiting for resources")
_GRANTED = "has been allocated resources"
#: An end time Slurm gives a job without a time limit (``%e``).
_NO_END = frozenset({"", "NONE", "N/A", "Unknown"})


def serving(state: str) -> bool:
    """Whether a node in sinfo state ``state`` (``idle``, ``idle*``, ``mixed~``, ``idle+drain``) serves: DOWN,
    DRAIN, FAIL, INVALID_REG, NOT_RESPONDING (``*``) and the like do not, whoever runs jobs there."""
    state = state.strip().lower()
    if any(flag in state for flag in NOT_SERVING_FLAGS):
        return False
    parts = state.rstrip(_HARMLESS_FLAGS).split("+")
    return parts[0] in SERVING and all(p in SERVING for p in parts[1:])


def busy(state: str) -> bool:
    """Whether a node in sinfo state ``state`` serves and runs jobs (ALLOCATED, MIXED, COMPLETING)."""
    return serving(state) and state.strip().lower().rstrip(_HARMLESS_FLAGS).split("+")[0] in BUSY_STATES


def parse_busy_timeout(value: object, source: str = "slurm.busy_timeout") -> float:
    """Seconds from a target key or an option (a number >= 0); a ValueError naming ``source`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{source}: expected seconds (a number >= 0), not {value!r}")
    try:
        seconds = float(str(value).strip())
    except ValueError:
        raise ValueError(f"{source}: expected seconds (a number >= 0), not {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{source}: expected seconds (a number >= 0), not {value!r}")
    return seconds


def resolve_busy_timeout(option: object, declared: float | None) -> float:
    """The run's budget: the option (CLI > env > ini) when given, else the target file's ``slurm.busy_timeout``,
    else :data:`DEFAULT_BUSY_TIMEOUT`."""
    if option not in (None, ""):
        return parse_busy_timeout(option, "--slurmflox-busy-timeout")
    return DEFAULT_BUSY_TIMEOUT if declared is None else declared


def queued_job(text: str) -> str | None:
    """The id of an srun allocation that waited in the queue and was never granted (srun's own lines), else None: a
    step that got its nodes and then printed nothing says nothing about busy workers."""
    found = _QUEUED.search(text)
    return found.group(1) if found and _GRANTED not in text else None


@dataclass(frozen=True)
class Holder:
    """A job Slurm runs on a node: its id, user, name and expected end (``%e``)."""

    job_id: str
    user: str
    name: str
    end: str

    def describe(self) -> str:
        end = "no expected end: no time limit" if self.end in _NO_END else f"expected end {self.end}"
        return f"job {self.job_id} of user {self.user} ({self.name}, {end})"


@dataclass(frozen=True)
class Look:
    """One look at some nodes: each node's (state, reason), the jobs that hold it that are not the run's own, and
    the nodes where Slurm shows the run's own jobs."""

    states: Mapping[str, tuple[str, str]]
    holders: Mapping[str, tuple[Holder, ...]] = field(default_factory=dict)
    own: frozenset[str] = frozenset()

    @property
    def broken(self) -> list[str]:
        """Nodes whose state says they do not serve (:func:`serving`), or that Slurm did not list."""
        return sorted(n for n, (state, _) in self.states.items() if not state or not serving(state))

    @property
    def held(self) -> dict[str, tuple[Holder, ...]]:
        """Nodes other jobs hold, in a state that runs jobs (ALLOCATED, MIXED, COMPLETING). A node Slurm says runs
        jobs but shows none of (``PrivateData=jobs`` hides other users' jobs from the login user) is held too, by
        jobs unnamed (an empty tuple)."""
        return {
            node: self.holders.get(node, ())
            for node, (state, _) in sorted(self.states.items())
            if busy(state) and (self.holders.get(node) or node not in self.own)
        }

    def describe(self) -> str:
        """``worker1 (state allocated) is held by job 7 of user root (hold, no expected end: no time limit)``."""
        parts = []
        for node, jobs in self.held.items():
            state, reason = self.states[node]
            why = f", reason {reason}" if reason and reason != "none" else ""
            named = ", ".join(j.describe() for j in jobs) or "jobs Slurm does not show this user (PrivateData)"
            parts.append(f"{node} (state {state}{why}) is held by {named}")
        return "; ".join(parts)


def look_command(partition: str, nodes: Iterable[str]) -> str:
    """One login command: ``@state|node|state|reason`` per node, then ``@job|node|id|user|end|name`` per job that
    holds each node (``squeue -w`` per node, so no hostlist needs expanding)."""
    names = sorted(nodes)
    states = quoted("sinfo -h -N -p %s -n %s -o '@state|%%N|%%T|%%E'", partition, ",".join(names))
    words = " ".join(quoted("%s", name) for name in names)
    jobs = quoted('squeue -h -w "$n" -t %s -o "@job|$n|%%i|%%u|%%e|%%j"', HOLDING)
    return f"{states}; for n in {words}; do {jobs}; done"


def parse_look(text: str, nodes: Iterable[str], own_prefix: str) -> Look:
    """:func:`look_command`'s answer; a job whose name starts with ``own_prefix`` (the run's ``sfx-<run id>-``) is
    the run's own and holds nothing here."""
    states = {node: ("", "") for node in nodes}
    holders: dict[str, list[Holder]] = {}
    own: set[str] = set()
    for line in text.splitlines():
        kind, _, rest = line.strip().partition("|")
        parts = rest.split("|")
        if kind == "@state" and len(parts) == 3 and parts[0] in states:
            states[parts[0]] = (parts[1].strip().lower(), parts[2].strip())
        elif kind == "@job" and len(parts) >= 5 and parts[0] in states:
            name = "|".join(parts[4:])
            if name.startswith(own_prefix):
                own.add(parts[0])
            else:
                holders.setdefault(parts[0], []).append(Holder(parts[1], parts[2], name, parts[3]))
    return Look(states, {node: tuple(jobs) for node, jobs in holders.items()}, frozenset(own))
