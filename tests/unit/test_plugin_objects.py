"""Every object slurmflox registers as a pytest plugin stays hashable.

Why: for a test file outside the folders whose conftests are loaded (a site's own checks in their own folder, run
beside ``--pyargs pytest_slurmflox.suites``), pytest asks pluggy for a hook caller without those conftests, which
builds a set of plugins. An unhashable plugin (a dataclass with the default ``eq=True``) then made the run end in an
INTERNALERROR at that file's first check: the site check was never run, serial or under xdist (found on a live
cluster, #43).
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.harness.history import History
from pytest_slurmflox.harness.sitedeps import SiteDependencies


class _Other:
    def pytest_runtest_setup(self, item):  # a plugin to leave out, as pytest leaves out a folder's conftest
        return None


@pytest.mark.parametrize(
    "plugin",
    [SiteDependencies(state=None), History(writer=None, earlier=None, save=None)],  # type: ignore[arg-type]
    ids=["site-dependencies", "history"],
)
def test_a_registered_plugin_can_be_left_out_of_a_hook_call(plugin):
    manager = pytest.PytestPluginManager()
    other = _Other()
    manager.register(plugin, "ours")
    manager.register(other, "other")
    caller = manager.subset_hook_caller("pytest_runtest_setup", remove_plugins=[other])
    assert caller is not None
    hash(plugin)
