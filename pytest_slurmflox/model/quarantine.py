"""Quarantine, pure: which workers a run drains, the share rule, the drain reason and reading it back, which re-tested
workers resume.

Why a share: one bad worker among 64 is a worker's fault, and draining it hands the rest over; a FAIL that names
most of the cohort is the cluster's fault (a TaskProlog every worker runs, a broken image), and draining them would
take the cluster down in the name of a check. :func:`share_limit` bounds what a run may drain; a run whose
per-worker FAILs name more drains nothing and says why.

Why the reason carries the run: Slurm keeps a drained node's reason (``scontrol update nodename=X state=DRAIN
reason=...``; Slinky mirrors the drain on the pod), and that reason is the only record a later run reads. A reason
that starts ``slurmflox <run id>: `` is ours (:func:`drained_by`); any other drain is someone else's and is never
resumed.

Where the workers come from: a check that FAILs a per-worker requirement names each worker with its one line
(suites/_capability.py, carried on the check's report as :data:`FAILED_WORKERS`); never a worker that was only
NOT RUN, SKIPped or waited for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: The report property a check that FAILed a per-worker requirement carries: JSON ``{worker: one line}``.
FAILED_WORKERS = "slurmflox_failed_workers"
#: The report property a check carries when the cohort it ran on left out workers this tool quarantined: JSON
#: ``{worker: Slurm's reason}``.
QUARANTINED = "slurmflox_quarantined"
#: Every drain reason this tool writes starts with this word.
PREFIX = "slurmflox "
#: The default share of the cohort a run may drain.
DEFAULT_SHARE = 0.25
#: ``--slurmflox-retest=quarantined``: every worker this tool drained, as Slurm's reasons say.
EVERY_QUARANTINED = "quarantined"
#: A drain reason's one line is cut to this many characters (Slurm keeps the reason whole; people read it in sinfo).
LINE = 160
_OURS = re.compile(r"^slurmflox ([A-Za-z0-9][A-Za-z0-9._-]{0,63}): ")


@dataclass(frozen=True)
class WorkerFailure:
    """One worker a FAILed per-worker requirement named: the check (group, test name) and what it missed there."""

    worker: str
    group: str
    check: str
    what: str


@dataclass(frozen=True)
class NodeRecord:
    """A node as Slurm lists it: its state (``sinfo %T``, lower case) and its reason (``%E``)."""

    state: str
    reason: str = ""

    @property
    def drained(self) -> bool:
        """DRAIN, DRAINING, DRAINED (``idle+drain``, ``drained``, ``draining``): taken out by someone."""
        return "drain" in self.state


def one_line(text: str, limit: int = LINE) -> str:
    """``text`` on one line, whitespace collapsed, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def drain_reason(run_id: str, failure: WorkerFailure) -> str:
    """``slurmflox <run id>: <group> <check>: <one line>``: what Slurm keeps on the drained node."""
    return f"{PREFIX}{run_id}: {failure.group} {failure.check}: {one_line(failure.what)}"


def drained_by(reason: str) -> str | None:
    """The run id of a reason this tool wrote, else None (another operator's drain, or none)."""
    found = _OURS.match(reason.strip())
    return found.group(1) if found else None


def share_limit(cohort: int, share: float) -> int:
    """How many workers of a cohort of ``cohort`` a run may drain: ``share`` of it rounded down, at least one, and
    always fewer than the whole cohort (a cohort of one is never drained: the fault is then the cluster's)."""
    if cohort < 2:
        return 0
    return min(cohort - 1, max(1, math.floor(share * cohort + 1e-9)))


def parse_share(text: str) -> float:
    """A share in (0, 1]; ValueError naming the rule otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{text!r} is not a share of the cohort in (0, 1]")
    return value


@dataclass(frozen=True)
class Plan:
    """What a run drains (worker -> reason), which named workers it leaves as they are (drained already: worker
    -> the reason they carry) and, when it drains nothing although workers were named, why (``refused``)."""

    drain: dict[str, str] = field(default_factory=dict)
    already: dict[str, str] = field(default_factory=dict)
    refused: str = ""
    named: tuple[str, ...] = ()


def plan(run_id: str, failures: Iterable[WorkerFailure], nodes: Mapping[str, NodeRecord], share: float) -> Plan:
    """The drains of a run whose per-worker FAILs are ``failures``, over the cohort ``nodes`` (the partition's
    nodes as Slurm lists them). Each worker is drained once, with its first failure's reason; a worker already
    drained (by anyone) is left as it is; a named worker not in ``nodes`` is not touched. When the workers named
    exceed :func:`share_limit`, nothing is drained and ``refused`` says so."""
    first: dict[str, WorkerFailure] = {}
    for failure in failures:
        if failure.worker in nodes:
            first.setdefault(failure.worker, failure)
    named = tuple(sorted(first))
    if not named:
        return Plan()
    limit = share_limit(len(nodes), share)
    if len(named) > limit:
        refused = (
            f"quarantine refused: the per-worker FAILs name {len(named)} of {len(nodes)} workers "
            f"({', '.join(named)}), more than the share {share:g} allows ({limit}): a cluster fault, not a worker's; "
            "nothing drained"
        )
        return Plan(refused=refused, named=named)
    already = {w: nodes[w].reason for w in named if nodes[w].drained}
    drain = {w: drain_reason(run_id, first[w]) for w in named if w not in already}
    return Plan(drain=drain, already=already, named=named)


def quarantined(nodes: Mapping[str, NodeRecord]) -> dict[str, str]:
    """The nodes drained by this tool (a reason :func:`drained_by` reads): node -> reason."""
    return {n: r.reason for n, r in sorted(nodes.items()) if r.drained and drained_by(r.reason)}


def retest_set(value: str, nodes: Mapping[str, NodeRecord]) -> tuple[dict[str, str], dict[str, str]]:
    """The workers ``--slurmflox-retest`` names (``worker2,worker7`` or ``quarantined``), split into those it
    re-tests (worker -> Slurm's reason, "" when not drained) and those it leaves alone (worker -> why: unknown to
    Slurm, or drained by someone else, which is never resumed)."""
    if value.strip() == EVERY_QUARANTINED:
        return quarantined(nodes), {}
    tested: dict[str, str] = {}
    left: dict[str, str] = {}
    for name in sorted({w.strip() for w in value.split(",") if w.strip()}):
        record = nodes.get(name)
        if record is None:
            left[name] = "not a node of the partition"
        elif record.drained and not drained_by(record.reason):
            left[name] = f"drained by someone else (reason {record.reason!r}): never resumed by this tool"
        else:
            tested[name] = record.reason if record.drained else ""
    return tested, left


def to_resume(tested: Iterable[str], failed: Mapping[str, str], blocked: str) -> dict[str, str | None]:
    """For each re-tested worker, None when it may resume (no FAIL named it and nothing blocked the whole run),
    else why not: the first FAIL that named it, or ``blocked`` (a check that did not PASS without naming a worker:
    a FAIL of the whole step, a SKIP, a NOT RUN, or no check at all)."""
    return {w: failed.get(w) or (blocked or None) for w in sorted(tested)}


#: What the run did to a worker (:class:`Action`): drained it, resumed it after its re-test, drained it again
#: after a re-test that did not pass, or left it as it was.
DRAINED, RESUMED, DRAINED_AGAIN, LEFT = "drained", "resumed", "drained again", "left as it was"


@dataclass(frozen=True)
class Action:
    """One thing the run did (or deliberately did not do) to a worker, when, and the reason Slurm keeps."""

    worker: str
    action: str
    reason: str
    run_id: str
    at: float

    def as_dict(self) -> dict[str, object]:
        return {
            "worker": self.worker,
            "action": self.action,
            "reason": self.reason,
            "run_id": self.run_id,
            "at": self.at,
        }

    @property
    def line(self) -> str:
        return f"{self.worker} {self.action} by run {self.run_id}: {self.reason}"


@dataclass
class Outcome:
    """What quarantine and re-test did in a run: the actions, and what they declined (``refused``: the share was
    exceeded, no admin endpoint, Slurm did not answer), said in one line each."""

    actions: list[Action] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def of(self, action: str) -> list[Action]:
        return [a for a in self.actions if a.action == action]

    def as_dict(self) -> dict[str, object]:
        return {"actions": [a.as_dict() for a in self.actions], "refused": list(self.refused)}


def parse_nodes(text: str) -> dict[str, NodeRecord]:
    """``sinfo -h -N -o '%N|%T|%E'`` as node -> record (the reason last: it may hold ``|``); a line without two
    ``|`` (a banner) is not a node."""
    nodes: dict[str, NodeRecord] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0]:
            reason = parts[2].strip()
            nodes[parts[0]] = NodeRecord(parts[1].strip().lower(), "" if reason == "none" else reason)
    return nodes


@dataclass(frozen=True)
class Retest:
    """A re-test run's reservation (its name; every job of the run goes there) and the workers it re-tests
    (worker -> the reason Slurm had on it before, "" when it was not drained)."""

    reservation: str
    tested: Mapping[str, str]
