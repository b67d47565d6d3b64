"""Which collected tests run: acceptance checks only when asked for, destructive groups only when named or
allowed, named-only groups (TB) only when named, TW checks only with a workload
corpus, and the project's own tests never in a target run without paths.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..model.groups import DESTRUCTIVE_GROUPS, GROUPS, NAMED_ONLY_GROUPS, item_group, parse_groups
from ..model.settings import KEYS
from ..model.workdir import Workdir
from ..reporting.outcome import Deselected
from .options import OPTIONS, get_option

NOT_ACCEPTANCE = "not an acceptance check (a slurmflox selection option without paths runs the suites only)"
#: Options that make an invocation a main job (a run of the product, not of the project's tests).
MAIN_JOB_OPTIONS = ("slurmflox_up", "slurmflox_target", "slurmflox_groups", "slurmflox_signoff", "slurmflox_retest")
NOT_REQUESTED = "acceptance not requested (use -m acceptance, --slurmflox-groups or a target)"


def mark_tokens(config: pytest.Config) -> set[str]:
    expr = config.option.markexpr or ""
    return set(expr.replace("(", " ").replace(")", " ").split())


def main_job(config: pytest.Config) -> bool:
    """A run of the product rather than of the project's tests: a substrate, a target, groups, a sign-off, or a mark
    expression naming acceptance or a group."""
    if any(get_option(config, option) for option in MAIN_JOB_OPTIONS):
        return True
    tokens = re.findall(r"[A-Za-z0-9_]+", config.option.markexpr or "")
    return any(t in GROUPS or t == "acceptance" for i, t in enumerate(tokens) if i == 0 or tokens[i - 1] != "not")


def addressed(config: pytest.Config, workdir: Workdir) -> bool:
    """Whether this invocation concerns slurmflox at all: a main job, a slurmflox flag on the command line, a
    ``SLURMFLOX_*`` variable in the environment, or a work dir that records a deployment. A pytest run of another
    project in the same venv is none of these (a bare ``WORKDIR`` or ``NODES`` there is not ours)."""
    flags = [*(option.dest for option in OPTIONS), *(spec.dest for spec in KEYS)]
    return (
        main_job(config)
        or any(config.getoption(dest, None) not in (None, False) for dest in flags)
        or any(name.startswith("SLURMFLOX_") for name in os.environ)
        or workdir.deployment.is_file()
    )


def installed_suites() -> Path | None:
    """Where ``pytest_slurmflox.suites`` is imported from (the checkout's ``suites/`` under an editable install)."""
    spec = importlib.util.find_spec("pytest_slurmflox.suites")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]).resolve() if locations else None


def main_job_paths(config: pytest.Config, user_paths: bool) -> list[str] | None:
    """The paths a main job collects when the user named none: the suites, nothing else, in the project's checkout
    (where ``testpaths`` also names ``tests/``, whose conftest and modules need the test extra: a newcomer's first
    command must never load, collect or report them) and wherever a target file is given (a target file
    means the suites, as ``--pyargs pytest_slurmflox.suites`` would collect them: without it a customer's
    ``pytest --slurmflox-target=site.yaml`` once collected nothing and still wrote a report). None leaves pytest's
    own choice (the user named paths, or a mark expression alone outside the checkout)."""
    if user_paths or not main_job(config):
        return None
    suites = installed_suites()
    if suites is None:
        return None
    if suites.is_relative_to(config.rootpath.resolve()) or get_option(config, "slurmflox_target"):
        return [str(suites)]
    return None


def pyargs_anchors(names: Iterable[str]) -> list[str]:
    """Where the modules a ``--pyargs`` run names live (a module's file, a package's directory), for pytest's
    initial conftest discovery. When no argument is an existing path, pytest anchors that discovery at the cwd and
    its ``test*`` directories: in the checkout, ``--pyargs pytest_slurmflox.suites`` loaded ``tests/conftest.py``,
    the project's own test configuration (serial by default, and its skip guard failed the not-applicable checks).
    Names that do not resolve are left out: pytest reports them when it collects."""
    anchors = []
    for name in names:
        module = str(name).split("::", 1)[0]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        locations = list(spec.submodule_search_locations or [])
        where = locations[0] if locations else spec.origin
        if where and Path(where).exists():
            anchors.append(str(Path(where).resolve()))
    return anchors


def user_named_paths(config: pytest.Config) -> bool:
    """Whether the user named what to collect (paths, node ids, ``--pyargs`` modules), not testpaths or the cwd."""
    return config.args_source == pytest.Config.ArgsSource.ARGS


def acceptance_requested(config: pytest.Config) -> bool:
    """Asked for by marker (``-m acceptance``, ``-m T3``), by group list, by naming a target to test, by asking for
    a sign-off, or by naming the suites beside ``--slurmflox-up``. A bare ``--slurmflox-up`` is not a request:
    it provisions or converges and exits (:func:`plain_operation`)."""
    return bool(
        mark_tokens(config) & ({"acceptance"} | set(GROUPS))
        or get_option(config, "slurmflox_groups")
        or get_option(config, "slurmflox_target")
        or get_option(config, "slurmflox_signoff")
        or get_option(config, "slurmflox_retest")
        or (get_option(config, "slurmflox_up") and user_named_paths(config))
    )


def plain_operation(config: pytest.Config) -> bool:
    """``pytest --slurmflox-up[=...]`` with nothing selected: provision or converge, then exit without collecting
    (a no-change converge is a matter of seconds)."""
    return bool(get_option(config, "slurmflox_up")) and not acceptance_requested(config)


def selects_a_target_run(config: pytest.Config) -> bool:
    """A slurmflox selection option (``--slurmflox-up``, ``--slurmflox-target``, ``--slurmflox-groups``) without
    paths of the user's own runs acceptance checks only: in the checkout, testpaths would otherwise also collect
    the project's tests. Paths the user names (``tests``, ``--pyargs pytest_slurmflox.suites``) are honoured."""
    selecting = any(
        get_option(config, o) for o in ("slurmflox_up", "slurmflox_target", "slurmflox_groups", "slurmflox_retest")
    )
    return selecting and config.args_source != pytest.Config.ArgsSource.ARGS


def reports_wanted(config: pytest.Config) -> bool:
    """Whether this invocation runs acceptance checks (decided at configure time, when pytest-html and junitxml
    read their output paths): a main job that is not plain operation (a plain ``up`` leaves no report)."""
    return main_job(config) and not plain_operation(config)


def wanted_groups(config: pytest.Config) -> set[str] | None:
    """``--slurmflox-groups`` as a set; an unknown group is a usage error."""
    named = parse_groups(get_option(config, "slurmflox_groups"))
    if not named:
        return None
    unknown = sorted(set(named) - set(GROUPS))
    if unknown:
        raise pytest.UsageError(
            f"--slurmflox-groups: unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}; nothing was run"
        )
    return set(named)


@dataclass
class Selection:
    """The selection rules of one invocation, decided once from the options."""

    wanted: set[str] | None
    named_destructive: frozenset[str]
    allow_destructive: bool
    requested: bool
    target_run: bool
    deselected: Deselected = field(default_factory=Deselected)
    named_only: frozenset[str] = frozenset()  #: the named-only groups (groups.NAMED_ONLY_GROUPS) this run names
    retest: bool = False  #: a re-test (``--slurmflox-retest``) runs the per-worker checks only

    @classmethod
    def of(cls, config: pytest.Config, substrate: str | None, deselected: Deselected | None = None) -> Selection:
        wanted = wanted_groups(config)
        allow = bool(get_option(config, "slurmflox_destructive"))
        named = (DESTRUCTIVE_GROUPS & mark_tokens(config)) | ((wanted or set()) & DESTRUCTIVE_GROUPS)
        if named and substrate == "existing" and not allow:
            raise pytest.UsageError(
                f"destructive group(s) {', '.join(sorted(named))} against an existing cluster need "
                "--slurmflox-destructive; nothing was run"
            )
        record = deselected if deselected is not None else Deselected()
        asked = frozenset((set(NAMED_ONLY_GROUPS) & mark_tokens(config)) | ((wanted or set()) & set(NAMED_ONLY_GROUPS)))
        retest = bool(get_option(config, "slurmflox_retest"))
        requested, target_run = acceptance_requested(config), selects_a_target_run(config)
        return cls(wanted, named, allow, requested, target_run, record, asked, retest)

    def why_dropped(self, item: Any) -> str | None:
        """None to keep the item, else the reason it is deselected."""
        if item.get_closest_marker("acceptance") is None:
            return NOT_ACCEPTANCE if self.target_run else None
        group = item_group(item)
        if not self.requested:
            return NOT_REQUESTED
        if self.wanted is not None and group not in self.wanted:
            return "group not in --slurmflox-groups"
        if group in DESTRUCTIVE_GROUPS and group not in self.named_destructive and not self.allow_destructive:
            return "destructive group not asked for"
        if group in NAMED_ONLY_GROUPS and group not in self.named_only:
            return f"group {group} runs only when named (-m {group} or --slurmflox-groups {group})"
        if self.retest and item.get_closest_marker("per_worker") is None:
            return "a re-test (--slurmflox-retest) runs the per-worker checks only"
        return None

    def split(self, items: Iterable[Any]) -> tuple[list[Any], list[Any]]:
        """(kept, dropped), recording each dropped item's reason (and its acceptance group's) in
        :attr:`deselected`."""
        keep, drop = [], []
        for item in items:
            reason = self.why_dropped(item)
            if reason is None:
                keep.append(item)
            else:
                drop.append(item)
                if item.get_closest_marker("acceptance") is not None:
                    self.deselected.record(item_group(item), reason, nodeid=item.nodeid)
                else:
                    self.deselected.record(None, reason)
        return keep, drop


def is_workload_check(marks: Iterable[Any]) -> bool:
    """A TW acceptance check: it exists only when a workload corpus is given."""
    names = {getattr(mark, "name", None) for mark in marks}
    return {"TW", "acceptance"} <= names
