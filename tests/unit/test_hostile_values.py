"""Hostile values never become shell syntax (issue 28): a run id is refused before anything runs; a partition,
a group name or a run id that reaches a command line arrives quoted. The commands run on this host through the
real :class:`LocalRunner` (no cluster needed): an injected ``touch`` would leave its file behind."""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile import HOSTILE
from hypothesis import HealthCheck, given, settings

from pytest_slurmflox.base.run import LocalRunner, quoted
from pytest_slurmflox.cluster.slurm import SlurmClient
from pytest_slurmflox.cluster.submit import Jobs
from pytest_slurmflox.harness.options import checked_run_id, run_id_of
from pytest_slurmflox.model.siteaccess import parse_site_access

HOSTILE_RUN_IDS = ["../x", "a/../../b", "a..b", "$(touch {marker})", "a b", "x;touch {marker}", "-rf", "a" * 65]


@pytest.mark.parametrize("run_id", HOSTILE_RUN_IDS)
def test_a_hostile_run_id_is_refused_with_a_usage_error_and_nothing_runs(pytester: pytest.Pytester, run_id: str):
    marker = pytester.path / "pwned"
    ran = pytester.path / "test-ran"
    pytester.makepyfile(f"def test_x():\n    open({str(ran)!r}, 'w').close()\n")
    reports = pytester.path / "reports"
    hostile = run_id.replace("{marker}", str(marker))
    result = pytester.runpytest(f"--slurmflox-run-id={hostile}", f"--slurmflox-reports={reports}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "--slurmflox-run-id" in errors[0] and "nothing was run" in errors[0]
    assert not marker.exists() and not ran.exists() and not reports.exists()


def test_a_hostile_run_id_from_the_environment_is_refused(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("SLURMFLOX_RUN_ID", "../other")
    pytester.makepyfile("def test_x():\n    pass\n")
    assert pytester.runpytest().ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize("run_id", ["20261202-113717-a1b2c3", "wheel", "local-acc", "A.b_c-1", "a" * 64])
def test_ordinary_run_ids_pass(run_id: str):
    assert checked_run_id(run_id) == run_id


def test_an_xdist_worker_checks_the_run_id_it_is_handed():
    """workerinput is data from another process: the worker checks it again before using it."""
    worker = SimpleNamespace(workerinput={"slurmflox_run_id": "../../etc"})
    with pytest.raises(pytest.UsageError, match="xdist controller"):
        run_id_of(worker)  # type: ignore[arg-type]
    assert run_id_of(SimpleNamespace(workerinput={"slurmflox_run_id": "r-1"})) == "r-1"  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_quoted_puts_a_value_inside_a_command_verbatim(tmp_path: Path, value: str):
    marker = tmp_path / "executed"
    text = value.replace("{marker}", str(marker))
    result = LocalRunner().run(quoted("printf '[%%s]' %s && printf %%s done", text)).check()
    assert result.stdout == f"[{text}]done"
    assert not marker.exists()


@pytest.mark.parametrize("partition", ["p; touch {marker}", "$(touch {marker})", "a b"])
def test_a_hostile_partition_reaches_the_runner_quoted(tmp_path: Path, partition: str):
    """srun is not installed here: the line fails, and the injected ``touch`` never ran."""
    marker = tmp_path / "pwned"
    hostile = partition.replace("{marker}", str(marker))
    login = LocalRunner()
    slurm = SlurmClient(user=login, partition=hostile)
    site = parse_site_access({"extra_args": [f"--comment={hostile}"]})  # a value the site access lets through
    jobs = Jobs(login=login, slurm=slurm, run_id="r1", label="T11", partition=hostile, site=site)
    result = jobs.srun("-N1", "true", timeout=20)
    assert not marker.exists()
    assert quoted("%s %s", f"--partition={hostile}", f"--comment={hostile}") in result.command


def test_a_hostile_group_name_reaches_chgrp_quoted(tmp_path: Path):
    """TI's command: the supplementary group is the target file's value."""
    marker, path = tmp_path / "pwned", tmp_path / "file"
    group = f"users; touch {marker}"
    script = quoted("touch %s && chgrp %s %s && stat -c %%U:%%G:%%u:%%g %s", path, group, path, path)
    result = LocalRunner().run(script)
    assert not result.ok and "invalid group" in result.stderr
    assert path.exists() and not marker.exists()


@settings(max_examples=200, deadline=None)
@given(value=HOSTILE)
def test_quoted_makes_one_shell_word_of_any_value(value: str):
    """Whatever a value holds (quotes, ``$(...)``, ``%s``, a backslash at the end), it comes out as one word, read
    back byte for byte by a POSIX shell lexer, between the template's own words."""
    assert shlex.split(quoted("cmd %s tail", value)) == ["cmd", value, "tail"]
    assert shlex.split(quoted("%s", value)) == [value]


def test_quoted_formats_its_template_and_never_a_value():
    """The template is a ``%`` format: a literal ``%`` is written ``%%``; a ``%`` in a value is text."""
    assert quoted("date +%%s -d %s", "50% off") == "date +%s -d '50% off'"
    assert quoted("sinfo -p %s -o '%%N|%%T'", "debug") == "sinfo -p debug -o '%N|%T'"
    assert quoted("echo %s %s", "%s", "%%") == "echo %s %%"
    assert shlex.split(quoted("echo %s %s", "%s", "%%")) == ["echo", "%s", "%%"]
    with pytest.raises(TypeError):
        quoted("printf '%s' %s", "x")  # a literal % not doubled is an error, never a silently shifted value


def test_quoted_runs_a_template_with_literal_percent_signs(tmp_path: Path):
    """Through bash: ``%%`` reaches the command as ``%`` and the value reaches it verbatim."""
    value = "50%s $(touch " + str(tmp_path / "executed") + ")"
    result = LocalRunner().run(quoted("printf '<%%s>' %s", value)).check()
    assert result.stdout == f"<{value}>" and not (tmp_path / "executed").exists()
