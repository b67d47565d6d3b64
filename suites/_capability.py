"""How a check stops when what it needs is not there or not met, and always naming what decided it.

Why these live together: a check ends early in exactly three ways and each must say why in its report. A capability
the target lacks is the plugin's one gate (:func:`pytest_slurmflox.cluster.gates.require`: SKIP when not had at all,
FAIL
when declared but not answering); an expectation a customer's target file does not declare is NOT RUN naming the
key (:func:`declared`); a limitation the target file declares is a SKIP naming it (:func:`require_enforced`).
Everything else is a :func:`requirement` that FAILs with the evidence that decided it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.cluster.gates import require


def declared_nodeset(target) -> dict:
    """The NodeSet the target file names; FAIL (not SKIP) when it is declared but the API does not have it."""
    require(target, "kubernetes")
    name = target.spec.kubernetes.nodeset
    nodeset = target.kube.nodeset(name)
    requirement(
        nodeset is not None,
        f"declared NodeSet {name} exists in namespace {target.spec.kubernetes.namespace}",
        f"the Kubernetes API has no NodeSet {name}",
    )
    return nodeset


def require_enforced(target, limit: str) -> None:
    """SKIP, naming the limitation, if the target file declares that it cannot enforce ``limit``.

    A target file may carry ``limitations: {<limit>: <why>}`` (the local substrate writes one for each cgroup
    controller this host does not let it use): the check then reports that limitation instead of passing.
    """
    declared = target.spec.limitations.get(limit)
    if declared:
        pytest.skip(f"missing capability {limit}: {declared}")


def declared(target, *keys: str) -> None:
    """NOT RUN, naming the keys, when a customer target (substrate existing) does not declare an expectation the
    check needs: the reference's defaults describe clusters we provision, never a customer's. ``keys``
    are target-file paths of pytest_slurmflox.model.declared (``expect.settings.WORKER_CPUS``, ``identity.uid``); the
    group's row of ``declared.GROUP_KEYS`` lists them (tests/unit/test_declared.py keeps the two equal)."""
    from pytest_slurmflox.model.declared import missing
    from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

    absent = missing(target.spec.declared, keys)
    if absent:
        pytest.skip(
            f"{NOT_RUN_PREFIX}the target file does not declare {', '.join(absent)} (target {target.spec.name!r})"
        )


def requirement(ok: bool, requirement: str, *evidence: Result | str) -> None:
    """Assert a requirement; the failure names it and shows the evidence that decided it."""
    if ok:
        return
    pytest.fail(unmet(requirement, *evidence), pytrace=False)


def unmet(requirement: str, *evidence: Result | str) -> str:
    """A failed requirement's text: what was required, then the evidence that decided it (a verdict recorded for
    the run's other processes carries this text, pytest_slurmflox/model/runrecord.py)."""
    shown = "\n".join(e.describe() if isinstance(e, Result) else str(e) for e in evidence)
    return f"requirement not met: {requirement}\n{shown}"


@dataclass
class EveryWorker:
    """A requirement judged on every worker before it FAILs: each worker's unmet parts are collected
    (:meth:`holds`) and :meth:`settle` FAILs once, naming every worker that missed one. The worker that breaks is
    rarely the first; a check that stops at the first names one worker and hides the rest."""

    what: str
    unmet_parts: list[str] = field(default_factory=list)

    def holds(self, ok: bool, part: str) -> bool:
        """Record ``part`` (``"<worker>: <what it must show>"``) as unmet unless ``ok``; return ``ok``, so a
        worker's later parts that depend on this one can be passed over."""
        if not ok:
            self.unmet_parts.append(part)
        return ok

    def settle(self, *evidence: Result | str) -> None:
        """FAIL naming :attr:`what` and every unmet part, with the evidence that decided them; nothing when all
        held."""
        requirement(not self.unmet_parts, f"{self.what}: " + "; ".join(self.unmet_parts), *evidence)


def exec_refused(target, refused, *, declared_access: bool) -> None:
    """A command could not be run in a pod (``refused``: kubeexec.ExecRefused, its one reason of ours naming the
    object, the verb and the user or node). NOT RUN when the target does not declare that the run has that access;
    FAIL naming it when it does (a target a substrate wrote has the access it deployed with: declared)."""
    from pytest_slurmflox.reporting.signoff import NOT_RUN_PREFIX

    if not declared_access and target.spec.declared is not None:
        pytest.skip(f"{NOT_RUN_PREFIX}{refused.reason} (the target does not declare this access)")
    requirement(False, "the run may run commands in the worker pods as the target declares", refused.reason)
