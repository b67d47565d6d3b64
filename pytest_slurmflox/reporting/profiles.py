"""Sign-off profiles: what each kind of target must show for a sign-off, and what can never apply to it.

Why a profile: a group some kind of target can never run (the Flox shim on a cluster without Kubernetes, a
throwaway worker on a customer's production cluster) made SIGNED OFF unreachable everywhere when every group was
required. Each kind now has one row of :data:`PROFILES`: the capabilities it never has (a check that SKIPs naming
one of them is NOT APPLICABLE, shown as such, never PASS and never a required SKIP) and the groups that never
apply to it at all. Everything else stays required: a FAIL, a SKIP naming any other capability, or a NOT RUN keeps
the run NOT SIGNED OFF.

A customer's target adds what it does not declare access for (no ``admin`` login, no ``directory``, ``accounting``
or ``rest`` section): a check needing that access or service is NOT APPLICABLE there. A declared capability that
does not answer is a FAIL (pytest_slurmflox/cluster/gates.py ``require``), never NOT APPLICABLE.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.groups import CAPABILITY_GROUPS, DESTRUCTIVE_GROUPS, GROUPS, NAMED_ONLY_GROUPS, SITE_GROUP

#: The verdict of a check or group that cannot apply to this kind of target (never PASS, never a required SKIP).
NOT_APPLICABLE = "NOT APPLICABLE"
#: A skip reason rewritten for a not-applicable check starts with this (JUnit, terminal and HTML show it so).
NOT_APPLICABLE_PREFIX = "not applicable"
_CAPABILITY = re.compile(r"missing capability ([\w.-]+):")

_NO_KUBE = "no Kubernetes API on this kind of target"
_NO_SHIM = "the Flox containerd shim exists only on Kubernetes nodes"
_OWN_REVISION = "the substrate wrote the target's revision from the same settings: no hand-written revision to check"


@dataclass(frozen=True)
class Profile:
    """One kind of target: the capabilities it never has and the groups that never apply to it (group -> why)."""

    name: str
    target: str  #: which targets have this profile (README and report text)
    absent: Mapping[str, str] = field(default_factory=dict)  #: capability -> why this kind never has it
    groups: Mapping[str, str] = field(default_factory=dict)  #: group -> why it never applies here
    #: Named-only groups (groups.NAMED_ONLY_GROUPS) the target declares the key of: only these are required.
    declared: frozenset[str] = frozenset()

    def capability(self, reason: str) -> str | None:
        """The absent capability a skip reason names (``missing capability X: ...``), None when it names none or
        one this kind can have (that SKIP stays a SKIP and blocks a sign-off)."""
        found = _CAPABILITY.search(reason)
        return found.group(1) if found and found.group(1) in self.absent else None

    def not_applicable(self, reason: str) -> str | None:
        """The reason a skipped check is reported with when it is not applicable to this profile, else None."""
        if reason.startswith(NOT_APPLICABLE_PREFIX):
            return reason
        cap = self.capability(reason)
        if cap is None:
            return None
        return f"{NOT_APPLICABLE_PREFIX} (profile {self.name}: {cap}, {self.absent[cap]}): {reason}"

    def required(self, *, workloads_given: bool = False) -> tuple[str, ...]:
        """The groups a sign-off needs on this kind of target: every non-destructive group that can apply (TW
        only with a workload corpus, a named-only group only where the target declares its key; never the site's
        own checks, which block only when they FAIL)."""
        return tuple(
            g
            for g in GROUPS
            if g not in DESTRUCTIVE_GROUPS
            and g != SITE_GROUP
            and g not in self.groups
            and (g != "TW" or workloads_given)
            and (g not in NAMED_ONLY_GROUPS or g in self.declared)
        )


_LOCAL = Profile(
    "local",
    "substrate `local`: Slurm daemons in namespaces on this host, no Kubernetes",
    absent={"kubernetes": _NO_KUBE, "flox-shim": _NO_SHIM, "declared-revision": _OWN_REVISION},
    groups={"T1": "the Flox shim on the slurmd CRI sandbox needs Kubernetes nodes"},
)
_QEMU = Profile(
    "qemu",
    "substrate `qemu`: the reference, Kubernetes on VMs we own",
    absent={"declared-revision": _OWN_REVISION},
    # TF's checks need a throwaway worker pinned to another runtime (abilities.IsolatingWorkers), which only the
    # local pool can start: without this row a healthy qemu cluster could never be signed off (tests/unit/
    # test_profiles.py reasons it from the capabilities each kind has)
    groups={"TF": "the qemu NodeSet pool starts no throwaway worker (IsolatingWorkers is the local pool's only)"},
)
_KUBERNETES = Profile(
    "kubernetes",
    "substrate `existing` with a `kubernetes` section: a customer's cluster",
    absent={"isolated-worker": "a throwaway worker would change a customer's cluster"},
    groups={"TF": "starting an unrealizable worker would change a customer's cluster"},
)
_EXISTING = Profile(
    "existing",
    "substrate `existing` without a `kubernetes` section: a customer's Slurm cluster",
    absent={
        "kubernetes": _NO_KUBE,
        "flox-shim": _NO_SHIM,
        "worker-pool": "nothing lists the workers but Slurm",
        "node-admin": _NO_KUBE,
        "isolated-worker": "a throwaway worker would change a customer's cluster",
        "task-prolog": "a Slurm cluster outside Kubernetes need not run a TaskProlog (required where one is named)",
    },
    groups={
        "T1": "the Flox shim on the slurmd CRI sandbox needs Kubernetes nodes",
        "TF": "starting an unrealizable worker would change a customer's cluster",
    },
)
#: Every kind of target: the one table README "Sign-off profiles" and each report print.
PROFILES: Mapping[str, Profile] = {p.name: p for p in (_LOCAL, _QEMU, _KUBERNETES, _EXISTING)}
#: A target that cannot be read: nothing is not applicable, so nothing signs off without every group.
UNKNOWN = Profile("unknown", "an unreadable or missing target file")

#: Access a target file declares by a section; undeclared, the checks needing it are NOT APPLICABLE there.
_ACCESS = {"admin": "the target file declares no admin login"}


def profile_of(spec: Any) -> Profile:
    """The profile of a target (``spec`` a TargetSpec, None when unreadable), with what it does not declare."""
    if spec is None:
        return UNKNOWN
    kind = spec.substrate if spec.substrate in ("local", "qemu") else "existing"
    if kind == "existing" and spec.kubernetes is not None:
        kind = "kubernetes"
    base = PROFILES[kind]
    absent = dict(base.absent)
    groups = dict(base.groups)
    if spec.admin is None:
        absent.update(_ACCESS)
    for group, service in CAPABILITY_GROUPS.items():
        if not spec.declares(service):
            absent[service] = f"the target file declares no {service} section"
            groups[group] = f"the target file declares no {service} section"
    declared = frozenset(g for g, key in NAMED_ONLY_GROUPS.items() if spec.declares_key(key))
    return Profile(base.name, base.target, absent, groups, declared)


def readme_table() -> str:
    """README "Sign-off profiles": one row per kind of target (tests keep the README equal to it)."""
    rows = [
        "| profile | target | not applicable: groups | not applicable: checks needing | required groups |",
        "|---|---|---|---|---|",
    ]
    for p in PROFILES.values():
        groups = ", ".join(p.groups) or "none"
        caps = ", ".join(f"`{c}`" for c in p.absent) or "none"
        rows.append(f"| `{p.name}` | {p.target} | {groups} | {caps} | {', '.join(p.required())} |")
    return "\n".join(rows)


def table_lines(profile: Profile) -> list[str]:
    """The profile of this run, as the report prints it."""
    lines = [f"profile {profile.name}: {profile.target}"]
    lines.extend(f"  not applicable: group {g} ({why})" for g, why in profile.groups.items())
    lines.extend(f"  not applicable: checks needing {c} ({why})" for c, why in profile.absent.items())
    return lines
