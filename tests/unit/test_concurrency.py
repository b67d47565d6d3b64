"""Long waits first, and the default worker count of an acceptance run (#16), as pytest sees them."""

from __future__ import annotations

import pytest

from pytest_slurmflox.harness.concurrency import AUTO_WORKERS, selects_checks, workers_wanted
from pytest_slurmflox.harness.early import EarlyJob, early_jobs

CHECKS = """
import pytest
from pytest_slurmflox.harness.early import EarlyJob
pytestmark = pytest.mark.acceptance

@pytest.mark.T8
@pytest.mark.whole_cohort
def test_whole(): pass

@pytest.mark.T8
@pytest.mark.judges_shared
def test_judge(): pass

@pytest.mark.T7
def test_a(): pass

@pytest.mark.T7
@pytest.mark.long_wait
def test_long(): pass

@pytest.mark.T7
@pytest.mark.early(EarlyJob("y", "#!/bin/bash\\n"))
def test_chain(): pass

@pytest.mark.T3
def test_b(): pass

@pytest.mark.T7
@pytest.mark.long_wait(early=EarlyJob("x", "#!/bin/bash\\n"))
def test_early(): pass
"""


def test_long_waits_first_early_jobs_then_whole_cohort_checks_last_the_rest_in_order(pytester: pytest.Pytester):
    """A check judging a sibling's observation (suites/_shared.py) runs after the other short checks."""
    pytester.makepyfile(test_checks=CHECKS)
    result = pytester.runpytest("-m", "acceptance", "-v", "-p", "no:randomly")
    result.stdout.fnmatch_lines(
        [
            "*::test_long PASSED*",
            "*::test_a PASSED*",
            "*::test_b PASSED*",
            "*::test_judge PASSED*",
            "*::test_chain PASSED*",
            "*::test_early PASSED*",
            "*::test_whole PASSED*",
        ]
    )


class _Item:
    def __init__(self, *chain, **kwargs):
        self.marks = {"long_wait": pytest.mark.long_wait(**kwargs).mark} if kwargs else {}
        if chain:
            self.marks["early"] = pytest.mark.early(*chain).mark

    def get_closest_marker(self, name):
        return self.marks.get(name)


def test_early_jobs_of_the_selected_checks_once_each():
    job = EarlyJob("T7-timelimit", "#!/bin/bash\nsleep 600\n", ("--time=1",))
    assert early_jobs([_Item(early=job), _Item(early=job), _Item()]) == [job]


def test_a_checks_early_jobs_keep_their_order_parents_before_children():
    good, child = EarlyJob("good", "#!/bin/bash\n"), EarlyJob("child", "#!/bin/bash\n", ("-d afterok:{job:good}",))
    assert early_jobs([_Item(good, child), _Item(good, child)]) == [good, child]


@pytest.mark.parametrize(("text", "wanted"), [(None, AUTO_WORKERS), ("auto", AUTO_WORKERS), ("0", 0), ("3", 3)])
def test_workers_option(text, wanted):
    assert workers_wanted(text) == wanted


@pytest.mark.parametrize("text", ["many", "-1"])
def test_a_bad_worker_count_is_a_usage_error(text):
    with pytest.raises(pytest.UsageError, match="--slurmflox-workers"):
        workers_wanted(text)


def _dist(pytester: pytest.Pytester, *args: str) -> str:
    """The xdist options the plugin left in a configured acceptance run (a conftest prints them)."""
    pytester.makeconftest(
        "def pytest_sessionstart(session):\n"
        "    o = session.config.option\n"
        "    print('DIST', getattr(o, 'numprocesses', None), o.dist, getattr(o, 'maxschedchunk', None))\n"
    )
    pytester.makepyfile(test_checks=CHECKS)
    return "\n".join(line for line in pytester.runpytest_subprocess(*args).outlines if line.startswith("DIST"))


@pytest.mark.parametrize("select", [("-m", "acceptance"), ("-m", "T3 or T7"), ("--slurmflox-groups=T3",)])
def test_an_acceptance_run_without_n_gets_the_default_workers(pytester: pytest.Pytester, monkeypatch, select):
    monkeypatch.delenv("SLURMFLOX_WORKERS", raising=False)
    assert _dist(pytester, *select, "-s") == f"DIST {AUTO_WORKERS} load 1"


def test_the_customer_command_is_an_acceptance_run(pytester: pytest.Pytester, monkeypatch):
    """The README's customer command names a target and no ``-m``: it runs every acceptance check, so it gets the
    default workers of ``-m acceptance`` (issue 29: it ran serially). Here it names the fake checks (without a path
    a target means the installed suites, which would reach for the target's login)."""
    monkeypatch.delenv("SLURMFLOX_WORKERS", raising=False)
    pytester.makefile(".yaml", site="login: {host: 127.0.0.1, user: nobody, key: id}\n")  # a valid file
    assert _dist(pytester, "--slurmflox-target=site.yaml", "-s", "test_checks.py") == f"DIST {AUTO_WORKERS} load 1"


class _Config:
    """Just what :func:`selects_checks` reads of a pytest config: the plugin's options and ``-m``. (A pytester run
    with ``--slurmflox-up=local`` would provision a real cluster.)"""

    def __init__(self, markexpr: str = "", **options: str) -> None:
        self.option = type("Option", (), {"markexpr": markexpr})()
        self.options = options

    def getoption(self, dest: str):
        return self.options.get(dest)

    def getini(self, _name: str) -> str:
        return ""


@pytest.mark.parametrize(
    ("markexpr", "options", "acceptance"),
    [
        ("", {"slurmflox_target": "site.yaml"}, True),  # the README's customer command
        ("acceptance", {"slurmflox_up": "local"}, True),
        ("", {"slurmflox_up": "local"}, False),  # a bare --slurmflox-up provisions only
        ("", {"slurmflox_up": "local", "slurmflox_target": "site.yaml"}, False),
        ("not acceptance", {"slurmflox_target": "site.yaml"}, False),
        ("", {}, False),
    ],
)
def test_which_invocations_are_acceptance_runs(monkeypatch, markexpr, options, acceptance):
    for name in ("SLURMFLOX_TARGET", "SLURMFLOX_UP", "SLURMFLOX_GROUPS"):
        monkeypatch.delenv(name, raising=False)
    assert selects_checks(_Config(markexpr, **options)) is acceptance  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "acceptance", "-s", "-n", "0"),  # the user's -n wins
        ("-m", "acceptance", "-s", "-p", "no:xdist"),  # no xdist, no workers
        ("-m", "acceptance", "-s", "--slurmflox-workers=0"),  # asked for a serial run
        ("-s",),  # not an acceptance run: the project's own tests are left alone
        ("-s", "-m", "not acceptance"),  # a negated marker selects no checks
        ("-s", "-m", "T11R or T11U"),  # destructive groups change the cohort: one at a time
        ("-s", "--slurmflox-groups=T3,T11C"),
        ("-s", "-m", "acceptance", "--slurmflox-destructive"),
    ],
)
def test_the_default_stays_out_of_the_users_way(pytester: pytest.Pytester, monkeypatch, args):
    monkeypatch.delenv("SLURMFLOX_WORKERS", raising=False)
    out = _dist(pytester, *args)
    assert not out.startswith(f"DIST {AUTO_WORKERS} load"), out
