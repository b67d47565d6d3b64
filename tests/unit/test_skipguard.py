"""The skip guard itself, in an in-process pytest run: an unlisted skip fails the run, a listed one does not."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = """
from skipguard import SkipGuard

def pytest_configure(config):
    config.pluginmanager.register(SkipGuard(config))
"""


def test_an_unlisted_skip_fails_the_run_naming_the_test_and_reason(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_x="import pytest\n\ndef test_ok():\n    pass\n\ndef test_gone():\n    pytest.skip('no frobnicator')\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "1 passed, 1 skipped" in out
    assert "UNEXPECTED: test_x.py::test_gone: no frobnicator" in out
    assert "unexpected SKIP fails the run: test_x.py::test_gone (no frobnicator)" in out


def test_a_listed_skip_is_printed_and_accepted(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.mkdir("tests")
    live = "import pytest\n\ndef test_live_x():\n    pytest.skip('no Kubernetes API here: x')\n"
    pytester.makepyfile(**{"tests/unit/test_kube": live})
    result = pytester.runpytest_inprocess("-p", "no:randomly", "--import-mode=importlib", "tests")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "listed: tests/unit/test_kube.py::test_live_x: no Kubernetes API here" in result.stdout.str()


def test_a_failing_run_stays_failed_and_xfail_is_not_a_skip(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_y="import pytest\n\n@pytest.mark.xfail(strict=True)\ndef test_xf():\n    assert 0\n\n"
        "def test_bad():\n    assert 0\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "skips (" not in result.stdout.str()


def test_scenario_modules_keep_their_written_order_under_random_order(pytester: pytest.Pytester):
    """pytest-randomly shuffles everything; the conftest puts an integration module's steps back in written order
    (bring up first, destroy last) while a unit module stays shuffled."""
    pytester.makeconftest((Path(__file__).resolve().parents[1] / "conftest.py").read_text())
    steps = "".join(f"def test_step_{n}():\n    print('STEP {n}')\n\n" for n in ("a", "z", "m", "b", "y", "c"))
    pytester.makepyfile(test_scenario="import pytest\npytestmark = pytest.mark.integration\n\n" + steps)
    units = "".join(f"def test_unit_{n}():\n    pass\n\n" for n in range(12))
    pytester.makepyfile(test_units=units)
    pytester.makeini("[pytest]\nmarkers =\n    integration: x\n")
    orders = set()
    for seed in (1, 2, 3):
        result = pytester.runpytest_inprocess("-p", "randomly", f"--randomly-seed={seed}", "-v", "-s")
        assert result.ret == pytest.ExitCode.OK
        steps_run = [line.split("STEP ")[1][0] for line in result.stdout.lines if "STEP " in line]
        assert steps_run == ["a", "z", "m", "b", "y", "c"], steps_run
        orders.add(tuple(line for line in result.stdout.lines if "test_unit_" in line and "PASSED" in line))
    assert len(orders) > 1, "the unit module was not shuffled: the guard would see no order-dependence"
