"""The skip guard itself, in an in-process pytest run: an unlisted skip fails the run, a listed one does not."""

from __future__ import annotations

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
    pytester.makepyfile(**{"tests/test_kube_client": live})
    result = pytester.runpytest_inprocess("-p", "no:randomly", "--import-mode=importlib", "tests")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "listed: tests/test_kube_client.py::test_live_x: no Kubernetes API here" in result.stdout.str()


def test_a_failing_run_stays_failed_and_xfail_is_not_a_skip(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_y="import pytest\n\n@pytest.mark.xfail(strict=True)\ndef test_xf():\n    assert 0\n\n"
        "def test_bad():\n    assert 0\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "skips (" not in result.stdout.str()
