"""How an acceptance run spends its wall time: long waits start first, and checks run concurrently.

A run is as long as its longest check only if that check starts at once and everything else fits beside it. The
longest checks here wait on Slurm for a span the check cannot shorten (T7's time limit: Slurm acts in whole minutes,
checked periodically); such checks carry the ``long_wait`` marker. One whose job is an early job
(``long_wait(early=...)``, pytest_slurmflox/harness/early.py) has its job running since the pre-flight, so
:func:`order_long_waits` puts it last: every worker runs the short checks beside the job, and the check only
collects the result. So does a check whose jobs are all early jobs (``early(...)``: an array, a dependency
chain) or whose throwaway worker is started with the run (TF's time out of Slurm,
pytest_slurmflox/harness/throwaway.py): it
waits beside the other checks instead of holding a process. Any other long wait goes first:
under pytest-xdist ``--dist load`` the first items go out first, so it runs on one worker from the start while the
other workers take the rest.

:func:`apply_default_workers` makes that the default: an acceptance run with pytest-xdist installed and no ``-n``
of the user's runs on :data:`AUTO_WORKERS` workers (``--slurmflox-workers``; ``0`` runs serially). The controller
provisions once and the workers reuse its target (plugin.py), and each check's jobs are its own, so the verdicts do
not depend on the worker count (the integration test compares them with a serial run).
"""

from __future__ import annotations

from typing import Any

import pytest

from ..model.groups import DESTRUCTIVE_GROUPS, GROUPS, parse_groups
from .early import EARLY
from .options import get_option

#: The marker of a check that waits a fixed span on Slurm: scheduled first.
LONG_WAIT = "long_wait"
#: The marker of a check that needs every worker to itself (T8's whole-worker step): scheduled after all others.
#: Pending, its exclusive allocation across the cohort is the oldest job, and Slurm's backfill reserves every worker
#: for it: every check submitted after it waited (in CI, T7's scancel and hold/release past their pass, on healthy
#: clusters), until the time-limit job it waits for ended.
WHOLE_COHORT = "whole_cohort"
#: The marker of a check that judges an observation a sibling check makes once in the run (suites/_shared.py): it
#: runs after the other short checks, so it finds the observation made instead of waiting on the run's lock for it.
JUDGES_SHARED = "judges_shared"

#: Workers of a default acceptance run: two xdist workers keep the time-limit wait and the other checks side by side
#: (docs/performance.md "Speed" has the measurement behind the number).
AUTO_WORKERS = 2


def _place(item: Any) -> int:
    dependency = item.get_closest_marker("dependency")
    if dependency is not None and dependency.kwargs.get("depends"):
        return 5  # waits for what it depends on (harness/sitedeps.py): after everything else, so it never blocks it
    if item.get_closest_marker(WHOLE_COHORT) is not None:
        return 4
    if item.get_closest_marker(EARLY) is not None:
        return 3
    mark = item.get_closest_marker(LONG_WAIT)
    if mark is None:
        return 2 if item.get_closest_marker(JUDGES_SHARED) is not None else 1
    return 3 if mark.kwargs.get("early") is not None else 0


def order_long_waits(items: list[Any]) -> None:
    """In place: long waits first, then the short checks, those judging a sibling's observation after them, long
    waits with an early job after the rest, checks that hold the whole cohort, then checks that depend on others
    (pytest-dependency's ``depends``) last; each part in pytest's order (a stable sort)."""
    items.sort(key=_place)


def workers_wanted(value: str | None) -> int | None:
    """``--slurmflox-workers``: ``auto``/unset -> :data:`AUTO_WORKERS`, a number -> itself (0: serial)."""
    text = (value or "auto").strip().lower()
    if text == "auto":
        return AUTO_WORKERS
    try:
        number = int(text)
    except ValueError:
        raise pytest.UsageError(f"--slurmflox-workers: expected auto or a number, not {value!r}") from None
    if number < 0:
        raise pytest.UsageError(f"--slurmflox-workers: expected auto or a number >= 0, not {value!r}")
    return number


def _named(config: pytest.Config) -> set[str]:
    """The marker names a ``-m`` expression selects (not the negated ones)."""
    expr = (config.option.markexpr or "").replace("(", " ").replace(")", " ").split()
    return {t for i, t in enumerate(expr) if i == 0 or expr[i - 1] != "not"}


def selects_destructive(config: pytest.Config) -> bool:
    """Whether a destructive (lifecycle) group may run: they change the cohort under every other check (a live
    update, a CPU revision, a failed revision), so such a run stays serial, one group at a time (seen: T11U's update
    never converged while T11C ran beside it on another xdist worker)."""
    groups = set(parse_groups(get_option(config, "slurmflox_groups")) or ())
    named = (_named(config) | groups) & DESTRUCTIVE_GROUPS
    return bool(named or get_option(config, "slurmflox_destructive"))


def selects_checks(config: pytest.Config) -> bool:
    """Whether this is an acceptance run: checks selected by marker (``-m acceptance``, ``-m "T3 or T7"``) or group
    list, or the README's customer command, a target named without a mark expression (``pytest
    --slurmflox-target=site.yaml``: it runs every acceptance check, so it gets the same
    concurrency as ``-m acceptance``). A bare ``--slurmflox-up`` is not one (it
    provisions; a no-change converge must stay a matter of seconds, without starting workers that would find
    nothing to run), nor is a target with ``--slurmflox-up`` beside it."""
    if _named(config) & ({"acceptance"} | set(GROUPS)) or get_option(config, "slurmflox_groups"):
        return True
    customer = get_option(config, "slurmflox_target") and not get_option(config, "slurmflox_up")
    return bool(customer and not (config.option.markexpr or "").strip())


def default_workers(config: pytest.Config) -> int:
    """The xdist workers the plugin sets for this invocation, 0 when it leaves pytest's options alone: only an
    acceptance run on the xdist controller, with pytest-xdist active and neither ``-n``/``--dist`` nor a debugger
    given by the user."""
    option = config.option
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return 0
    user_chose = getattr(option, "numprocesses", None) is not None or getattr(option, "dist", "no") != "no"
    debugging = getattr(option, "usepdb", False) or getattr(option, "trace", False)
    if user_chose or debugging or option.collectonly or not selects_checks(config) or selects_destructive(config):
        return 0
    return workers_wanted(get_option(config, "slurmflox_workers")) or 0


def apply_default_workers(config: pytest.Config) -> int:
    """Set pytest-xdist's options as ``-n N --dist load --maxschedchunk 1`` would (called from a ``tryfirst``
    ``pytest_configure``, before xdist's ``trylast`` one creates its distributed session). ``--maxschedchunk 1``
    keeps only one item queued behind the long wait on its worker. Returns the worker count set (0: none)."""
    workers = default_workers(config)
    if workers:
        config.option.numprocesses = workers
        config.option.dist = "load"
        config.option.tx = ["popen"] * workers
        if getattr(config.option, "maxschedchunk", "absent") is None:
            config.option.maxschedchunk = 1
    return workers
