"""The acceptance groups and the markers: one catalogue that selection, sign-off and reports read.

Kept apart from the plugin so the sign-off logic and the report writers can name groups without importing pytest
hooks (the plugin imports them, never the other way round).
"""

from __future__ import annotations

from typing import Any

#: Acceptance groups in report order. Lifecycle groups are destructive and opt-in.
GROUPS: dict[str, str] = {
    "T1": "Flox shim executed on the slurmd CRI sandbox",
    "T2": "generation-pinned realization inside every worker",
    "T3": "task-profile initialization complete and consistent",
    "T4": "ordinary sbatch, no per-job Kubernetes object",
    "T5": "interactive and multi-step Slurm work",
    "T6": "multi-node MPI (srun --mpi, the declared plugin)",
    "T7": "arrays, dependencies, hold/release, scancel, time limits",
    "T8": "resources and process cleanup",
    "T9": "shared storage and the login endpoint",
    "T10": "worker safety, isolation and placement",
    "T11": "runtime-revision consistency",
    "TP": "task-environment provenance across export modes",
    "TI": "unprivileged identity end to end",
    "TF": "failure isolation of an unrealizable runtime",
    "TD": "directory identity end to end (LDAP)",
    "TW": "customer workload corpus",
    "TB": "performance baselines: every worker against the declared band and the cohort's median",
    "TA": "accounting: jobs and steps in sacct, associations and limits enforced",
    "TR": "REST submission through slurmrestd with the sbatch task-environment contract",
    "T11R": "rerun idempotency and incomplete-maintenance recovery",
    "T11U": "live whole-cohort runtime update",
    "T11C": "CPU-capacity revision and stale node-record cleanup",
    "T11F": "a failed runtime revision stays unavailable",
    "TDC": "a directory change reaches the next job (edits the directory)",
    "TAR": "accounting survives a restart of slurmdbd and of slurmctld",
    "site": "the site's own checks (@pytest.mark.site, docs/site-checks.md)",
}
DESTRUCTIVE_GROUPS = frozenset({"T11R", "T11U", "T11C", "T11F", "TDC", "TAR"})
#: Groups required only where the target declares the service they check (every local deployment declares it).
CAPABILITY_GROUPS: dict[str, str] = {"TD": "directory", "TA": "accounting", "TR": "rest"}
#: Groups that run only when named (``-m TB``, ``--slurmflox-groups TB``): read-only, but they cost a minute of
#: measuring a default run has no use for. Group -> the target-file key that makes it required for a sign-off
#: (reporting/profiles.py: not applicable without it).
NAMED_ONLY_GROUPS: dict[str, str] = {"TB": "expect.performance"}
#: Groups whose SKIP fails a sign-off (TW only exists when a workload corpus is given; a named-only group is
#: required only where the target declares its key).
#: The group of a site's own checks: shown, judged and blocking when it FAILs, never required (a site has its own).
SITE_GROUP = "site"
REQUIRED_GROUPS = tuple(
    group
    for group in GROUPS
    if group not in DESTRUCTIVE_GROUPS and group not in NAMED_ONLY_GROUPS and group != SITE_GROUP
)

MARKERS = {
    "acceptance": "an acceptance check against a target (selected with -m acceptance)",
    **{group: f"acceptance group {group}: {text}" for group, text in GROUPS.items()},
    "long_wait": "waits a fixed span on Slurm (a time limit): scheduled first so the wait overlaps the rest; "
    "with early=EarlyJob(...) its job is submitted after the pre-flight and the check runs last",
    "early": "early(EarlyJob(...) or EarlyWorker(...), ...): the check's jobs (pytest_slurmflox/harness/early.py) or "
    "throwaway "
    "workers (pytest_slurmflox/harness/throwaway.py) are started after the pre-flight and the check, run last, judges "
    "them",
    "whole_cohort": "holds every worker at once (an exclusive step across the cohort): runs after every other check, "
    "so its pending allocation never holds another check's job behind it",
    "per_worker": "a per-worker requirement shown on every worker in one step: its FAIL names the workers that "
    "missed it (what --slurmflox-quarantine drains); a --slurmflox-retest run runs these checks only",
    "judges_shared": "judges an observation a sibling check makes once in the run (suites/_shared.py): runs after "
    "the other short checks, so it finds the observation made",
    "destructive": "mutates or disrupts the worker deployment; runs only when asked for",
    "needs_kube": "needs the target's Kubernetes API (SKIPs naming it otherwise)",
    "needs_flox": "needs the Flox containerd shim (SKIPs naming it otherwise)",
    "integration": "project test: needs root and the embedded local substrate",
    "kvm": "project test: boots QEMU VMs (KVM where it works, TCG otherwise)",
}


def item_group(item: Any) -> str | None:
    """The acceptance group a collected test belongs to (its first group marker), None for other tests."""
    for mark in item.iter_markers():
        if mark.name in GROUPS:
            return str(mark.name)
    return None


def parse_groups(text: str | None) -> list[str] | None:
    """``--slurmflox-groups`` as a list (None when not given)."""
    if not text:
        return None
    return [group.strip() for group in text.split(",") if group.strip()]
