"""The declared reservation (``slurm.reservation``): with one, the cohort is the reservation's nodes.

Why: an acceptance run on a production cluster normally runs inside an admin reservation (that is how a platform
team makes room on a busy cluster). Every job of the run carries ``--reservation`` (submit.Jobs), so Slurm
places it on those nodes only; the cohort the checks judge and reach must be the same nodes, or a per-worker check
would wait for a worker its jobs may never use.

Where the nodes come from: Slurm's own record of the reservation (``scontrol -o show reservation <name>``, its
``Nodes=`` expanded by ``scontrol show hostnames``), never the target file. A declared reservation Slurm does not
have, or one that is not active, is a problem of the cohort (declared but broken: FAIL), naming it.

A node in an active reservation reads ``reserved`` in ``sinfo`` when idle, and carries the ``$`` flag when the
reservation is a maintenance one: inside our own reservation both mean it serves us, so :meth:`Reserved.state`
reads them as the node's state outside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_slurmflox.base.run import Result, quoted


@dataclass(frozen=True)
class Reserved:
    """A declared reservation as Slurm has it: its nodes, what is wrong with it, and the evidence."""

    name: str
    nodes: frozenset[str]
    problems: list[str] = field(default_factory=list)
    evidence: list[Result] = field(default_factory=list)

    @staticmethod
    def state(state: str) -> str:
        """``state`` (sinfo ``%T``) of a node of this reservation as it reads outside it: ``reserved`` is ``idle``,
        the maintenance flag ``$`` is dropped."""
        base = "idle" + state[len("reserved") :] if state.startswith("reserved") else state
        return base.replace("$", "")


def reservation(target) -> Reserved | None:
    """The target's declared reservation as Slurm has it; None when the target declares none."""
    name = target.spec.site.reservation
    if not name:
        return None
    shown = target.login.run(quoted("scontrol -o show reservation %s", name), timeout=30)
    record = next((line for line in shown.stdout.splitlines() if f"ReservationName={name} " in line + " "), "")
    if not shown.ok or not record:
        return Reserved(name, frozenset(), [f"slurm.reservation {name}: Slurm has no such reservation"], [shown])
    fields = dict(re.findall(r"(\w+)=(\S*)", record))
    problems = []
    if fields.get("State", "ACTIVE").upper() != "ACTIVE":
        problems.append(
            f"slurm.reservation {name} is not active (State={fields.get('State')}, StartTime={fields.get('StartTime')})"
        )
    hostlist = fields.get("Nodes", "")
    if not hostlist or hostlist == "(null)":
        return Reserved(name, frozenset(), [*problems, f"slurm.reservation {name} holds no node"], [shown])
    expanded = target.login.run(quoted("scontrol show hostnames %s", hostlist), timeout=30)
    if not expanded.ok:
        problems.append(f"slurm.reservation {name}: its node list {hostlist} did not expand")
    return Reserved(name, frozenset(expanded.stdout.split()), problems, [shown, expanded])
