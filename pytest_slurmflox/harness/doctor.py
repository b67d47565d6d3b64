"""The doctor (``--slurmflox-check-target=FILE``): before a run, what a run against this target file would do.

Contract of :func:`doctor`: the file is read against the schema (a mistake: one line, exit 4, no connection); the
cluster is connected once (connection.py, which also asks accounting, REST and the directory) and asked what it has
with read-only commands only (:data:`FACTS`: nothing is submitted to the queue); then one line per group: RUN,
NOT APPLICABLE (the profile's reason), SKIP or FAIL (a declared capability that does not answer: the cluster
contradicts the file) or NOT RUN (keys the file does not declare, or the login unreachable). The verdict rules are
the suites' own (profiles.py, declared.py, gates.DECLARED_BY). On a target with a reachable Kubernetes API it also
shows, read-only, the NodeSet, its pods matched to ``sinfo``, the RuntimeClass, the pool's nodes and what the run may
do (kubedoctor.py). Exit 0 when every required group would run, the declared NodeSet exists and ``srun`` offers
the declared MPI plugin (``slurm.mpi``), else 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..model.groups import CAPABILITY_GROUPS, GROUPS

if TYPE_CHECKING:
    from ..base.run import Runner
    from ..reporting.profiles import Profile
    from .connection import Target

#: What the cluster is asked, read-only: label -> command on the login endpoint.
FACTS: dict[str, str] = {
    "slurm": "scontrol --version",
    "partitions": "sinfo -h -o '%P %a %D %T'",
    "nodes": "sinfo -h -N -o '%N %P %T'",
    "mpi": "srun --mpi=list 2>&1",  # whole: a site's login may print before Slurm's header (mpiplugins.py)
    "task prolog": "scontrol show config | grep -E '^TaskProlog '",
}


@dataclass(frozen=True)
class GroupLine:
    """One group's foreseen outcome and why."""

    group: str
    verdict: str
    why: str
    required: bool


def foresee(target: Target, profile: Profile, undeclared: dict[str, list[str]]) -> list[GroupLine]:
    """Each non-destructive group's foreseen outcome on a connected ``target`` (connection.Target)."""
    from ..cluster.gates import DECLARED_BY
    from ..model.groups import DESTRUCTIVE_GROUPS

    required = set(profile.required())
    lines = []
    for group in (g for g in GROUPS if g not in DESTRUCTIVE_GROUPS and g != "TW"):
        verdict, why = "RUN", "everything it needs is declared and answers"
        cap = CAPABILITY_GROUPS.get(group)
        if group in profile.groups:
            verdict, why = "NOT APPLICABLE", profile.groups[group]
        elif target.unreachable:
            verdict, why = "NOT RUN", "the login is unreachable (above)"
        elif slurm_missing := target.why_missing("slurm"):
            verdict, why = "FAIL", slurm_missing
        elif cap and (cap_missing := target.why_missing(cap)):
            declared = DECLARED_BY[cap](target.spec)
            verdict = "FAIL" if declared else "SKIP"
            why = (f"{cap} declared, but the cluster contradicts it: " if declared else "") + cap_missing
        elif undeclared.get(group):
            verdict, why = "NOT RUN", "the target file does not declare " + ", ".join(undeclared[group])
        lines.append(GroupLine(group, verdict, why, group in required))
    return lines


def answers(login: Runner, facts: dict[str, str]) -> dict[str, tuple[bool, str]]:
    """Each of ``facts`` (label -> read-only command) asked once on ``login``: label -> (answered, its stdout or
    why there is no answer)."""
    out: dict[str, tuple[bool, str]] = {}
    for label, command in facts.items():
        try:
            res = login.run(command, timeout=15)
            out[label] = (res.ok, res.stdout.strip() if res.ok else f"(no answer: {res.describe(200)})")
        except Exception as exc:
            out[label] = (False, f"(no answer: {exc})")
    return out


def show(found: dict[str, tuple[bool, str]], say: Callable[[str], None], prefix: str = "  ") -> None:
    """Print each answer of :func:`answers`, at most 8 lines a label."""
    for label, (_, text) in found.items():
        rows = text.splitlines() or ["(none)"]
        say(f"{prefix}{label:<12} {rows[0]}")
        for row in rows[1:8]:
            say(f"{prefix}{'':<12} {row}")
        if len(rows) > 8:
            say(f"{prefix}{'':<12} ... and {len(rows) - 8} more")


def mpi_blocking(target: Target, found: dict[str, tuple[bool, str]], say: Callable[[str], None]) -> list[str]:
    """``["T6"]`` when the cluster answered and ``srun --mpi=list`` does not offer the declared ``slurm.mpi``: T6
    would FAIL, so sign-off is not reachable (said in one line naming both); else nothing."""
    from ..judges.mpiplugins import offered_plugins

    answered, text = found.get("mpi", (False, ""))
    if not answered:
        return []
    offered = offered_plugins(text)
    if target.spec.mpi in offered:
        return []
    say(f"  T6 would FAIL: slurm.mpi {target.spec.mpi} is not among the MPI plugins srun offers: {', '.join(offered)}")
    return ["T6"]


def kubernetes(target: Target, found: dict[str, tuple[bool, str]], say: Callable[[str], None]) -> list[str]:
    """The Kubernetes side (kubedoctor.py), when the target has a reachable API: printed under ``kubernetes``;
    returns what blocks a run (a missing NodeSet, named)."""
    if target.kube is None or target.why_missing("kubernetes") is not None:
        return []
    from .kubedoctor import ask_kubernetes

    ok, text = found.get("nodes", (False, ""))
    slurm_nodes = [row.split()[0] for row in text.splitlines() if row.split()] if ok else []
    facts = ask_kubernetes(target, slurm_nodes)
    for i, line in enumerate(facts.lines):
        say(f"  {'kubernetes' if i == 0 else '':<12} {line}")
    return facts.blocking


def doctor(path: Path, say: Callable[[str], None] = print) -> int:
    """Check the target file at ``path`` against the cluster it names; the exit status (see the module)."""
    from ..model.declared import undeclared
    from ..model.target import TargetError, load_target
    from ..reporting.profiles import profile_of
    from .connection import connect

    t0 = time.monotonic()
    try:
        spec = load_target(path)
    except TargetError as exc:
        say(f"slurmflox: target file {path}: {exc}")
        return pytest.ExitCode.USAGE_ERROR
    profile = profile_of(spec)
    say(f"slurmflox doctor: target {spec.name!r} ({path}), profile {profile.name}")
    target = connect(spec)
    blocked: list[str] = []
    try:
        found: dict[str, tuple[bool, str]] = {}
        if target.unreachable is None:
            found = answers(target.login, FACTS)
            show(found, say)
        else:
            say(f"  {target.unreachable}")
        blocked = kubernetes(target, found, say) + mpi_blocking(target, found, say)
        lines = foresee(target, profile, undeclared(spec) if spec.declared is not None else {})
    finally:
        target.close()
    for line in lines:
        mark = "*" if line.required else " "
        say(f"{mark}{line.group:<5} {line.verdict:<14} {' '.join(line.why.split())[:400]}")  # one line each
    blocking = [g.group for g in lines if g.required and g.verdict != "RUN"] + blocked
    verdict = f"NOT reachable (blocked: {', '.join(blocking)})" if blocking else "reachable"
    say(f"sign-off {verdict}; * = required group; {time.monotonic() - t0:.1f}s")
    return pytest.ExitCode.TESTS_FAILED if blocking else pytest.ExitCode.OK
