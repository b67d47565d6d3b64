"""The project's own tests.

- Every skip is printed at the end, and one not listed in ``skipguard.ALLOWED`` fails the run (#19).
- pytest-randomly shuffles the unit and report tests (its seed is printed in the header: rerun with
  ``-p randomly --randomly-seed=N`` to reproduce an order-dependent failure, #18). The integration and
  kvm modules are scenarios against one cluster each (bring up, mutate, restore, destroy last), so within such a
  module the written order is put back; the modules themselves still run in shuffled order.
"""

from __future__ import annotations

import os

import pytest
from skipguard import SkipGuard

#: The plugin's in-process (pytester) sessions test what the plugin decides, not pytest-xdist: their acceptance
#: selections run serially unless a test asks for workers. The integration tests' child runs start from a clean
#: environment (acceptance_helpers.clean_env), so they get the plugin's default concurrency.
os.environ.setdefault("SLURMFLOX_WORKERS", "0")

#: Modules whose tests are ordered steps against one deployment (their marks say so).
SCENARIO_MARKS = ("integration", "kvm")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipGuard(config), "slurmflox-skipguard")


def _is_scenario(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) for mark in SCENARIO_MARKS)


def _written_order(item: pytest.Item) -> tuple[int, tuple[int, ...]]:
    """Where the test is defined in its module (line, then parameter index): the scenario's order."""
    callspec = getattr(item, "callspec", None)
    return item.location[1] or 0, tuple(callspec.indices.values()) if callspec is not None else ()


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle (a tryfirst wrapper, before its yield)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    by_module: dict[str, list[int]] = {}
    for position, item in enumerate(items):
        if _is_scenario(item):
            by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(position)
    for positions in by_module.values():
        in_written_order = sorted((items[p] for p in positions), key=_written_order)
        for position, item in zip(positions, in_written_order, strict=True):
            items[position] = item
